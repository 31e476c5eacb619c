"""Moving obstacles (issue 10, "0 collisions caused by the robot"; `nav.moving_obstacles`): a face that turns long-free
cells occupied is detected and given the room it can cover while the robot stops; static grids -- also seen through a
moving window -- are left alone; detections expire; with the detector a robot meeting a box head-on is at rest when
the box arrives, without it the robot drives into it."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.nav.moving_obstacles import MovingObstacleConfig, MovingObstacles, stopping_reach
from mnemo_mpc.nav.prediction import PredictionConfig
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel

RES, DT = 0.05, 0.1
FREE, OCC = 3, 97  # what the lidar grid reads for a cell seen free many times / occupied


def world(box_x: float | None, box_y: float = 2.0, half: float = 0.15) -> np.ndarray:
    """8 m x 4 m room (160 x 80 cells) seen free, walls round it, and a square box centred at (box_x, box_y)."""
    data = np.full((80, 160), FREE, np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = OCC
    if box_x is not None:
        xs, ys = (np.arange(160) + 0.5) * RES, (np.arange(80) + 0.5) * RES
        inside = (np.abs(xs[None, :] - box_x) <= half) & (np.abs(ys[:, None] - box_y) <= half)
        data[inside] = OCC
    return data


def window(
    data: np.ndarray, corner: tuple[int, int], shape: tuple[int, int] = (60, 60), offset: float = 0.0
) -> OccupancyGrid:
    """The local grid with cell (0, 0) at global cell `corner` (row, col), as a rolling costmap gives it; `offset`
    moves its lattice off the map's by a fraction of a cell (a Nav2 rolling window keeps its first origin's)."""
    r, c = corner
    return OccupancyGrid(
        data[r : r + shape[0], c : c + shape[1]].copy(), RES, (c * RES + offset, r * RES + 0.5 * offset, 0.0)
    )


def test_a_static_world_through_a_moving_window_is_left_alone():
    det = MovingObstacles(MovingObstacleConfig(), reach_m=0.3)
    data = world(4.0)  # a box that stands still
    for k in range(40):
        grid = window(data, (10, 20 + 2 * k))  # the robot drives right: the window shifts 2 cells a step
        out = det.update(grid, k * DT)
        assert out is grid and det.last_detections == 0


@pytest.mark.parametrize("offset", [0.0, 0.013])
def test_a_moving_box_is_detected_and_given_its_reach(offset):
    cfg = MovingObstacleConfig()
    det = MovingObstacles(cfg, reach_m=0.3)
    first = None
    for k in range(30):
        x = 6.0 - 0.05 * max(k - 10, 0)  # still for 1 s (its cells around are seen free), then 0.5 m/s to the left
        # x 3.5-6.5 m, the window sliding a cell back and forth (its history moves with it)
        out = det.update(window(world(x), (10, 70 + k % 2), offset=offset), k * DT)
        if det.last_detections and first is None:
            first = k
            box_face = x - 0.15
            # the face's reach is marked: 0.2 m ahead of it (to the left) now reads occupied, 0.5 m ahead does not
            row = int(2.0 / RES) - 10
            first_col = 70 + k % 2
            assert out.data[row, int((box_face - 0.2) / RES) - first_col] >= out.occupied_thresh
            assert out.data[row, int((box_face - 0.5) / RES) - first_col] == FREE
            assert out is not None and out.shape == (60, 60)
    assert first is not None and first <= 10 + 4  # within 0.4 s of starting to move


def test_a_window_off_the_lattice_starts_afresh():
    det = MovingObstacles(MovingObstacleConfig(), reach_m=0.3)
    for k in range(30):
        x = 6.0 - 0.05 * max(k - 10, 0)
        # every step half a cell off the last: no two windows share cells, so nothing is ever evidence
        det.update(window(world(x), (10, 70), offset=0.025 * (k % 2)), k * DT)
        assert det.last_detections == 0


def test_detections_expire_once_the_box_stops():
    cfg = MovingObstacleConfig()
    det = MovingObstacles(cfg, reach_m=0.3)
    for k in range(40):
        x = 6.0 - 0.05 * min(max(k - 10, 0), 10)  # moves from 1 s to 2 s, then stands
        det.update(window(world(x), (10, 70)), k * DT)
        if k == 19:
            assert det.last_detections
    assert det.last_detections == 0  # 2 s after it stopped: forgotten (hold_s 0.5 s)


def test_stopping_reach_and_settings_are_checked():
    assert stopping_reach(0.5, 0.5, 1.0, 0.1) == pytest.approx(0.3)
    with pytest.raises(InputError, match="min_cells"):
        MovingObstacleConfig(min_cells=0)
    with pytest.raises(InputError, match="speed_m_s"):
        MovingObstacleConfig(speed_m_s=float("nan"))
    with pytest.raises(InputError, match="reach_m"):
        MovingObstacles(MovingObstacleConfig(), reach_m=-1.0)


def head_on(config: ControllerConfig) -> float:
    """A robot driving right along y = 2 m meets a 0.3 m box coming left at 0.5 m/s; its speed [m/s] when the box
    first touches its 0.2 m disc."""
    robot = RobotModel()
    ctl = Controller(robot, MPCConfig(fallback=None), config)
    pose, vel, goal = np.array([1.0, 2.0, 0.0]), np.zeros(2), np.array([7.5, 2.0, 0.0])
    path = np.array([pose[:2], goal[:2]])
    for k in range(150):
        box_x = 7.0 - 0.05 * max(k - 10, 0)
        if box_x - 0.15 - pose[0] <= robot.radius:
            return float(vel[0])
        data = world(box_x)
        corner = (int(round(pose[1] / RES)) - 30, int(round(pose[0] / RES)) - 30)
        grid_data = np.full((80 + 60, 160 + 60), -1, np.int8)  # unknown beyond the map
        grid_data[30:110, 30:190] = data
        grid = window(grid_data, (corner[0] + 30, corner[1] + 30))
        grid = OccupancyGrid(grid.data, RES, (corner[1] * RES, corner[0] * RES, 0.0))
        out = ctl.step(grid, pose, vel, goal, global_path=path)
        pose, vel = robot.step(pose, out.command, ctl.mpc_config.dt), out.command
    raise AssertionError("the box never reached the robot")


def test_the_robot_is_at_rest_when_a_head_on_box_arrives():
    assert head_on(ControllerConfig()) <= 0.02  # the simulator's rule: not the robot's doing
    assert head_on(ControllerConfig(moving_obstacles=None)) > 0.02  # a still-world MPC drives into it


def crossing(config: ControllerConfig) -> dict:
    """A robot driving right along y = 2 m; a 0.3 m box, still for its first second, crosses its line upwards at
    x = 4 m at 0.6 m/s, timed to meet it. What the episode did: the least gap between the robot's disc and the box,
    the time to the goal, and whether the controller tracked the box and gave the MPC its prediction."""
    robot = RobotModel()
    ctl = Controller(robot, MPCConfig(fallback=None), config)
    pose, vel, goal = np.array([1.0, 2.0, 0.0]), np.zeros(2), np.array([7.0, 2.0, 0.0])
    path = np.array([pose[:2], goal[:2]])
    least, tracked, predicted = np.inf, False, False
    for k in range(200):
        t = k * DT
        box_y = 0.4 + 0.6 * max(t - 5.4, 0.0)
        least = min(least, float(np.hypot(max(abs(pose[0] - 4.0) - 0.15, 0), max(abs(pose[1] - box_y) - 0.15, 0))))
        if np.hypot(*(goal[:2] - pose[:2])) <= ctl.config.goal_tolerance_m:
            return {"least": least - robot.radius, "time": t, "tracked": tracked, "predicted": predicted}
        data = world(4.0, box_y) if box_y < 3.7 else world(None)
        corner = (int(round(pose[1] / RES)) - 30, int(round(pose[0] / RES)) - 30)
        grid_data = np.full((80 + 60, 160 + 60), -1, np.int8)
        grid_data[30:110, 30:190] = data
        grid = window(grid_data, (corner[0] + 30, corner[1] + 30))
        grid = OccupancyGrid(grid.data, RES, (corner[1] * RES, corner[0] * RES, 0.0))
        out = ctl.step(grid, pose, vel, goal, global_path=path)
        tracked |= bool(out.tracks)
        predicted |= out.predicted is not None
        pose, vel = robot.step(pose, out.command, ctl.mpc_config.dt), out.command
    return {"least": least - robot.radius, "time": np.inf, "tracked": tracked, "predicted": predicted}


def test_a_tracked_crossing_box_is_met_where_it_will_be():
    """With tracking the box gets a track, the MPC its predicted path, and the robot keeps its margin from the box
    and gets to the goal; with the detector alone the robot stops where the box is going, and is run into."""
    got = crossing(ControllerConfig(tracking=PredictionConfig()))
    assert got["tracked"] and got["predicted"]
    assert got["least"] >= RobotModel().safety_margin - 0.02
    assert np.isfinite(got["time"])
    assert crossing(ControllerConfig())["least"] < 0.0


def test_the_approach_guard_stops_driving_at_a_close_moving_obstacle_only():
    from mnemo_mpc.nav.prediction import approach_guard
    from mnemo_mpc.nav.tracking import Track

    box = Track(1, np.array([1.0, 0.0]), np.array([-0.5, 0.0]), np.eye(4) * 1e-3, 0.2, 1.0, True, np.zeros((0, 2)))
    pose, cmd, none = np.array([0.4, 0.0, 0.0]), np.array([0.3, 0.5]), np.zeros((0, 2))
    # 0.6 m centre to centre: 0.2 from the outer circle (0.2) and the box's radius: inside the 0.25 m zone, ahead
    guarded, stopped = approach_guard(cmd, pose, 0.2, [box], none, 0.25)
    assert stopped and guarded[0] == 0.0 and guarded[1] == 0.5  # it may still turn
    assert not approach_guard(cmd, np.array([0.4, 0.0, np.pi]), 0.2, [box], none, 0.25)[1]  # driving away
    assert not approach_guard(cmd, np.array([-0.2, 0.0, 0.0]), 0.2, [box], none, 0.25)[1]  # 0.45 m off: outside
    assert approach_guard(-cmd, np.array([0.4, 0.0, np.pi]), 0.2, [box], none, 0.25)[1]  # reversing at it
    # a detected moving cell counts as well
    assert approach_guard(cmd, pose, 0.2, [], np.array([[0.75, 0.1]]), 0.25)[1]


def test_the_rotation_shim_stands_aside_while_a_moving_obstacle_is_predicted():
    """The robot faces away from its path; the shim would turn it in place, blind to a box crossing 0.8 m ahead of it.
    While the box is predicted, the MPC (which sees it) does the turning."""
    robot = RobotModel()
    ctl = Controller(robot, MPCConfig(fallback=None), ControllerConfig(tracking=PredictionConfig()))
    pose, vel, goal = np.array([3.0, 2.0, np.pi]), np.zeros(2), np.array([7.0, 2.0, 0.0])
    path = np.array([pose[:2], goal[:2]])
    statuses = []
    for k in range(30):
        box_y = 0.8 + 0.6 * max(k * DT - 1.0, 0.0)  # still for a second, then crossing at x = 3.8 m
        corner = (int(round(pose[1] / RES)) - 30, int(round(pose[0] / RES)) - 30)
        grid_data = np.full((140, 220), -1, np.int8)
        grid_data[30:110, 30:190] = world(3.8, box_y)
        grid = window(grid_data, (corner[0] + 30, corner[1] + 30))
        grid = OccupancyGrid(grid.data, RES, (corner[1] * RES, corner[0] * RES, 0.0))
        out = ctl.step(grid, pose, vel, goal, global_path=path)
        statuses.append((out.status, out.predicted is not None))
        pose, vel = robot.step(pose, out.command, ctl.mpc_config.dt), out.command
    assert statuses[0] == ("rotating_to_path", False)  # before the box moves: the shim turns the robot
    predicted = [status for status, p in statuses if p]
    assert predicted and "rotating_to_path" not in predicted
