"""Global path (skimage MCP on the inflated grid), local reference, robot model, plan figure, bench CLI."""

import json
import math

import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.global_path import local_reference, plan_global_path
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel

ROBOT = RobotModel()


def room_with_wall(gap: bool = True):
    data = np.zeros((60, 80), np.int8)
    data[0, :] = data[-1, :] = data[:, 0] = data[:, -1] = 100
    data[:, 40:42] = 100
    if gap:
        data[40:52, 40:42] = 0  # a 0.6 m door in the wall
    return OccupancyGrid(data, 0.05)


def test_path_goes_through_the_door_and_keeps_clearance():
    grid = room_with_wall()
    start, goal = np.array([0.8, 0.8]), np.array([3.2, 0.8])
    path = plan_global_path(grid, start, goal, ROBOT)
    np.testing.assert_allclose(path[0], start)
    np.testing.assert_allclose(path[-1], goal)
    crossing = path[np.argmin(np.abs(path[:, 0] - 2.05))]
    assert 2.0 <= crossing[1] <= 2.6  # through the door (rows 40..51)
    field = DistanceField(grid)
    # the smoothed path stays clear of the inflated walls (small slack for smoothing corners)
    assert field.min_clearance(path) >= ROBOT.clearance - 0.02
    steps = np.hypot(*np.diff(path, axis=0).T)
    assert steps.max() <= 0.06


def test_no_path_and_bad_endpoints():
    grid = room_with_wall(gap=False)
    with pytest.raises(InfeasibleProblemError, match="no collision-free path"):
        plan_global_path(grid, np.array([0.8, 0.8]), np.array([3.2, 0.8]), ROBOT)
    grid = room_with_wall()
    with pytest.raises(InfeasibleProblemError, match="occupied"):
        plan_global_path(grid, np.array([0.8, 0.8]), np.array([2.03, 0.8]), ROBOT)
    with pytest.raises(InfeasibleProblemError, match="collision"):
        plan_global_path(grid, np.array([0.1, 0.8]), np.array([3.2, 0.8]), ROBOT)
    with pytest.raises(InfeasibleProblemError, match="outside"):
        plan_global_path(grid, np.array([0.8, 0.8]), np.array([30.0, 0.8]), ROBOT)
    with pytest.raises(InputError, match="NaN"):
        plan_global_path(grid, np.array([np.nan, 0.8]), np.array([3.2, 0.8]), ROBOT)
    for name, value in (("margin", -0.1), ("start_yaw", math.nan), ("turn_back_cost_m", math.inf)):
        with pytest.raises(InputError, match=name):
            plan_global_path(grid, np.array([0.8, 0.8]), np.array([3.2, 0.8]), ROBOT, **{name: value})
    data = grid.data.copy()
    data[10:20, 60:70] = -1
    with pytest.raises(InfeasibleProblemError, match="unknown"):
        plan_global_path(OccupancyGrid(data, 0.05), np.array([0.8, 0.8]), np.array([3.25, 0.75]), ROBOT)


def test_local_reference_spacing_progress_and_end():
    path = np.stack([np.linspace(0, 3, 61), np.zeros(61)], axis=1)
    ref = local_reference(path, np.array([0.52, 0.1, 0.0]), horizon=10, dt=0.1, speed=0.4)
    assert ref.points.shape == (11, 2)
    np.testing.assert_allclose(np.diff(ref.points[:, 0]), 0.04, atol=1e-9)
    # the reference starts at the robot's projection onto the path; progress is its arc length
    assert ref.points[0, 0] == pytest.approx(0.52) and ref.progress == pytest.approx(0.52) and not ref.at_end
    assert ref.goal[2] == pytest.approx(0.0)
    end = local_reference(path, np.array([2.9, 0.0, 0.0]), horizon=10, dt=0.1, speed=0.4, goal_yaw=1.0)
    assert end.at_end and end.goal[2] == 1.0 and end.points[-1, 0] == pytest.approx(3.0)
    with pytest.raises(InputError):
        local_reference(path, np.array([np.inf, 0.0, 0.0]), 10, 0.1, 0.4)


def test_robot_step_matches_the_exact_arc_and_densify_hits_knots():
    state = np.array([1.0, -0.5, 0.3])
    u = np.array([0.4, 1.2])
    dt = 0.1
    nxt = ROBOT.step(state, u, dt)
    # exact constant-(v, w) arc
    exact = state + np.array(
        [
            u[0] / u[1] * (math.sin(state[2] + u[1] * dt) - math.sin(state[2])),
            -u[0] / u[1] * (math.cos(state[2] + u[1] * dt) - math.cos(state[2])),
            u[1] * dt,
        ]
    )
    np.testing.assert_allclose(nxt, exact, atol=u[0] * dt * (u[1] * dt) ** 2 / 24 + 1e-12)
    controls = np.array([[0.4, 1.2], [0.3, -0.5], [0.2, 0.0]])
    states = ROBOT.rollout(state, controls, dt)
    pts = ROBOT.densify(states, controls, dt, 5)
    assert pts.shape == (16, 2)
    np.testing.assert_allclose(pts[::5], states[:, :2], atol=1e-4)


def test_robot_validation():
    with pytest.raises(InputError):
        RobotModel(radius=0.0)
    with pytest.raises(InputError):
        RobotModel(v_max=float("nan"))
    with pytest.raises(InputError):
        RobotModel(v_min=0.1)


def test_plot_plan_writes_png(tmp_path):
    from mnemo_mpc.planning.plot import plot_plan

    grid = room_with_wall()
    path = plan_global_path(grid, np.array([0.8, 0.8]), np.array([3.2, 0.8]), ROBOT)
    executed = np.column_stack([path[:20], np.zeros(20)])
    out = plot_plan(
        tmp_path / "plan.png",
        grid,
        path=path,
        executed=executed,
        plans=[executed],
        start=np.array([0.8, 0.8, 0.0]),
        goal=np.array([3.2, 0.8, 0.0]),
        robot=ROBOT,
        title="test",
    )
    data = open(out, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_bench_sqp_cli_writes_the_documented_json(tmp_path):
    from mnemo_mpc.cli import main

    out = tmp_path / "bench.json"
    args = ["bench", "sqp", "--problems", "2", "--steps", "2", "--no-progress", "--sigmas", "0.005,0.05"]
    assert main([*args, "--baseline", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert set(result) == {"config", "modes", "crossings", "ratios_vs_baseline"}
    modes = result["modes"]
    assert set(modes) == {"cold", "shift", "oracle", "oracle_duals", "perturbed", "baseline"}
    summaries = [modes[k] for k in ("cold", "shift", "oracle", "oracle_duals")]
    summaries += list(modes["baseline"].values())
    summaries += [s for kind in ("white", "smooth") for s in modes["perturbed"][kind].values()]
    assert set(modes["perturbed"]["white"]) == set(modes["perturbed"]["smooth"]) == {"0.005", "0.05"}
    for m in summaries:
        assert {"iterations", "time_ms", "time_per_iteration_ms", "success_rate", "feasible_rate"} <= set(m)
        assert set(m["iterations"]) == {"mean", "p50", "p95"}
        assert set(m["time_ms"]) == {"p50", "p95", "p99"}
        assert set(m["time_per_iteration_ms"]) == {"p50"}
        assert set(m["breakdown_ms_per_iteration"]) == {"derivatives", "qp", "linesearch", "total"}
        assert 0.0 <= m["success_rate"] <= 1.0 and 0.0 <= m["feasible_rate"] <= 1.0
    for kind in ("white", "smooth"):
        rms = modes["perturbed"][kind]["0.05"]["rms_error"]
        assert set(rms) == {"v", "w"} and 0 < rms["v"] < 0.05 * 0.5 * 1.2 and 0 < rms["w"] < 0.05 * 3.0 * 1.2
        assert set(result["crossings"][kind]) == {"2.0", "1.5"}
    assert set(result["ratios_vs_baseline"]) == {"cold", "shift"}
    assert result["config"]["problems"] == 2 and result["config"]["mpc"]["N"] == 30
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert main(["bench", "sqp", "--problems", "0", "--out", str(out)]) == 2
