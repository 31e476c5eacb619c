"""Hostile-input fuzz of the node core (`NavAdapter`), issue 9 defects 10-12 and issue 26: a realistic closed-loop
stream (`mnemo_mpc.ros.stream`) mixed with malformed messages (`mnemo_mpc.ros.hostile`), at 10 and 50 Hz: no
exception out of a callback or a tick and none swallowed inside (no "error" tick, no message dropped on an unexpected
exception, no ERROR log), no tick over 1 s, no non-finite command, no velocity or acceleration limit violation at the
control period, stale input stops the robot; goals at every decade of distance and episodes without a global path.
Each check is shown to fire: the fuzz is run against injected faults (`test_fuzz_reports_*`). Tick times are measured
by `mnemo-mpc bench node`."""

from __future__ import annotations

import json
import logging
import random
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros.hostile import (
    HOSTILE,
    FuzzConfig,
    FuzzReport,
    HostileScenario,
    Monitor,
    describe,
    run_fuzz,
)
from mnemo_mpc.ros.stream import Delivery

pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")

IN_MEMORY_FORMS = {"grid_as_list", "grid_as_array_b"}  # how rclpy hands data to a callback, not a CDR payload


def _assert_contract(report: FuzzReport, messages: int) -> None:
    print("\n" + report.text(max_examples=3))
    assert report.messages >= messages
    assert report.violations == 0, report.text(max_examples=3)
    # the fuzz exercised what it claims: hostile input of every label, a robot that drove, inputs that went stale
    assert report.labels["bad"] > 0.1 * messages and report.labels["may"] > 0 and report.labels["stale"] > 0
    assert report.moving_ticks > 0.1 * report.ticks and report.stale_ticks > 0
    # rejections were observed, every bad message among them (the check above counts each accepted one)
    assert report.summary()["rejected_messages"] >= report.labels["bad"] > 0
    # the controller planned its own path (no global path) and towards far goals
    assert report.own_path_ticks > 0 and report.far_goal_ticks > 0 and report.own_path_episodes > 0
    far = {v for v in report.variants if v.startswith("goal_far_1e")}
    assert len(far) >= 6, far


@pytest.mark.parametrize("rate_hz, hostile_per_tick", [(10.0, 8.0), (50.0, 6.0)])
def test_fuzz_node_core(rate_hz, hostile_per_tick):
    # 3,000 messages meet every coverage check of the contract (the slow tier sends 100,000); 6,000 took twice the time
    cfg = FuzzConfig(seed=int(rate_hz), messages=3_000, hostile_per_tick=hostile_per_tick)
    report = run_fuzz(cfg, NavParams(control_rate_hz=rate_hz))
    _assert_contract(report, cfg.messages)


@pytest.mark.slow
@pytest.mark.parametrize("rate_hz", [10.0, 50.0])
def test_fuzz_node_core_large(rate_hz):
    cfg = FuzzConfig(seed=1000 + int(rate_hz), messages=100_000, huge_grids=10, clock_resets=10, dropouts=40)
    report = run_fuzz(cfg, NavParams(control_rate_hz=rate_hz))
    _assert_contract(report, cfg.messages)


# --- the generator and the checker themselves -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def scenario():
    return HostileScenario(FuzzConfig(messages=100, huge_grids=0), NavParams())


def test_every_hostile_message_survives_the_wire(scenario):
    """Each variant is a message a ROS 2 publisher can send: CDR-serialisable, read back unchanged."""
    for name in [*sorted(HOSTILE), "grid_huge"]:
        for d in scenario.hostile(name, scenario.now):
            assert d.label in ("clean", "may", "stale", "bad")
            if name not in IN_MEMORY_FORMS:
                assert describe(scenario.factory.roundtrip(d.msg)) == describe(d.msg), name


def test_the_stream_is_seeded():
    def trace(seed):
        sc = HostileScenario(FuzzConfig(seed=seed, messages=2000), NavParams())
        out = []
        for _ in range(40):
            out += [(d.topic, d.variant, round(d.recv_s, 9), describe(d.msg)) for d in sc.deliveries()]
            sc.advance(np.array([0.1, 0.2]))
        return out

    assert trace(3) == trace(3)
    assert trace(3) != trace(4)


def test_the_streams_robot_has_the_drive_the_node_compensates():
    """A profile whose node inverts a lagging drive (the Jackal: 50 ms latency, lags 0.2 / 0.15 s, slip) gets a stream
    robot with that drive: a command acts after the latency, then the velocity follows it as the first-order lag; the
    built-in robot (no dynamics) follows its commands exactly, as before."""
    jackal = NavParams.from_yaml(Path(__file__).resolve().parents[1] / "config" / "robots" / "jackal.yaml")
    sc = HostileScenario(FuzzConfig(messages=100, huge_grids=0), jackal)
    command, period = np.array([0.5, 1.0]), 1.0 / jackal.control_rate_hz
    sc.state.velocity[:] = 0.0
    sc.advance(command)  # 40 ms < the 50 ms latency: not acting yet
    assert np.allclose(sc.state.velocity, 0.0)
    sc.advance(command)  # acting for the last 30 ms of this period
    lag = np.array([jackal.dynamics_lag_v_s, jackal.dynamics_lag_w_s])
    # odometry's twist: the wheels' speed, the body's yaw rate (slip_w of the wheels')
    expected = command * -np.expm1(-(2 * period - jackal.dynamics_latency_s) / lag) * [1.0, jackal.dynamics_slip_w]
    assert np.allclose(sc.state.velocity, expected, rtol=0.02)
    exact = HostileScenario(FuzzConfig(messages=100, huge_grids=0), NavParams())
    exact.advance(command)
    assert np.array_equal(exact.state.velocity, command)


def _twist(v, w):
    return SimpleNamespace(linear=SimpleNamespace(x=v), angular=SimpleNamespace(x=0.0, z=w))


def test_monitor_flags_each_kind_of_violation(scenario):
    params = NavParams()  # 10 Hz: steps of 0.1 m/s and 0.3 rad/s per period
    report = FuzzReport(rate_hz=params.control_rate_hz)
    monitor = Monitor(params, report)
    f, s, now = scenario.factory, scenario.state, 100.0

    def feed(t):
        monitor.delivered(Delivery("odometry", f.odometry(s.pose, s.velocity, t), t, "clean", "clean"))
        monitor.delivered(Delivery("grid", f.grid(s.grid, t), t, "clean", "clean"))

    def tick(k, command):
        cmd = None if command is None else np.asarray(command, float)
        monitor.tick(k, now + 0.1 * k, cmd, None if cmd is None else _twist(*cmd))

    feed(now)
    tick(0, [0.1, 0.3])  # ok
    assert report.violations == 0
    tick(1, [0.3, 0.3])  # +0.2 m/s in one period
    tick(2, [0.3, np.nan])
    tick(3, None)  # silent while moving at 0.3 m/s
    monitor.tick(4, now + 0.4, np.array([0.3, 0.3]), _twist(0.3, 0.0))  # the Twist says otherwise
    feed(now + 0.5)
    tick(5, [0.4, 0.3])
    tick(6, [0.5, 0.3])
    tick(7, [0.6, 0.3])  # above v_max 0.5
    counts = dict(report.counts)
    assert counts == {
        "acceleration_limit": 1,
        "non_finite_command": 1,
        "silent_while_moving": 1,
        "cmd_vel_mismatch": 1,
        "velocity_limit": 1,
    }, counts
    # inputs last received at now + 0.5: surely stale from now + 1.0 + margin; the command must ramp to zero
    report.counts.clear()
    monitor.last = np.array([0.3, 0.3])
    for k in range(11, 20):  # 1.1 s ... 1.9 s
        tick(k, [0.3, 0.0])
    assert report.counts["stale_not_stopped"] > 0 and "stale_not_decelerating" not in report.counts
    tick(20, [0.35, 0.0])
    assert report.counts["stale_not_decelerating"] == 1


def test_monitor_holds_a_lag_compensating_node_to_the_inverse_of_its_limits(scenario):
    """The Jackal's node inverts its drive's lags (0.2 / 0.15 s): to take the velocity a dt on in one step it commands
    a dt / r, r = 1 - exp(-dt / lag). Such a step is the contract; one past (2 - r) a dt / r is a violation, as is a
    braking command that passes zero by more than a dt / r."""
    params = NavParams.from_yaml(Path(__file__).resolve().parents[1] / "config" / "robots" / "jackal.yaml")
    robot = params.robot_model()
    r = 1.0 - np.exp(-params.dt / np.array([params.dynamics_lag_v_s, params.dynamics_lag_w_s]))
    inverse = robot.accel_limits * params.dt / r
    report = FuzzReport(rate_hz=params.control_rate_hz)
    monitor = Monitor(params, report)
    f, s, t0 = scenario.factory, scenario.state, 100.0
    monitor.delivered(Delivery("odometry", f.odometry(s.pose, s.velocity, t0), t0, "clean", "clean"))
    monitor.delivered(Delivery("grid", f.grid(s.grid, t0), t0, "clean", "clean"))
    monitor.tick(0, t0, inverse.copy(), _twist(*inverse))  # one inverted step from rest: the node's own
    assert report.violations == 0, dict(report.counts)
    beyond = inverse + (2.0 - r) * inverse * 1.05
    monitor.tick(1, t0 + 0.04, beyond, _twist(*beyond))
    assert dict(report.counts) == {"acceleration_limit": 1}
    report.counts.clear()
    # stale from here (no input fed): braking may pass zero by a dt / r, not further
    monitor.last = np.array([0.05, 0.0])
    monitor.stale_run = 0
    late = t0 + 10.0
    passing = np.array([0.05 - 0.9 * inverse[0], 0.0])
    monitor.tick(2, late, passing, _twist(*passing))
    assert "stale_not_decelerating" not in report.counts, dict(report.counts)
    monitor.last = np.array([0.05, 0.0])
    too_far = np.array([-1.1 * inverse[0], 0.0])
    monitor.tick(3, late + 0.04, too_far, _twist(*too_far))
    assert report.counts["stale_not_decelerating"] == 1


class _CarelessAdapter:
    """Raises on a non-finite resolution, jumps between speeds, forgets the Twist: what the fuzz must catch."""

    def __init__(self):
        self.k = 0

    def on_grid(self, msg, now_s):
        if not np.isfinite(msg.info.resolution):
            raise ValueError("resolution")

    def on_odometry(self, msg, now_s):
        pass

    on_goal = on_path = on_odometry

    def tick(self, now_s):
        self.k += 1
        return SimpleNamespace(command=np.array([0.5 * (self.k % 2), 0.0]), cmd_vel=None, status="planned", reason="")


def test_fuzz_catches_a_careless_adapter():
    report = run_fuzz(FuzzConfig(messages=3000, huge_grids=0, hostile_per_tick=20), NavParams(), _CarelessAdapter())
    for kind in ("exception_in_callback[grid]", "acceleration_limit", "cmd_vel_mismatch", "stale_not_stopped"):
        assert report.counts[kind] > 0, (kind, dict(report.counts))
    assert any("ValueError at" in v.detail for v in report.examples)


def test_bench_node_cli_tiny(tmp_path, capsys):
    from mnemo_mpc.cli import main

    out = tmp_path / "bench_node.json"
    argv = ["bench", "node", "--ticks", "8", "--rate-hz", "50", "--fuzz", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert result["counts"]["ticks"] == 8 and result["counts"]["messages"] > 8
    assert set(result["tick_ms"]) >= {"p50", "p95", "p99", "max"} and result["rate_hz_p50"] > 0
    assert result["callback_ms"]["all"]["max"] >= result["callback_ms"]["all"]["p50"] > 0
    assert result["config"]["params"]["control_rate_hz"] == 50.0 and result["version"]["mnemo_mpc"]
    assert f"wrote {out}" in capsys.readouterr().out


def test_bench_node_takes_a_robot_profile_and_its_rate(tmp_path, capsys):
    """`bench node --params PROFILE`: the profile's robot and control rate drive the scenario; --rate-hz overrides;
    a bad file is one error naming --params."""
    from pathlib import Path

    from mnemo_mpc.cli import main

    jackal = Path(__file__).resolve().parents[1] / "config" / "robots" / "jackal.yaml"
    out = tmp_path / "bench_node_jackal.json"
    assert main(["bench", "node", "--ticks", "6", "--params", str(jackal), "--no-progress", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    expected = NavParams.from_yaml(jackal)
    assert result["config"]["params"]["control_rate_hz"] == expected.control_rate_hz == 25.0
    assert result["config"]["params"]["footprint"] == expected.footprint and result["counts"]["ticks"] == 6
    assert result["control_period_ms"] == pytest.approx(1e3 / 25.0)
    argv = ["bench", "node", "--ticks", "4", "--params", str(jackal), "--rate-hz", "40", "--no-progress"]
    assert main([*argv, "--out", str(out)]) == 0
    assert json.loads(out.read_text())["config"]["params"]["control_rate_hz"] == 40.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("/**:\n  ros__parameters:\n    footprint: [[0, 0], [1]]\n")
    assert main(["bench", "node", "--ticks", "4", "--params", str(bad), "--no-progress", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--params" in err, err


# --- issue 26: each check of the contract fires on an injected fault -------------------------------------------------
def _flaky_step(monkeypatch, fault, warm_calls=2):
    """Controller.step with `fault(call)` run before each call after the first `warm_calls` (the warm-up's)."""
    from mnemo_mpc.nav.controller import Controller

    real = Controller.step
    calls = {"n": 0}

    def step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] > warm_calls:
            fault(calls["n"])
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Controller, "step", step)
    return calls


def test_fuzz_reports_a_controller_that_raises(monkeypatch):
    """The issue's experiment: a ValueError in 20 % of Controller.step calls. The adapter catches it and stops (status
    "error"); the fuzz used to report 0 exceptions. Now every such tick is a violation."""
    rng = random.Random(0)

    def fault(_):
        if rng.random() < 0.2:
            raise ValueError("injected fault")

    _flaky_step(monkeypatch, fault)
    report = run_fuzz(FuzzConfig(seed=3, messages=1500, huge_grids=0), NavParams())
    planned = sum(n for status, n in report.statuses.items() if status not in ("idle", "stale_input"))
    assert report.counts["error_tick"] == report.statuses["error"] > 0.05 * planned, dict(report.counts)
    assert any("ValueError: injected fault" in v.detail for v in report.examples)


def test_fuzz_reports_a_slow_tick(monkeypatch):
    _flaky_step(monkeypatch, lambda n: time.sleep(0.25) if n == 20 else None)
    report = run_fuzz(FuzzConfig(seed=4, messages=600, huge_grids=0, max_tick_s=0.2), NavParams())
    assert report.counts["tick_over_budget"] == 1, dict(report.counts)


def test_fuzz_reports_a_logged_error(monkeypatch):
    log = logging.getLogger("mnemo_mpc.nav.controller")
    _flaky_step(monkeypatch, lambda n: log.error("injected error record") if n in (10, 30) else None)
    report = run_fuzz(FuzzConfig(seed=5, messages=600, huge_grids=0), NavParams())
    assert report.counts["logged_error_in_tick"] == 2, dict(report.counts)


def test_fuzz_reports_a_swallowed_callback_exception(monkeypatch):
    """A parser that raises KeyError: the adapter drops the message (the node runs on) but counts it as unexpected,
    and the fuzz reports it; a malformed message refused with InputError is not a finding."""
    from mnemo_mpc.ros import convert

    real = convert.state_from_odometry
    rng = random.Random(1)

    def parse(msg):
        if rng.random() < 0.05:
            raise KeyError("injected")
        return real(msg)

    monkeypatch.setattr(convert, "state_from_odometry", parse)
    report = run_fuzz(FuzzConfig(seed=6, messages=1500, huge_grids=0), NavParams())
    assert report.counts["swallowed_exception_in_callback[odometry]"] > 0, dict(report.counts)
    assert not any(k.startswith("swallowed") and "odometry" not in k for k in report.counts), dict(report.counts)


def test_far_goals_sweep_every_decade_and_are_labelled_by_the_accepted_band(scenario):
    decades = sorted(n for n in HOSTILE if n.startswith("goal_far_1e"))
    assert decades == [f"goal_far_1e{d:02d}" for d in range(1, 13)]
    for name in decades:
        (d,) = scenario.hostile(name, scenario.now)
        x, y = d.msg.pose.position.x, d.msg.pose.position.y
        distance = float(np.hypot(x - scenario.state.pose[0], y - scenario.state.pose[1]))
        decade = int(name[-2:])
        assert 10.0**decade <= distance <= 10.0 ** (decade + 1) + 1e-6
        assert d.label == ("may" if max(abs(x), abs(y)) <= 1e6 else "bad"), (name, x, y, d.label)
    assert scenario.hostile("goal_far_1e03", scenario.now)[0].label == "may"
    assert scenario.hostile("goal_far_1e07", scenario.now)[0].label == "bad"


def test_episodes_without_a_global_path_clear_a_hostile_one():
    """An own-path episode sends an empty path with its goal: a hostile path received meanwhile is cleared."""
    sc = HostileScenario(FuzzConfig(seed=0, messages=1000, path_probability=0.0), NavParams())
    first = sc.deliveries()
    paths = [d for d in first if d.topic == "path" and d.label == "clean"]
    assert len(paths) == 1 and len(paths[0].msg.poses) == 0
