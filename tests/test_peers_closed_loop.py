"""The MPC's peers (issue 30) in closed loop on the kinematic model and on the command line: each reaches a goal in an
empty room, never commands outside the velocity and acceleration limits, and stops before a wall; `eval
--controller` records the planner, and several planners make one table.

What each guards, checked by breaking it once (issue 30's commit notes the runs): the planners keep inside the
limits on their own (DWA samples the dynamic window, MPPI rolls its average through the acceleration limits), so
bypassing `check_command` alone changes nothing; bypassing it with MPPI's raw average, or with DWA sampling the whole
velocity box, fails the limits test. Likewise the wall test fails with the braking check bypassed and MPPI's obstacle
critic off (footprint 0.225 m into the wall); DWA kept clear even with the check bypassed and its admissibility off
(its dist term alone stopped it). The goal test fails with DWA's heading weight 0 (the robot wanders off).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.nav.controller import ControllerConfig
from mnemo_mpc.peers import make_controller
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel


def _peer(name: str, **config):
    if name == "mppi":
        pytest.importorskip("pytorch_mppi")
    robot = RobotModel()
    cfg = ControllerConfig(plan_own_path=False, moving_obstacles=None, **config)
    return make_controller(name, robot, MPCConfig(N=30, dt=0.1), cfg)


def _room(wall_x: float | None = None) -> OccupancyGrid:
    """A 4 m x 4 m room (walls 1 cell thick) with its origin at (0, 0); optionally a wall across it at `wall_x`."""
    data = np.zeros((80, 80), np.int8)
    data[0, :] = data[-1, :] = data[:, 0] = data[:, -1] = 100
    if wall_x is not None:
        col = int(wall_x / 0.05)
        data[:, col : col + 2] = 100
    return OccupancyGrid(data, 0.05, (0.0, 0.0, 0.0))


def _drive(controller, grid, pose, goal, steps):
    """Kinematic closed loop: the robot moves as commanded. Returns poses (T+1, 3), commands (T, 2), statuses."""
    pose, vel = np.asarray(pose, float), np.zeros(2)
    poses, commands, statuses = [pose], [], []
    for _ in range(steps):
        out = controller.step(grid, pose, vel, np.asarray(goal, float))
        commands.append(out.command)
        statuses.append(out.status)
        if out.status == "goal_reached" and not np.any(out.command):
            break
        pose, vel = controller.robot.step(pose, out.command, controller.mpc_config.dt), out.command
        poses.append(pose)
    return np.array(poses), np.array(commands), statuses


@pytest.mark.parametrize("name", ["dwa", "mppi"])
def test_peer_reaches_a_goal_in_an_empty_room(name):
    c = _peer(name)
    poses, _, statuses = _drive(c, _room(), [0.6, 0.6, 0.0], [3.2, 3.0, 0.0], 200)
    assert np.hypot(*(poses[-1, :2] - [3.2, 3.0])) <= c.config.goal_tolerance_m, (statuses[-5:], poses[-1])
    assert statuses[-1] == "goal_reached"


@pytest.mark.parametrize("name", ["dwa", "mppi"])
def test_peer_commands_stay_inside_the_limits(name):
    c = _peer(name)
    _, commands, _ = _drive(c, _room(), [0.6, 2.0, 0.0], [3.4, 2.0, 0.0], 60)
    robot, dt = c.robot, c.mpc_config.dt
    assert np.all(np.isfinite(commands))
    assert np.all(commands >= robot.control_lower - 1e-9) and np.all(commands <= robot.control_upper + 1e-9)
    jumps = np.abs(np.diff(np.vstack([np.zeros(2), commands]), axis=0))
    assert np.all(jumps <= robot.accel_limits * dt + 1e-6), jumps.max(axis=0)


@pytest.mark.parametrize("name", ["dwa", "mppi"])
def test_peer_stops_before_a_wall_it_cannot_pass(name):
    """The goal lies behind a wall across the room: the robot must stop in front of it, footprint clear."""
    c = _peer(name)
    grid = _room(wall_x=2.0)
    poses, _, statuses = _drive(c, grid, [0.6, 2.0, 0.0], [3.2, 2.0, 0.0], 120)
    field = DistanceField(grid, "occupied")
    margins = c.mpc(grid.shape).collision.pose_margins(field, poses, exact=True)
    assert margins.min() > 0.0, (margins.min(), statuses[int(np.argmin(margins)) - 1 :][:5])
    assert poses[:, 0].max() < 2.0 - c.robot.radius


@pytest.mark.parametrize("name", ["dwa", "mppi"])
def test_peer_keeps_its_margin_at_a_block_corner(name):
    """The line to the goal passes a block's corner with the footprint 0-5 cm from it: the robot goes round it or
    stops short, never nearer the corner than the safety margin (exact distance to the cells). Broken once (the
    shared check on the bilinear field against the exact margin less 1 mm): DWA passed 1.4 mm from the corner with
    the block 20 cm off the line, and drove 1.9 cm into it with the block 15 cm off."""
    c = _peer(name)
    data = _room().data.copy()
    data[44:54, 40:50] = 100  # a 0.5 m block, its lower-left corner at (2.0, 2.2)
    for offset in (0.15, 0.2):  # the block's corner this far beside the line y = 2.0 (the robot's radius: 0.2 m)
        block = np.roll(data, int(round((offset - 0.2) / 0.05)), axis=0)
        grid = OccupancyGrid(block, 0.05, (0.0, 0.0, 0.0))
        c.reset()
        poses, _, statuses = _drive(c, grid, [0.6, 2.0, 0.0], [3.4, 2.0, 0.0], 80)
        field = DistanceField(grid, "occupied")
        margins = c.mpc(grid.shape).collision.pose_margins(field, poses, exact=True)
        worst = int(np.argmin(margins))
        assert margins[worst] >= c.robot.safety_margin - 1e-3, (
            offset,
            margins[worst],
            statuses[max(worst - 3, 0) :][:5],
        )


def test_mppi_without_its_obstacle_critic_needs_the_safety_layer():
    """What the obstacle critic does: with it the proposals near the wall are admissible; without it more of them are
    refused by the shared safety check (the robot stays safe either way, the critic makes MPPI's own plans safe)."""
    pytest.importorskip("pytorch_mppi")
    from mnemo_mpc.peers.critics import CRITICS

    grid = _room(wall_x=2.0)
    refused = {}
    for label, enabled in (("all", None), ("no obstacles", tuple(c for c in CRITICS if c != "obstacles"))):
        c = _peer("mppi")
        c.enabled_critics = enabled
        _, _, statuses = _drive(c, grid, [0.6, 2.0, 0.0], [3.2, 2.0, 0.0], 60)
        refused[label] = sum(s.startswith("fallback") for s in statuses)
    assert refused["no obstacles"] > refused["all"], refused


def test_eval_controller_dwa_writes_the_field(tmp_path):
    pytest.importorskip("pybullet")
    from mnemo_mpc.cli import main

    out = tmp_path / "dwa.json"
    argv = ["eval", "--worlds", "2", "--seed", "1000", "--time-limit", "1.0", "--controller", "dwa"]
    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert res["controller"] == "dwa" and res["config"]["planner"]["controller"] == "dwa"
    assert res["n_episodes"] == 2 and res["warmstart"] is None
    assert set(res["starts_used"]) <= {"dwa", "cold"}  # "cold": steps that did not plan (the rotation shim)


def test_eval_several_controllers_make_one_table_and_table_joins_runs(tmp_path):
    pytest.importorskip("pybullet")
    from mnemo_mpc.cli import main

    out = tmp_path / "both.json"
    argv = ["eval", "--worlds", "1", "--seed", "1000", "--time-limit", "0.5", "--controller", "mpc,dwa"]
    assert main([*argv, "--warmstart", "shift", "--out", str(out), "--no-progress"]) == 0
    res = json.loads(out.read_text())
    assert res["controllers"] == ["mpc", "dwa"] and [r["controller"] for r in res["table"]] == ["mpc", "dwa"]
    assert (tmp_path / "both.png").stat().st_size > 0
    row = res["table"][1]
    assert set(row["step_time_ms"]) == {"p50", "p99", "max"} and row["step_time_ms_by_family"]
    assert res["complete"] is True
    # the same rows from two single-planner files
    for name, summary in res["runs"].items():
        (tmp_path / f"{name}.json").write_text(json.dumps(summary))
    joined = tmp_path / "table.json"
    assert main(["table", str(tmp_path / "mpc.json"), str(tmp_path / "dwa.json"), "--out", str(joined)]) == 0
    assert json.loads(joined.read_text())["table"] == res["table"]


def test_eval_of_several_controllers_keeps_the_finished_ones_when_a_later_one_fails(tmp_path, monkeypatch):
    pytest.importorskip("pybullet")
    from mnemo_mpc.cli import main
    from mnemo_mpc.commands import eval as eval_command

    evaluate = eval_command.evaluate

    def second_fails(args, setup, jobs, name):
        if name == "dwa":
            raise KeyboardInterrupt  # stopped by hand during the second planner
        return evaluate(args, setup, jobs, name)

    monkeypatch.setattr(eval_command, "evaluate", second_fails)
    out = tmp_path / "both.json"
    argv = ["eval", "--worlds", "1", "--seed", "1000", "--time-limit", "0.5", "--controller", "mpc,dwa"]
    assert main([*argv, "--warmstart", "shift", "--out", str(out), "--no-progress"]) != 0  # the CLI reports it
    res = json.loads(out.read_text())
    assert (
        res["complete"] is False
        and res["controllers"] == ["mpc"]
        and [r["controller"] for r in res["table"]] == ["mpc"]
    )


def test_bench_node_runs_each_planner_on_the_same_stream(tmp_path, capsys):
    """`bench node --controller mpc,dwa`: one JSON, a row per planner, each planner's node core on the same scenario."""
    import json

    out = tmp_path / "node.json"
    assert main(["bench", "node", "--ticks", "30", "--controller", "mpc,dwa", "--no-progress", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert [row["controller"] for row in result["table"]] == ["mpc", "dwa"]
    for name in ("mpc", "dwa"):
        run = result["planners"][name]
        assert run["controller"] == name and run["counts"]["ticks"] == 30
        assert run["counts"]["messages"] == result["planners"]["mpc"]["counts"]["messages"]
        assert run["tick_ms_with_controller"]["p50"] > 0
    printed = capsys.readouterr().out
    assert "node core (dwa)" in printed and "planner  ticks" in printed


def test_stalls_compares_a_peer_and_the_mpc_on_the_same_step_problems(tmp_path, capsys):
    """A 2 s episode (a timeout by construction): its last second's steps are each solved by the MPC too, from the
    peer's own problem; one row per compared step, with both sides' progress along the followed path."""
    import json

    out = tmp_path / "stalls.json"
    argv = ["stalls", "--controller", "dwa", "--seeds", "1006", "--time-limit", "2", "--window-s", "1", "--every", "2"]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    (world,) = result["worlds"]
    assert world["outcome"] == "timeout" and world["seed"] == 1006 and len(world["rows"]) >= 3
    for row in world["rows"]:
        assert row["peer_progress_m"] >= 0.0
        assert row["mpc_converged"] is False or row["mpc_progress_m"] >= 0.0
    # still driving into the world at the end: both sides' horizons get on along the path
    assert result["summary"]["mpc_goes_on"] >= 1 and result["summary"]["peer_goes_on"] >= 1
    assert result["summary"]["steps"] == len(world["rows"])
    assert "over " in capsys.readouterr().out
    assert main(["stalls", "--controller", "dwa", "--seeds", "10x6", "--out", str(out)]) == 2
    assert "--seeds" in capsys.readouterr().err
