"""Sparse global paths (issue 9, defect 8): a path of waypoints metres apart, or a bare start -> goal pair, is tracked
like the dense planned path. The reference starts at the robot's projection onto the path's segments (not the nearest
vertex) and its points are `v_ref * dt` of arc length apart whatever the path's density."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.nav.reference import subgoal_and_reference
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.global_path import local_reference, plan_global_path, project_onto_path
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel

RES = 0.05
WINDOW = (60, 60)  # the local grid the MPC sees, cut from the map around the robot (as tests/test_nav_controller.py)
N, DT, V_REF = 30, 0.1, 0.4


def resample(path: np.ndarray, spacing: float) -> np.ndarray:
    """`path` as waypoints about `spacing` metres apart along it (first and last point kept)."""
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(path, axis=0).T))])
    t = np.linspace(0.0, s[-1], max(int(np.ceil(s[-1] / spacing)), 1) + 1)
    return np.stack([np.interp(t, s, path[:, 0]), np.interp(t, s, path[:, 1])], axis=-1)


def densities(corners: np.ndarray) -> dict[str, np.ndarray]:
    """One polyline sampled four ways; every sampling keeps the corners, so all describe the same curve."""
    out: dict[str, np.ndarray] = {"corners": corners}
    for name, spacing in (("5cm", 0.05), ("1m", 1.0), ("2m", 2.0)):
        legs = [resample(corners[i : i + 2], spacing)[:-1] for i in range(len(corners) - 1)]
        out[name] = np.concatenate([*legs, corners[-1:]], axis=0)
    return out


CORNERS = np.array([[0.0, 0.0], [4.0, 0.0], [4.0, 3.0], [6.5, 5.5]])


@pytest.mark.parametrize("pose", [[0.0, 0.0, 0.0], [1.37, 0.21, 0.3], [3.9, -0.3, 0.0], [4.2, 1.66, 1.5]])
def test_reference_is_the_same_for_any_path_density(pose):
    pose = np.array(pose)
    refs = {name: local_reference(path, pose, N, DT, V_REF) for name, path in densities(CORNERS).items()}
    dense = refs["5cm"]
    for name, ref in refs.items():
        np.testing.assert_allclose(ref.points, dense.points, atol=1e-9, err_msg=name)
        np.testing.assert_allclose(ref.goal, dense.goal, atol=1e-9, err_msg=name)
        assert ref.progress == pytest.approx(dense.progress, abs=1e-9)
    # v_ref * dt of arc length apart, from the robot's projection onto the path
    arc = [project_onto_path(CORNERS, p) for p in dense.points]
    np.testing.assert_allclose(arc, dense.progress + V_REF * DT * np.arange(N + 1), atol=1e-9)
    steps = np.hypot(*np.diff(dense.points, axis=0).T)
    assert np.all(steps <= V_REF * DT + 1e-9) and np.all(steps >= V_REF * DT * np.cos(np.pi / 4) - 1e-9)


def test_projection_is_onto_segments_not_vertices():
    path = np.array([[0.0, 0.0], [5.0, 0.0]])
    ref = local_reference(path, np.array([1.3, 0.2, 0.0]), N, DT, V_REF)
    np.testing.assert_allclose(ref.points[0], [1.3, 0.0], atol=1e-12)
    np.testing.assert_allclose(ref.points[-1], [1.3 + N * DT * V_REF, 0.0], atol=1e-12)
    assert ref.progress == pytest.approx(1.3) and not ref.at_end and ref.goal[2] == pytest.approx(0.0)
    # repeated waypoints (zero-length segments) and a one-point path
    ref = local_reference(
        np.array([[0.0, 0.0], [0.0, 0.0], [2.0, 0.0], [2.0, 0.0]]), np.array([0.5, 0.1, 1.0]), 3, 1, 1
    )
    np.testing.assert_allclose(ref.points, [[0.5, 0.0], [1.5, 0.0], [2.0, 0.0], [2.0, 0.0]], atol=1e-12)
    assert ref.at_end and ref.goal[2] == pytest.approx(0.0)
    ref = local_reference(np.array([[1.0, 1.0]]), np.array([0.0, 0.0, 0.7]), 3, 0.1, 0.4)
    np.testing.assert_allclose(ref.points, np.ones((4, 2)))
    assert ref.at_end and ref.goal[2] == 0.7  # no direction: keep the robot's heading


def test_progress_does_not_jump_back_to_an_earlier_pass():
    """A sparse U-turn: out along y = 0, back along y = 0.4. Halfway between the legs, on the way back, the robot
    stays on the return leg: the search starts 1 m of arc length behind the previous progress, not 20 vertices."""
    path = np.array([[0.0, 0.0], [3.0, 0.0], [3.0, 0.4], [0.0, 0.4]])
    pose = np.array([1.0, 0.2, np.pi])
    back = local_reference(path, pose, N, DT, V_REF, progress=5.0)  # last seen at x = 1.4 on the return leg
    assert back.progress == pytest.approx(3.4 + 2.0)
    assert back.points[-1, 0] < 1.0 and back.points[-1, 1] == pytest.approx(0.4)
    assert local_reference(path, pose, N, DT, V_REF, progress=0.0).progress == pytest.approx(1.0)  # tie: earlier


def test_path_that_stops_short_of_the_goal_is_continued_to_it():
    grid = OccupancyGrid(np.zeros(WINDOW, np.int8), RES)
    path = np.array([[0.2, 1.5], [1.0, 1.5]])
    goal = np.array([2.6, 1.5, 0.0])
    subgoal, points, progress = subgoal_and_reference(path, np.array([0.9, 1.5, 0.0]), goal, grid, N, DT, V_REF, 0.0)
    assert progress == pytest.approx(0.7)
    np.testing.assert_allclose(points[-1], [0.9 + N * DT * V_REF, 1.5], atol=1e-9)  # past the path's end
    np.testing.assert_allclose(subgoal, [2.1, 1.5, 0.0], atol=1e-9)
    subgoal, _, _ = subgoal_and_reference(path, np.array([1.8, 1.5, 0.0]), goal, grid, N, DT, V_REF, progress)
    np.testing.assert_allclose(subgoal, goal)


# --- closed loop: the controller on a kinematic robot, its local grid a window of the map ---------------------------


def room(box: bool) -> OccupancyGrid:
    """7 m x 4 m room; with `box`, a 1 m wide block from the bottom wall forces the path over it."""
    data = np.zeros((80, 140), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    if box:
        data[:44, 60:80] = 100  # x 3..4 m, y 0..2.2 m
    return OccupancyGrid(data, RES)


@pytest.fixture(scope="module")
def controller() -> Controller:
    # The rotation shim off: it samples the path's bearing 0.5 m ahead, which differs between a path's samplings; this
    # file compares the MPC's tracking of them.
    return Controller(RobotModel(), MPCConfig(fallback=None), ControllerConfig(rotation_shim=None))


def drive(controller: Controller, grid: OccupancyGrid, path: np.ndarray, start, goal, steps: int = 300) -> int:
    """Steps to the goal (asserting every pose collision-free and every step planned); -1 if not reached."""
    controller.reset()
    field = DistanceField(grid)
    pose, vel, goal = np.asarray(start, float), np.zeros(2), np.asarray(goal, float)
    for k in range(steps):
        out = controller.step(grid.window(pose[:2], WINDOW), pose, vel, goal, global_path=path)
        if out.status == "goal_reached":
            return k
        assert out.status == "planned", f"step {k}: {out.status} {out.solve_error} at {pose}"
        pose, vel = controller.robot.step(pose, out.command, controller.mpc_config.dt), out.command
        assert field.distance(pose[:2]) >= controller.robot.radius
    return -1


@pytest.fixture(scope="module")
def around_the_box(controller):
    grid, start, goal = room(box=True), [1.0, 1.0, 0.0], [6.0, 1.0, 0.0]
    path = plan_global_path(grid, np.array(start[:2]), np.array(goal[:2]), controller.robot)
    return grid, path, start, goal, drive(controller, grid, path, start, goal)


@pytest.mark.parametrize("spacing", [1.0, 2.0])
def test_sparse_path_reaches_the_goal_like_the_dense_one(controller, around_the_box, spacing):
    grid, dense, start, goal, dense_steps = around_the_box
    assert dense_steps > 0
    sparse = resample(dense, spacing)
    assert len(sparse) <= dense.shape[0] // 15
    steps = drive(controller, grid, sparse, start, goal)
    assert 0 < steps <= 1.2 * dense_steps  # the same reference speed along a path of about the same length


def test_start_goal_pair_reaches_the_goal(controller):
    grid, start, goal = room(box=False), [1.0, 1.0, 0.0], [6.0, 3.0, 0.0]
    length = float(np.hypot(5.0, 2.0))
    steps = drive(controller, grid, np.array([start[:2], goal[:2]]), start, goal)
    assert 0 < steps <= 1.3 * length / (V_REF * DT) + 20  # start-up turn and braking
