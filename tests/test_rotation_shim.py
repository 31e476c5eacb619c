"""The rotation shim (mnemo_mpc.nav.rotation_shim, Nav2's RotationShimController): a robot at rest facing away from
its path turns in place towards it first, hands over to the MPC near the path's bearing, and never turns where the
footprint's sweep would come closer to an obstacle than the margin. Kinematic closed loop, no simulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.nav.recovery import footprint_margin
from mnemo_mpc.nav.rotation_shim import STATUS, ShimConfig, path_bearing
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel

RES = 0.05


def box_robot() -> RobotModel:
    # A Jackal-like box: 0.508 x 0.430 m, circumscribed radius 0.333 m.
    return RobotModel.from_footprint(
        Footprint.rectangle(0.508, 0.430), safety_margin=0.05, v_max=1.0, w_max=2.0, a_max=2.0, alpha_max=4.0
    )


def grid_from(data: np.ndarray) -> OccupancyGrid:
    return OccupancyGrid(data, RES, (0.0, 0.0, 0.0))


def open_room(size: int = 120) -> OccupancyGrid:
    data = np.zeros((size, size), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    return grid_from(data)


def run(controller: Controller, grid: OccupancyGrid, pose, path, velocity=(0.0, 0.0), steps: int = 200):
    """Per-step (status, command, pose before the step) until the shim hands over (or `steps`)."""
    pose, vel = np.asarray(pose, float), np.asarray(velocity, float)
    goal = np.array([path[-1][0], path[-1][1], 0.0])
    path = np.asarray(path, float)
    trace = []
    for _ in range(steps):
        out = controller.step(grid, pose, vel, goal, global_path=path)
        trace.append((out.status, out.command.copy(), pose.copy()))
        if out.status != STATUS:
            break
        pose, vel = controller.robot.step(pose, out.command, controller.mpc_config.dt), out.command
    return trace


def test_turns_in_place_to_the_path_then_hands_over_at_rest():
    robot = box_robot()
    controller = Controller(robot, MPCConfig(fallback=None, dt=0.05))
    # Path due north from the robot, which faces east: 90 degrees to turn, counter-clockwise.
    trace = run(controller, open_room(), (3.0, 2.0, 0.0), [(3.0, 2.0), (3.0, 5.0)])
    statuses = [s for s, _, _ in trace]
    assert statuses[0] == STATUS and statuses[-1] == "planned"
    turning = [(c, p) for s, c, p in trace if s == STATUS]
    assert all(c[0] == 0.0 and c[1] > 0.0 for c, _ in turning)  # in place, towards the path
    assert all(np.allclose(p[:2], (3.0, 2.0)) for _, p in turning)
    handed_over = trace[-1][2]
    error = abs(math.atan2(math.sin(handed_over[2] - math.pi / 2), math.cos(handed_over[2] - math.pi / 2)))
    assert error <= ShimConfig().handover_rad + 1e-9
    # Slowed down to (nearly) rest for the hand-over: a fifth of the peak rate at most.
    peak = max(abs(c[1]) for c, _ in turning)
    assert peak == pytest.approx(ShimConfig().rotate_speed) and abs(turning[-1][0][1]) <= 0.2 * peak
    # Within the acceleration limits throughout (checked like every command).
    w = np.array([0.0] + [c[1] for c, _ in turning])
    assert np.all(np.abs(np.diff(w)) <= robot.alpha_max * controller.mpc_config.dt + 1e-9)


def test_turns_the_shorter_way():
    controller = Controller(box_robot(), MPCConfig(fallback=None, dt=0.05))
    trace = run(controller, open_room(), (3.0, 3.0, 0.0), [(3.0, 3.0), (3.0, 0.5)])  # path due south
    assert trace[0][0] == STATUS and trace[0][1][1] < 0.0


def test_not_engaged_below_the_threshold_or_while_moving():
    controller = Controller(box_robot(), MPCConfig(fallback=None, dt=0.05))
    # 30 degrees off: the MPC turns while driving.
    trace = run(controller, open_room(), (3.0, 2.0, math.radians(60)), [(3.0, 2.0), (3.0, 5.0)])
    assert trace[0][0] != STATUS
    controller.reset()
    # 90 degrees off but driving at 0.5 m/s: the curve is the MPC's.
    trace = run(controller, open_room(), (3.0, 2.0, 0.0), [(3.0, 2.0), (3.0, 5.0)], velocity=(0.5, 0.0))
    assert trace[0][0] != STATUS


def test_never_turns_where_the_footprint_sweep_hits_a_wall():
    # A corridor 0.60 m wide: the 0.43 m wide box fits lengthwise, its 0.666 m circumscribed circle does not.
    data = np.zeros((60, 160), np.int8)
    data[:18, :] = 100
    data[30:, :] = 100  # free rows 18..29: 12 cells = 0.60 m
    grid = grid_from(data)
    robot = box_robot()
    controller = Controller(robot, MPCConfig(fallback=None, dt=0.05))
    pose = (4.0, 1.2, 0.0)  # centred, facing east; the path goes west
    field = DistanceField(grid)
    mpc = controller.mpc(grid.shape)
    assert footprint_margin(mpc, field, np.array([pose])) > 0.0  # it fits where it is
    trace = run(controller, grid, pose, [(4.0, 1.2), (1.0, 1.2)], steps=1)
    assert trace[0][0] != STATUS


def test_disabled_with_none():
    controller = Controller(box_robot(), MPCConfig(fallback=None, dt=0.05), ControllerConfig(rotation_shim=None))
    trace = run(controller, open_room(), (3.0, 2.0, 0.0), [(3.0, 2.0), (3.0, 5.0)], steps=1)
    assert trace[0][0] != STATUS


def test_path_bearing_samples_the_first_point_far_enough():
    ref = np.array([[0.0, 0.0], [0.2, 0.0], [0.4, 0.1], [0.6, 0.6], [1.0, 1.0]])
    assert path_bearing(np.zeros(3), ref, 0.5) == pytest.approx(math.atan2(0.6, 0.6))
    assert path_bearing(np.zeros(3), ref, 5.0) == pytest.approx(math.atan2(1.0, 1.0))  # none that far: the last
    assert path_bearing(np.zeros(3), np.zeros((4, 2)), 0.5) is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("angular_dist_threshold_rad", 0.0),
        ("handover_rad", float("nan")),
        ("rotate_speed", True),
        ("max_engage_speed", "1"),
    ],
)
def test_config_is_validated_naming_the_field(field, value):
    with pytest.raises(InputError, match=f"ShimConfig.{field}"):
        ShimConfig(**{field: value})


def test_config_refuses_a_handover_beyond_the_threshold():
    with pytest.raises(InputError, match="handover_rad < angular_dist_threshold_rad"):
        ShimConfig(handover_rad=1.0, angular_dist_threshold_rad=0.5)
    with pytest.raises(InputError, match="ControllerConfig.rotation_shim"):
        ControllerConfig(rotation_shim={"handover_rad": 0.1})


def wall_and_its_returns() -> tuple[OccupancyGrid, np.ndarray]:
    """The open room with a wall at x = 3.0-3.1, and lidar returns on its face (what makes surface points)."""
    data = open_room().data.copy()
    data[:, 60:62] = 100
    return grid_from(data), np.stack([np.full(40, 3.004), np.linspace(1.0, 5.0, 40)], axis=-1)


def test_the_shims_turn_is_checked_on_the_whole_cells_not_the_surface_points(monkeypatch):
    """The shim's turn in place runs the corners millimetres from the walls, like a recovery's turn: it is checked on
    the whole cells (`DistanceField.cells_only`) while the MPC plans on the lidar returns' surface points."""
    from mnemo_mpc.nav.rotation_shim import RotationShim

    seen = []

    def target(self, mpc, field_, pose, velocity, reference, margin):
        seen.append(field_)
        return None

    monkeypatch.setattr(RotationShim, "target", target)
    grid, face = wall_and_its_returns()
    ctrl = Controller(box_robot(), MPCConfig(N=10, dt=0.1), ControllerConfig())
    pose, goal = np.array([2.0, 3.0, math.pi]), np.array([2.5, 4.5, 0.0])
    for _ in range(4):
        out = ctrl.step(grid, pose, np.zeros(2), goal, returns=face)
    assert out.field is not None and out.field.surfaces is not None  # the MPC's field has the surface points
    assert seen and all(f.surfaces is None for f in seen)


def test_the_final_turn_to_the_goals_yaw_is_checked_on_the_whole_cells(monkeypatch):
    """As the shim's: the goal alignment's turn in place (`Controller._align_to_goal`) is checked on the whole cells."""
    from mnemo_mpc.nav import recovery

    seen = []
    free = recovery.rotation_free

    def rotation_free(mpc, field_, pose, angle, margin=None):
        seen.append(field_)
        return free(mpc, field_, pose, angle, margin)

    monkeypatch.setattr(recovery, "rotation_free", rotation_free)
    grid, face = wall_and_its_returns()
    ctrl = Controller(box_robot(), MPCConfig(N=10, dt=0.1), ControllerConfig(yaw_goal_tolerance=0.2))
    pose = np.array([2.0, 3.0, 0.0])
    for _ in range(4):
        out = ctrl.step(grid, pose, np.zeros(2), np.array([2.0, 3.0, 1.5]), returns=face)
    assert out.status == "aligning_to_goal"
    assert seen and all(f.surfaces is None for f in seen)
