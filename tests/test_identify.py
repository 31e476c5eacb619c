"""`mnemo-mpc identify` (issue 24 item 3): the drive model against the simulator's, recovery of known latency, lags
and slip from simulated bags within 10 % (the issue's acceptance), the profile it writes, and bad inputs."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.cli import main as cli_main
from mnemo_mpc.errors import InputError
from mnemo_mpc.profile import NavParams
from mnemo_mpc.sim import identify as ident

rosbag2 = pytest.importorskip("rosbags.rosbag2", reason="rosbags reads and writes rosbag2")
typesys = pytest.importorskip("rosbags.typesys")
pytest.importorskip("scipy")

ROBOTS = Path(__file__).resolve().parents[1] / "config" / "robots"
TOLERANCE = 0.10  # the acceptance: recovered within 10 %
TRUTH = "/ground_truth/odom"


def setup_with(profile: str, **dynamics: float):
    """The closed loop of a shipped profile, its simulated drive set to `dynamics` (Realism fields)."""
    from mnemo_mpc.sim.profile import closed_loop_setup

    setup = closed_loop_setup(NavParams.from_yaml(ROBOTS / profile), realism="profile")
    realism = dataclasses.replace(setup.sim.realism, **dynamics)
    return dataclasses.replace(setup, sim=dataclasses.replace(setup.sim, realism=realism))


# --- the model ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accel", [(0.0, 0.0), (1.5, 3.0)])
def test_drive_response_is_the_simulators_drive(accel):
    """`drive_response` (closed form) against `realism.Drive` (the simulator's substeps) at a fine substep: the same
    latency, lag and saturation, within the substep's discretisation error."""
    from mnemo_mpc.sim.realism import Drive, Realism

    realism = Realism(
        level="profile", latency_s=0.07, lag_v_s=0.2, lag_w_s=0.12, accel_v_max=accel[0], accel_w_max=accel[1]
    )
    drive = Drive(realism, np.random.default_rng(0))
    drive.reset(np.zeros(3))
    dt, h = 0.05, 1e-4
    rng = np.random.default_rng(1)
    cmds = np.repeat(rng.uniform(-1.0, 1.0, (12, 2)), 8, axis=0)  # held 0.4 s each
    t_query, sim = [], []
    for k, (v, w) in enumerate(cmds):
        drive.send(v, w, k * dt)
        for i in range(int(round(dt / h))):
            drive.body_velocity(k * dt + (i + 1) * h, h)
        t_query.append((k + 1) * dt)
        sim.append(drive.velocity.copy())
    sim = np.array(sim)
    cmd_t = np.arange(len(cmds)) * dt
    for a, lag in enumerate((realism.lag_v_s, realism.lag_w_s)):
        model = ident.drive_response(cmd_t, cmds[:, a], np.array(t_query), realism.latency_s, lag, accel[a])
        assert np.max(np.abs(model - sim[:, a])) < 2e-3, a


# --- recovery from simulated bags -----------------------------------------------------------------------------------
CASES = {
    # The Jackal profile's drive as it states it, jitter (+-10 ms) and noises included; acceleration limits active.
    "jackal": ("jackal.yaml", 30.0, 1, {}),
    # The TurtleBot3 Burger's drive without latency jitter, sampled at its 0.1 s control period.
    "turtlebot3_burger": ("turtlebot3_burger.yaml", 40.0, 2, {"latency_jitter_s": 0.0}),
    # A slower, slippier drive than any profile states, on the Waffle.
    "waffle_custom": (
        "turtlebot3_waffle.yaml",
        40.0,
        3,
        {"latency_s": 0.12, "lag_v_s": 0.3, "lag_w_s": 0.08, "slip_v": 0.93, "slip_w": 0.8, "latency_jitter_s": 0.0},
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_identify_recovers_known_drive_from_simulated_bag(case, tmp_path):
    profile, seconds, seed, dynamics = CASES[case]
    setup = setup_with(profile, **dynamics)
    r = setup.sim.realism
    summary = ident.record_excitation_bag(tmp_path / "bag", setup, seconds=seconds, seed=seed)
    assert not summary["collided"]
    rec = ident.read_bag(tmp_path / "bag", "/cmd_vel", ["/odom", TRUTH])
    fit = ident.fit_drive(rec, (r.accel_v_max, r.accel_w_max))
    values, sources = ident.identified_values(fit, "/odom", "gyro", TRUTH)
    truth = {
        "latency_s": r.latency_s,
        "lag_v_s": r.lag_v_s,
        "lag_w_s": r.lag_w_s,
        "slip_v": r.slip_v,
        "slip_w": r.slip_w,
    }
    assert set(values) == set(truth) and "ground truth" in sources["slip_v"]
    errors = {k: abs(values[k] - v) / v for k, v in truth.items()}
    print(f"\n{case}: " + ", ".join(f"{k} true {truth[k]:g} fitted {values[k]:g} ({errors[k]:.1%})" for k in truth))
    assert all(e <= TOLERANCE for e in errors.values()), errors
    # The odometry: wheels' v sees no slip (gain 1), the gyro sees the body's turn (gain slip_w).
    odom = fit.axes["/odom"]
    assert abs(odom["v"].gain - 1.0) <= 0.03 and abs(odom["w"].gain - r.slip_w) / r.slip_w <= TOLERANCE
    for axes in fit.axes.values():
        for f in axes.values():
            assert f.samples == len(rec.series[0].t) and f.rms_relative < 0.1


def test_identify_without_ground_truth_writes_only_identifiable_slip(tmp_path):
    setup = setup_with("jackal.yaml")
    ident.record_excitation_bag(tmp_path / "bag", setup, seconds=15.0, seed=4)
    rec = ident.read_bag(tmp_path / "bag", "cmd_vel", ["odom"])
    fit = ident.fit_drive(rec, (setup.sim.realism.accel_v_max, setup.sim.realism.accel_w_max))
    assert set(ident.identified_values(fit, "odom", "wheels")[0]) == {"latency_s", "lag_v_s", "lag_w_s"}
    gyro, _ = ident.identified_values(fit, "odom", "gyro")
    assert set(gyro) == {"latency_s", "lag_v_s", "lag_w_s", "slip_w"}
    assert abs(gyro["slip_w"] - 0.85) / 0.85 <= TOLERANCE
    # "body" would take the wheels' v gain for slip_v: ~1, not the 0.97 the body drives -- why it must be asked for.
    assert ident.identified_values(fit, "odom", "body")[0]["slip_v"] == pytest.approx(1.0, abs=0.02)


# --- the command ----------------------------------------------------------------------------------------------------
def test_cli_records_identifies_and_writes_a_loadable_profile(tmp_path, capsys):
    base = ROBOTS / "jackal.yaml"
    bag, out = tmp_path / "bag", tmp_path / "fitted.yaml"
    assert cli_main(["identify", "--record", str(bag), "--params", str(base), "--seconds", "20", "--seed", "5"]) == 0
    assert (bag / "metadata.yaml").is_file() and not (tmp_path / "bag.partial").exists()
    argv = ["identify", str(bag), "--params", str(base), "--out", str(out), "--ground-truth-topic", TRUTH]
    assert cli_main(argv) == 0
    assert "wrote dynamics" in capsys.readouterr().out
    loaded, base_params = NavParams.from_yaml(out), NavParams.from_yaml(base)
    report = json.loads((tmp_path / "fitted.identify.json").read_text())
    assert set(report["written"]) == {"latency_s", "lag_v_s", "lag_w_s", "slip_v", "slip_w"} and not report["warnings"]
    for key, value in report["written"].items():
        assert getattr(loaded, f"dynamics_{key}") == value
        true = getattr(base_params, f"dynamics_{key}")
        assert abs(value - true) / true <= TOLERANCE, (key, value, true)
    for topic in ("/odom", TRUTH):
        for axis in ("v", "w"):
            assert report["fit"]["topics"][topic][axis]["samples"] == report["samples"][topic] > 400
            assert 0 < report["rms"][topic][axis] < 0.1
    # Everything but the fitted keys is the base's.
    changed = {f"dynamics_{k}" for k in report["written"]}
    for f in dataclasses.fields(NavParams):
        if f.name not in changed:
            assert getattr(loaded, f.name) == getattr(base_params, f.name), f.name
    assert (tmp_path / "fitted.identify.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # Without --params (the built-in defaults) and without ground truth: the gyro's slip_w, not slip_v.
    out2 = tmp_path / "defaults.yaml"
    assert cli_main(["identify", str(bag), "--out", str(out2), "--json", str(tmp_path / "r.json")]) == 0
    loaded2 = NavParams.from_yaml(out2)
    report2 = json.loads((tmp_path / "r.json").read_text())
    assert set(report2["written"]) == {"latency_s", "lag_v_s", "lag_w_s", "slip_w"}
    assert report2["kept_from_base"] == {"slip_v": 1.0} and loaded2.dynamics_slip_v == 1.0
    assert loaded2.dynamics_slip_w == report2["written"]["slip_w"] and loaded2.v_max == NavParams().v_max


def test_updated_profile_overrides_named_and_flattened_entries(tmp_path):
    """A base with a named node entry and rcl's flattened `dynamics.KEY` form: the fitted value wins everywhere."""
    base = {
        "/**": {"ros__parameters": {"v_max": 0.8, "dynamics": {"lag_v_s": 0.5, "slip_noise": 0.02}}},
        "mnemo_mpc_nav": {"ros__parameters": {"dynamics.lag_v_s": 0.4, "dynamics": {"latency_s": 0.3}}},
        "other_node": {"ros__parameters": {"dynamics": {"lag_v_s": 9.0}}},
    }
    import yaml

    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    values = {"latency_s": 0.05, "lag_v_s": 0.2, "lag_w_s": 0.1}
    doc = ident.updated_profile(base, values)
    ident.write_profile(tmp_path / "p.yaml", doc, values)
    loaded, before = NavParams.from_yaml(tmp_path / "p.yaml"), NavParams.from_yaml(tmp_path / "base.yaml")
    assert (loaded.dynamics_latency_s, loaded.dynamics_lag_v_s, loaded.dynamics_lag_w_s) == (0.05, 0.2, 0.1)
    assert dataclasses.replace(loaded, **{f"dynamics_{k}": getattr(before, f"dynamics_{k}") for k in values}) == before
    assert doc["mnemo_mpc_nav"]["ros__parameters"]["dynamics"] == {"latency_s": 0.05, "lag_v_s": 0.2, "lag_w_s": 0.1}
    assert doc["/**"]["ros__parameters"]["dynamics"]["slip_noise"] == 0.02 and loaded.v_max == 0.8
    assert doc["other_node"] == base["other_node"] and base["mnemo_mpc_nav"]["ros__parameters"]["dynamics.lag_v_s"]


# --- bad input ------------------------------------------------------------------------------------------------------
def write_bag(path, seconds=10.0, dt=0.05, cmd_topic="/cmd_vel", odom_topic="/odom", nan_at=None, w_cmd=True):
    """A small bag of step commands and a first-order response (no simulator)."""
    store = typesys.get_typestore(typesys.Stores.ROS2_JAZZY)
    T = store.types
    vec = T["geometry_msgs/msg/Vector3"]
    n = int(round(seconds / dt))
    cmd = np.zeros((n, 2))
    cmd[n // 4 : n // 2] = (0.5, 1.0 if w_cmd else 0.0)
    x = np.zeros(2)
    pose = T["geometry_msgs/msg/Pose"](
        position=T["geometry_msgs/msg/Point"](x=0.0, y=0.0, z=0.0),
        orientation=T["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=0.0, w=1.0),
    )
    with rosbag2.Writer(path, version=9) as w:
        cc = w.add_connection(cmd_topic, "geometry_msgs/msg/Twist", typestore=store)
        oc = w.add_connection(odom_topic, "nav_msgs/msg/Odometry", typestore=store)
        for k in range(n):
            t_ns = 10**9 + k * int(dt * 1e9)
            msg = T["geometry_msgs/msg/Twist"](
                linear=vec(x=cmd[k, 0], y=0.0, z=0.0), angular=vec(x=0.0, y=0.0, z=cmd[k, 1])
            )
            w.write(cc, t_ns, store.serialize_cdr(msg, "geometry_msgs/msg/Twist"))
            x += (1 - math.exp(-dt / 0.2)) * (cmd[k] - x)
            v = math.nan if k == nan_at else x[0]
            odom = T["nav_msgs/msg/Odometry"](
                header=T["std_msgs/msg/Header"](
                    stamp=T["builtin_interfaces/msg/Time"](sec=t_ns // 10**9, nanosec=t_ns % 10**9), frame_id="odom"
                ),
                child_frame_id="base_link",
                pose=T["geometry_msgs/msg/PoseWithCovariance"](pose=pose, covariance=np.zeros(36)),
                twist=T["geometry_msgs/msg/TwistWithCovariance"](
                    twist=T["geometry_msgs/msg/Twist"](
                        linear=vec(x=v, y=0.0, z=0.0), angular=vec(x=0.0, y=0.0, z=x[1])
                    ),
                    covariance=np.zeros(36),
                ),
            )
            w.write(oc, t_ns + int(dt * 1e9) - 1, store.serialize_cdr(odom, "nav_msgs/msg/Odometry"))
    return path


def test_a_small_clean_bag_fits(tmp_path):
    rec = ident.read_bag(write_bag(tmp_path / "ok"), "/cmd_vel", ["/odom"])
    fit = ident.fit_drive(rec)
    assert fit.lag_v_s == pytest.approx(0.2, rel=0.1) and fit.lag_w_s == pytest.approx(0.2, rel=0.1)


@pytest.mark.parametrize(
    "bag_kwargs, topics, match",
    [
        (None, ("/cmd_vel", "/odom"), "bag not found"),
        (
            {"odom_topic": "/wheel_odom"},
            ("/cmd_vel", "/odom"),
            r"no messages on /odom \(topics in bag: /cmd_vel, /wheel",
        ),
        ({}, ("/odom", "/cmd_vel"), r"topic /(odom|cmd_vel) has type \S+, expected \S+"),
        ({"seconds": 1.0}, ("/cmd_vel", "/odom"), "too few samples: 19 messages on /odom"),
        ({"nan_at": 30}, ("/cmd_vel", "/odom"), "non-finite twist on /odom at 2.550 s"),
        ({"w_cmd": False}, ("/cmd_vel", "/odom"), "angular.z never changes, so lag_w_s cannot be identified"),
    ],
)
def test_bad_bags_are_one_clear_input_error(tmp_path, bag_kwargs, topics, match):
    bag = tmp_path / "bag"
    if bag_kwargs is not None:
        write_bag(bag, **bag_kwargs)
    with pytest.raises(InputError, match=match) as info:
        ident.read_bag(bag, topics[0], [topics[1]])
    assert "\n" not in str(info.value)


def test_slip_outside_a_factor_is_refused():
    axis = ident.AxisFit(gain=2.0, offset=0.0, rms=0.0, rms_relative=0.0, samples=100)
    fit = ident.DriveFit(0.05, 0.2, 0.1, {}, {"/odom": {"v": axis, "w": axis}}, (0.0, 0.0), (0.0, 0.0), 0.0)
    with pytest.raises(InputError, match="w gain 2.000 is not a slip factor"):
        ident.identified_values(fit, "/odom", "gyro")


@pytest.mark.parametrize(
    "argv, expect",
    [
        (["identify", "{tmp}/nope", "--out", "{tmp}/p.yaml"], "bag not found"),
        (["identify", "{tmp}/bag"], "--out: expected the robot profile to write"),
        (["identify", "{tmp}/bag", "--out", "{tmp}/p.yaml", "--seconds", "5"], "--seconds: only with --record"),
        (["identify", "--record", "{tmp}/new", "--out", "{tmp}/p.yaml"], "--out: only for fitting a bag"),
        (["identify", "--record", "{tmp}/bag"], "--record: {tmp}/bag exists"),
        (["identify", "{tmp}/bag", "--out", "{tmp}/p.yaml", "--odom-topic", "/gt"], "no messages on /gt"),
        (["identify", "{tmp}/bag", "--out", "{tmp}/p.yaml", "--params", "{tmp}/none.yaml"], "--params: parameter"),
        (["identify", "{tmp}/bag", "--out", "{tmp}/p.yaml", "--stamps", "header"], "cmd_vel is geometry_msgs/Twist"),
        (["identify", "{tmp}/bag", "--out", "{tmp}/p.yaml", "--distro", "ROS3"], "--distro: expected one of"),
    ],
)
def test_cli_user_errors_are_one_line_exit_2(tmp_path, capsys, argv, expect):
    write_bag(tmp_path / "bag")
    argv = [a.format(tmp=tmp_path) for a in argv]
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("mnemo-mpc identify: error: ") and err.count("\n") == 1
    assert expect.format(tmp=tmp_path) in err
    assert not (tmp_path / "p.yaml").exists() and not (tmp_path / "new").exists()
