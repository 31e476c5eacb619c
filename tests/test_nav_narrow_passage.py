"""Narrow passages and real time (issue 10 items 3 and 5): the controller narrows the MPC's safety margin to what the
path ahead offers (never below `ControllerConfig.min_margin_m`), a closed loop on a lidar grid tolerates half a cell
of apparent start penetration (`MPCConfig.start_tolerance_m`), the planner's BLAS runs on one thread, and a real-time
closed loop bounds every solve by the control period, applies a capped solve's iterate only when it is safe, and a start
inside the margin band stays solvable."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig
from mnemo_mpc.planning.robot import RobotModel

RES = 0.05
WINDOW = (60, 60)


def slot(width_m: float) -> OccupancyGrid:
    """8 m x 4 m room split by a wall at x 3.5..4.5 m with a slot `width_m` wide centred on y = 2 m."""
    data = np.zeros((80, 160), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    half = int(round(width_m / RES / 2))
    data[:, 70:90] = 100
    data[40 - half : 40 + half, 70:90] = 0
    return OccupancyGrid(data, RES)


def drive(controller: Controller, grid: OccupancyGrid, steps: int = 200) -> tuple[int, float]:
    """(steps to the goal or -1, the least clearance of the robot's disc on the map over the run)."""
    controller.reset()
    field = DistanceField(grid)
    pose, vel, goal = np.array([1.5, 2.0, 0.0]), np.zeros(2), np.array([6.5, 2.0, 0.0])
    path = np.array([pose[:2], goal[:2]])
    least = np.inf
    for k in range(steps):
        out = controller.step(grid.window(pose[:2], WINDOW), pose, vel, goal, global_path=path)
        if out.status == "goal_reached":
            return k, least
        pose, vel = controller.robot.step(pose, out.command, controller.mpc_config.dt), out.command
        least = min(least, float(field.distance(pose[:2])) - controller.robot.radius)
    return -1, least


@pytest.fixture(scope="module")
def controller() -> Controller:
    return Controller(RobotModel(), MPCConfig(fallback=None))


def test_a_slot_narrower_than_the_full_margin_is_passed_with_the_floor_kept(controller):
    """0.5 m: the 0.4 m robot with its 0.05 m margin (+ the 0.01 m spline buffer) needs 0.52 m; it has 0.05 m a side."""
    steps, least = drive(controller, slot(0.5))
    assert steps > 0
    assert least >= controller.config.min_margin_m - 1e-3
    # ... and the full margin where there is room: the margin narrows only in the slot
    field = DistanceField(slot(0.5))
    wide = controller._step_margin(field, field.shape, np.array([[1.0, 1.0], [1.2, 1.0], [1.4, 1.0]]))
    assert wide == controller.robot.safety_margin


def test_an_obstacle_on_one_side_keeps_the_full_margin(controller):
    """Narrowing is for passages: with room on the other side (a box, perhaps a moving one, 0.25 m from the path's
    line) the MPC keeps the full margin and steers around; the same distance on both sides narrows it."""
    path = np.column_stack([np.linspace(1.0, 4.0, 31), np.full(31, 2.0)])
    data = np.zeros((80, 160), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    data[45:50, 50:56] = 100  # a box whose near face is 0.25 m above the path
    one_side = DistanceField(OccupancyGrid(data, RES))
    assert controller._step_margin(one_side, one_side.shape, path) == controller.robot.safety_margin
    data[30:35, 50:56] = 100  # and its mirror 0.25 m below: a 0.5 m passage
    both = DistanceField(OccupancyGrid(data, RES))
    narrowed = controller._step_margin(both, both.shape, path)
    assert controller.config.min_margin_m <= narrowed < controller.robot.safety_margin


def test_without_narrowing_the_same_slot_stops_the_robot():
    strict = Controller(
        RobotModel(), MPCConfig(fallback=None), ControllerConfig(min_margin_m=RobotModel().safety_margin)
    )
    steps, _ = drive(strict, slot(0.5), steps=120)
    assert steps == -1


def test_a_slot_narrower_than_the_robot_is_not_entered(controller):
    steps, least = drive(controller, slot(0.35), steps=120)
    # Stopped at the slot's corners: the spline field rounds a corner off by up to ~1 cm, which the 0.01 m buffer
    # and the margin floor absorb (measured: 0.001 m inside the disc at worst, a touch, never through).
    assert steps == -1 and least > -0.005


def test_margin_argument_is_checked():
    mpc = SQPMPC(RobotModel(), MPCConfig(fallback=None), (40, 40))
    field = DistanceField(OccupancyGrid(np.zeros((40, 40), np.int8), RES))
    with pytest.raises(InputError, match="margin"):
        mpc.solve(field, np.array([1.0, 1.0, 0.0]), np.zeros(2), np.array([1.5, 1.0, 0.0]), margin=0.2)
    with pytest.raises(InputError, match="start_tolerance_m"):
        MPCConfig(start_tolerance_m=-0.01)


def test_start_tolerance_solves_a_start_half_a_cell_inside_and_never_gets_closer():
    data = np.zeros((40, 40), np.int8)
    data[:, :10] = 100  # wall up to x = 0.5 m
    grid = OccupancyGrid(data, RES)
    field = DistanceField(grid)
    robot = RobotModel()
    start = np.array([0.69, 1.0, np.pi / 2])  # 0.19 m from the wall: 0.01 m "inside" the 0.2 m disc
    goal = np.array([0.69, 1.6, np.pi / 2])
    with pytest.raises(InfeasibleProblemError):
        SQPMPC(robot, MPCConfig(fallback=None), (40, 40)).solve(field, start, np.zeros(2), goal)
    tolerant = SQPMPC(robot, MPCConfig(fallback=None, start_tolerance_m=0.025), (40, 40))
    res = tolerant.solve(field, start, np.zeros(2), goal)
    assert res.success
    d0 = float(field.distance(start[:2]))
    assert np.all(field.distance(res.states[1:, :2]) >= d0 - 2e-3)  # no knot closer than the start
    with pytest.raises(InfeasibleProblemError):  # a real overlap is still refused
        tolerant.solve(field, np.array([0.66, 1.0, np.pi / 2]), np.zeros(2), goal)


def test_the_planner_runs_blas_on_one_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    SQPMPC(RobotModel(), MPCConfig(fallback=None), (40, 40))
    blas = [p for p in threadpoolctl.threadpool_info() if p["user_api"] == "blas"]
    assert blas and all(p["num_threads"] == 1 for p in blas)


def test_real_time_setup_bounds_every_solve_by_the_period():
    from mnemo_mpc.sim.profile import SOLVE_BUDGET, closed_loop_setup

    mpc = closed_loop_setup(real_time=True).mpc
    assert mpc.fallback is None and mpc.max_time_s == pytest.approx(SOLVE_BUDGET * mpc.dt)
    assert closed_loop_setup().mpc.fallback == MPCConfig().fallback  # collect keeps the iteration cap alone


def test_a_start_inside_the_margin_band_moving_at_a_wall_stays_solvable():
    """A disc in the band, driving at the wall: bounded at its current clearance every QP was infeasible (it cannot
    stop at once); `MPCConfig.band_margin_m` gives it room down to that margin (half a cell) to slow down and turn
    away."""
    data = np.zeros((40, 40), np.int8)
    data[:, :10] = 100  # wall up to x = 0.5 m
    field = DistanceField(OccupancyGrid(data, RES))
    robot = RobotModel()
    start = np.array([0.75, 1.0, np.pi])  # 0.05 m from the wall beyond the disc: inside the band
    velocity, goal = np.array([0.2, 0.0]), np.array([0.9, 1.8, np.pi / 2])
    old_rule = SQPMPC(robot, MPCConfig(fallback=None, band_margin_m=robot.safety_margin), (40, 40))
    assert not old_rule.solve(field, start, velocity, goal).success
    mpc = SQPMPC(robot, MPCConfig(fallback=None), (40, 40))
    res = mpc.solve(field, start, velocity, goal)
    assert res.success and res.feasible
    band = MPCConfig().band_margin_m
    assert res.required_margin == pytest.approx(band) == mpc.start_margin(field, start)
    assert float(np.min(field.distance(res.states[:, :2]))) - robot.radius >= band - 2e-3
    # Outside the band nothing changes: the full margin.
    assert mpc.start_margin(field, np.array([1.2, 1.0, np.pi])) == pytest.approx(robot.safety_margin)
    with pytest.raises(InputError, match="band_margin_m"):
        MPCConfig(band_margin_m=-0.01)


def test_a_solve_cut_short_is_applied_only_when_its_iterate_is_safe():
    """Real time: an SQP stopped by its time or iteration cap ends the step on its own iterate ("fallback_unconverged")
    when that iterate, rolled out from the pose, keeps the footprint's margin; never a refused or unsafe one."""
    from types import SimpleNamespace

    data = np.zeros((40, 40), np.int8)
    data[:, 30:] = 100  # wall from x = 1.5 m
    field = DistanceField(OccupancyGrid(data, RES))
    controller = Controller(RobotModel(), MPCConfig(fallback=None), ControllerConfig(rotation_shim=None))
    n = controller.mpc_config.N
    pose, velocity = np.array([1.0, 1.0, 0.0]), np.zeros(2)  # facing the wall, 0.3 m beyond the disc
    hold = np.zeros((n, 2))
    into_wall = np.tile([0.5, 0.0], (n, 1))
    for status, controls, expected in (
        ("time_limit", hold, "fallback_unconverged"),
        ("max_iter", hold, "fallback_unconverged"),
        ("time_limit", into_wall, "fallback_stop"),  # rolled out it hits the wall
        ("qp_infeasible", hold, "fallback_stop"),  # refused by the QP: not a plan
        ("time_limit", np.full((n, 2), np.nan), "fallback_stop"),
    ):
        unfinished = SimpleNamespace(status=status, controls=controls, escape=None)
        command, got = controller._fallback(field, pose, velocity, None, unfinished)
        assert got == expected, (status, got)
        assert np.all(np.isfinite(command))
    # Through the step: one iteration from a cold start does not converge; its iterate drives the robot.
    grid = OccupancyGrid(np.zeros((40, 40), np.int8), RES)
    goal = np.array([1.8, 1.7, 1.5])
    out = controller.step(
        grid, np.array([0.2, 1.0, 0.0]), velocity, goal, global_path=np.array([[0.2, 1.0], goal[:2]]), max_iter=1
    )
    assert out.status == "fallback_unconverged" and out.plan is not None and out.plan.status == "max_iter"
    np.testing.assert_allclose(out.command, out.plan.controls[0], atol=1e-9)


def test_a_fallback_plan_must_leave_room_to_brake_after_its_horizon():
    """A plan is only solved to its horizon: a fallback (previous plan, cut-short iterate) is applied only if, braked
    to rest at the acceleration limits after its last control, the footprint still keeps the margin. Else a stop."""
    from types import SimpleNamespace

    robot = RobotModel(v_max=1.0, a_max=0.5)
    controller = Controller(robot, MPCConfig(fallback=None), ControllerConfig(rotation_shim=None))
    n, dt = controller.mpc_config.N, controller.mpc_config.dt
    tail = controller.braking_tail(np.array([1.0, 0.4]))
    assert np.all(np.abs(np.diff(np.vstack([[1.0, 0.4], tail]), axis=0)) <= robot.accel_limits * dt + 1e-12)
    np.testing.assert_array_equal(tail[-1], [0.0, 0.0])
    assert len(tail) == int(np.ceil(1.0 / (robot.a_max * dt) - 1e-9))
    assert controller.braking_tail(np.zeros(2)).shape == (0, 2)

    cruise = np.tile([1.0, 0.0], (n, 1))  # 3 m over the horizon, then 1 m to stop at 0.5 m/s^2
    pose = np.array([0.5, 2.0, 0.0])
    velocity = np.array([1.0, 0.0])
    horizon_end = pose[0] + n * dt * 1.0 + robot.radius + robot.safety_margin  # 3.75 m
    stop_end = horizon_end + 1.0**2 / (2 * robot.a_max)  # 4.75 m
    for wall_x, expected in ((3.95, "fallback_stop"), (4.5, "fallback_stop"), (5.0, "fallback_unconverged")):
        assert horizon_end < wall_x  # the horizon alone clears the wall in every case
        data = np.zeros((80, 140), np.int8)
        data[:, int(round(wall_x / RES)) :] = 100
        field = DistanceField(OccupancyGrid(data, RES))
        unfinished = SimpleNamespace(status="time_limit", controls=cruise, escape=None)
        command, got = controller._fallback(field, pose, velocity, None, unfinished)
        assert got == expected, (wall_x, stop_end, got)
        assert np.all(np.isfinite(command))
