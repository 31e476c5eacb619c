"""The manoeuvre recovery (nav/maneuver.py): a Jackal-sized body pinned misaligned at the mouth of a passage 0.6 m
wide (the dense worlds' lanes) gets into it by a footprint-checked lattice motion -- back up, turn, drive, turn --
that the MPC cannot find by descent.

The world: a clearing with one lane leaving it east, everything else wall. Kinematic closed loops, no simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mnemo_mpc.nav import recovery
from mnemo_mpc.nav.actuation import ActuationModel, CommandHistory
from mnemo_mpc.nav.maneuver import HEADINGS, MOVES, TURN_SLACK_M, Maneuver, plan_maneuver
from mnemo_mpc.nav.recovery import pose_margins as _pose_margins
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.profile import NavParams, build

RES = 0.05
LANE_Y = (1.45, 2.05)  # 0.6 m: the Jackal's 0.43 m plus its 0.05 m margin each side leaves 7 cm
# Front corner on the lane's mouth, 14 cm off its axis and 16 degrees off its heading: as dense-1083 stood.
WEDGED = np.array([1.85, 1.89, 0.28])


def jackal(v_min: float = -0.35):
    params = dataclasses.replace(NavParams.from_yaml("config/robots/jackal.yaml"), v_min=v_min)
    return build(params)


def clearing_and_lane() -> OccupancyGrid:
    data = np.full((80, 120), 100, np.int8)  # 4 m x 6 m of wall
    data[10:60, 10:42] = 0  # clearing: x 0.5-2.1, y 0.5-3.0
    data[round(LANE_Y[0] / RES) : round(LANE_Y[1] / RES), 42:115] = 0  # the lane east to x 5.75
    return OccupancyGrid(data, resolution=RES)


def lane_path() -> np.ndarray:
    x = np.arange(1.3, 5.5, 0.05)
    return np.column_stack([x, np.full_like(x, np.mean(LANE_Y))])


@pytest.fixture(scope="module")
def setup():
    profile = jackal()
    grid = clearing_and_lane()
    controller = profile.controller()
    return profile, grid, DistanceField(grid), controller.mpc(grid.shape)


def test_the_wedged_pose_is_free_but_neither_forward_nor_turning_is(setup):
    _profile, _grid, field, mpc = setup
    assert 0.0 < _pose_margins(mpc, field, WEDGED) < 0.05
    ahead = WEDGED + np.array([0.05 * np.cos(WEDGED[2]), 0.05 * np.sin(WEDGED[2]), 0.0])
    assert _pose_margins(mpc, field, ahead) < 0.0
    assert not recovery.rotation_free(mpc, field, WEDGED, -WEDGED[2])  # onto the lane's heading in place


def test_lattice_moves_land_on_cells_and_headings_match_them():
    assert np.allclose(np.arctan2(MOVES[:, 1], MOVES[:, 0]), HEADINGS)
    assert len(set(map(tuple, MOVES))) == 16


@pytest.mark.parametrize("margin", [0.05, 0.03, 0.01])
def test_plan_backs_out_and_ends_aligned_in_the_lane(setup, margin):
    _profile, _grid, field, mpc = setup
    wp = plan_maneuver(mpc, field, WEDGED, lane_path(), margin)
    assert wp is not None
    assert wp[0, 3] == -1  # out first: nothing else is free
    end = wp[-1]
    assert end[0] > 2.3 and abs(end[1] - np.mean(LANE_Y)) <= RES + 1e-9 and abs(end[2]) < 1e-9
    # Every waypoint after the join keeps the margin (the join itself may keep only what the robot has now).
    assert np.all(_pose_margins(mpc, field, wp[1:, :3]) >= margin - 1e-9)


def test_a_forward_only_robot_never_plans_to_reverse(setup):
    _profile, grid, field, _mpc = setup
    mpc = jackal(v_min=0.0).controller().mpc(grid.shape)
    for pose in (WEDGED, np.array([1.2, 1.2, 2.0])):
        wp = plan_maneuver(mpc, field, pose, lane_path(), 0.03)
        assert wp is None or np.all(wp[:, 3] >= 0)
    assert plan_maneuver(mpc, field, np.array([1.2, 1.2, 2.0]), lane_path(), 0.03) is not None


def test_no_path_ahead_no_plan(setup):
    _profile, _grid, field, mpc = setup
    assert plan_maneuver(mpc, field, WEDGED, lane_path()[:3], 0.03) is None  # the path ends behind the robot
    assert plan_maneuver(mpc, field, WEDGED, np.array([[1.0, 1.0], [1.0, 1.0]]), 0.03) is None


def test_executor_drives_the_plan_into_the_lane_above_its_floor(setup):
    profile, _grid, field, mpc = setup
    wp = plan_maneuver(mpc, field, WEDGED, lane_path(), 0.03)
    floor = Maneuver.floor(mpc, field, WEDGED, 0.03)
    man = Maneuver(wp, floor, 0.0, 30.0)
    pose, dt = WEDGED.copy(), profile.mpc.dt
    for k in range(2000):
        cmd = man.target(mpc, field, pose, np.zeros(2), k * dt)
        if cmd is None:
            break
        assert profile.robot.v_min - 1e-9 <= cmd[0] <= profile.robot.v_max and abs(cmd[1]) <= profile.robot.w_max
        pose = profile.robot.step(pose, cmd, dt)
        assert _pose_margins(mpc, field, pose) >= floor - 0.005, f"too close at {pose}"
    assert man.reason == "done"
    assert pose[0] > 2.3 and abs(pose[1] - np.mean(LANE_Y)) < 0.04 and abs(pose[2]) < 0.05


def test_a_manoeuvre_turn_inside_the_margin_gets_no_closer_than_it_starts(setup):
    """A robot already inside the plan's margin less 2 cm (the wedged one: 1.6 cm) turning its front corner towards
    the lane's mouth: the straights' floor would let the turn take it to 1 mm, the turn stops within TURN_SLACK_M of
    where it began (a manoeuvre's turn touched a block on the drifting Jackal, dense-1027)."""
    profile, _grid, field, mpc = setup
    margin = 0.04
    start = float(_pose_margins(mpc, field, WEDGED, exact=True))
    floor = Maneuver.floor(mpc, field, WEDGED, margin)
    assert floor < start - TURN_SLACK_M < margin - 0.02  # the case: the old floor allows what the turn floor does not
    turn = np.array([[WEDGED[0], WEDGED[1], WEDGED[2] - 0.16, 0.0]])  # clockwise, its corner to ~5 mm of the mouth
    yaws = WEDGED[2] - np.linspace(0.0, 0.16, 17)
    sweep = _pose_margins(mpc, field, np.column_stack([np.full((17, 2), WEDGED[:2]), yaws]), exact=True)
    assert floor <= sweep.min() < start - TURN_SLACK_M  # allowed at the floor the straights keep
    man = Maneuver(turn, floor, 0.0, 30.0, margin=margin)
    pose, dt = WEDGED.copy(), profile.mpc.dt
    for k in range(200):
        cmd = man.target(mpc, field, pose, np.zeros(2), k * dt)
        if cmd is None:
            break
        pose = profile.robot.step(pose, cmd, dt)
        assert _pose_margins(mpc, field, pose, exact=True) >= start - TURN_SLACK_M - 1e-9, f"too close at {pose}"
    assert "turn 1/1 blocked" in man.reason


def test_executor_stops_when_the_way_is_blocked(setup):
    """A wall drawn across the lane after planning: the manoeuvre ends, named, before the footprint reaches it."""
    profile, grid, field, mpc = setup
    wp = plan_maneuver(mpc, field, WEDGED, lane_path(), 0.03)
    data = grid.data.copy()
    data[:, 52:54] = 100  # x 2.6-2.7
    blocked = DistanceField(OccupancyGrid(data, resolution=RES))
    man = Maneuver(wp, Maneuver.floor(mpc, field, WEDGED, 0.03), 0.0, 30.0)
    pose, dt = WEDGED.copy(), profile.mpc.dt
    for k in range(2000):
        cmd = man.target(mpc, blocked, pose, np.zeros(2), k * dt)
        if cmd is None:
            break
        pose = profile.robot.step(pose, cmd, dt)
        assert _pose_margins(mpc, blocked, pose) >= 0.0
    assert "blocked" in man.reason


def test_controller_gets_the_wedged_robot_through_the_lane(caplog):
    """Closed loop: the controller, stuck at the mouth, runs the manoeuvre first and then reaches a goal down the
    lane; with the manoeuvre taken out of the recoveries it does not (the fault this guards against)."""
    import logging

    caplog.set_level(logging.INFO, logger="mnemo_mpc.nav.controller")
    reached = {order: _drive_from_wedged(order) for order in (recovery.ORDER, recovery.ORDER[1:])}
    assert reached[recovery.ORDER] and not reached[recovery.ORDER[1:]]
    assert "recovery 1/6: recovery_maneuver" in caplog.text


def _drive_from_wedged(order: tuple[str, ...]) -> bool:
    import unittest.mock

    profile = jackal()
    # the ideal robot (no lag to invert), the shift start: the subject is the manoeuvre, not the model
    controller = profile.controller("shift", None, progress_timeout_s=2.0, actuation=None)
    grid = clearing_and_lane()
    xs, ys = grid.cell_centers()
    occupied = np.column_stack([xs[grid.occupied_mask()], ys[grid.occupied_mask()]])
    # only cells within the body's reach of its rotation centre can be inside it: the same check on ~1% of the cells
    reach = float(np.max(np.linalg.norm(profile.robot.shape.outline(), axis=1))) + RES
    goal = np.array([5.2, np.mean(LANE_Y), 0.0])
    path = lane_path()
    controller.set_global_path(path)
    pose, vel, dt = WEDGED.copy(), np.zeros(2), profile.mpc.dt
    with unittest.mock.patch.object(recovery, "ORDER", order):
        for _ in range(int(40.0 / dt)):
            out = controller.step(grid, pose, vel, goal)
            if out.status == "goal_reached":
                return True
            if out.status == "failed":
                return False
            pose, vel = profile.robot.step(pose, out.command, dt), out.command
            # The body itself, not its covering discs (which stick out by up to footprint_tolerance): no wall cell's
            # centre inside it.
            near = occupied[np.linalg.norm(occupied - pose[:2], axis=1) <= reach]
            assert np.all(profile.robot.shape.world_signed_distance(pose, near) > 0.0), f"collision at {pose}"
    return False


def test_a_robot_blind_behind_plans_forward_only_and_reverses_in_recoveries_alone(setup):
    """The Jackal may reverse (its recoveries back up) but its 270-degree lidar does not see behind it: its MPC plans
    forward only (a goal behind it is turned to, not reversed to -- reversing into the blind sector hit a wall,
    dense-1083 mapless), while its commands may go down to v_min."""
    profile, grid, field, _mpc = setup
    assert profile.robot.v_min < 0 and profile.mpc.plan_v_min == 0.0
    mpc = profile.controller().mpc(grid.shape)
    plan = mpc.solve(field, np.array([1.3, 1.75, 0.0]), np.zeros(2), np.array([0.9, 1.75, 0.0]))
    assert np.all(plan.controls[:, 0] >= -1e-6)
    full_circle = dataclasses.replace(NavParams.from_yaml("config/robots/jackal.yaml"), sensor_fov_deg=360.0)
    assert build(full_circle).mpc.plan_v_min is None
    command, _flags = profile.controller().check_command(np.array([-0.3, 0.0]), np.array([-0.3, 0.0]))
    assert command[0] == pytest.approx(-0.3)


def test_recovery_sweeps_check_the_obstacle_cells_not_the_interpolated_field(setup):
    """The bilinear field overestimates the distance towards a wall's corner (the lane's mouth here): turning in place
    past it, the field kept a millimetre of margin where the body cut the corner (TurtleBot3 Burger, dense-1083). The
    recoveries' checks use the distance to the cells themselves and refuse those turns."""
    _profile, _grid, field, mpc = setup
    cut, cut_into = 0, False
    for x in np.arange(1.60, 1.95, 0.01):
        for y in np.arange(1.30, 1.75, 0.01):
            for yaw in (-0.6, -0.3, 0.0, 0.3):
                pose = np.array([x, y, yaw])
                yaws = yaw + np.linspace(0.0, 0.5, 11)
                poses = np.stack([np.full(11, x), np.full(11, y), yaws], axis=-1)
                interpolated = float(np.min(_pose_margins(mpc, field, poses)))
                cells = float(np.min(_pose_margins(mpc, field, poses, exact=True)))
                assert cells <= interpolated + 1e-9
                need = recovery.required_margin(mpc, field, pose)
                if interpolated >= need > cells:  # free on the field, not on the cells
                    cut += 1
                    assert not recovery.rotation_free(mpc, field, pose, 0.5)
                    cut_into = cut_into or cells < 0.0 <= need
    assert cut > 0 and cut_into  # the field's overestimate does occur at this mouth, into the wall too


def _turn_plan(pose: np.ndarray, w: float, dt: float, n: int = 10):
    from mnemo_mpc.planning.mpc import PlanResult

    controls = np.tile([0.0, w], (n, 1))
    states = np.column_stack([np.full(n + 1, pose[0]), np.full(n + 1, pose[1]), pose[2] + w * dt * np.arange(n + 1)])
    return PlanResult(states, controls, 1, 0.0, "converged", True, 0.0, 0.0, 0.0, "shift", dt=dt)


def test_a_converged_turn_in_place_that_cuts_a_cell_corner_is_not_sent(setup):
    """The solver keeps its margin on the spline field, which overestimates towards a corner: a converged plan turning
    in place past the lane's mouth that the interpolated field lets through but the cells do not is refused (a stop,
    flagged), as a recovery's turn would be; the same plan where the cells allow it is sent."""
    profile, _grid, field, _mpc = setup
    controller = profile.controller()
    mpc = controller.mpc(field.shape)
    dt = profile.mpc.dt
    cut = sent = None
    for x in np.arange(1.60, 1.95, 0.01):
        for y in np.arange(1.30, 1.75, 0.01):
            for yaw in (-0.6, -0.3, 0.0, 0.3):
                pose = np.array([x, y, yaw])
                plan = _turn_plan(pose, 0.5, dt)
                first = plan.states[:8]  # the 0.3 s checked
                need = recovery.required_margin(mpc, field, pose, 0.01)
                on_field = float(np.min(_pose_margins(mpc, field, first)))
                on_cells = float(np.min(_pose_margins(mpc, field, first, exact=True)))
                if cut is None and on_field >= need > on_cells + 0.002:
                    cut = pose
                if sent is None and on_cells >= need + 0.002 and on_cells < 0.05:
                    sent = pose
    assert cut is not None and sent is not None
    command, status, flags = controller._command(_turn_plan(cut, 0.5, dt), field, cut, np.zeros(2), 0.01)
    assert status == "fallback_stop" and "creep_cuts_cells" in flags and np.allclose(command, 0.0)
    command, status, flags = controller._command(_turn_plan(sent, 0.5, dt), field, sent, np.zeros(2), 0.01)
    assert status == "planned" and command[1] > 0


def test_a_robot_already_inside_its_margin_may_back_out_no_deeper(setup):
    """Its discs a few millimetres into the mouth's wall (a wall its drifting odometry moved, dense-1083): the
    manoeuvre still gets it out, backing off first, and its executor's floor is where it stands, not 0."""
    _profile, _grid, field, mpc = setup
    u = np.array([np.cos(WEDGED[2]), np.sin(WEDGED[2]), 0.0])
    inside = next(WEDGED + s * u for s in np.arange(0.0, 0.06, 0.0025) if _pose_margins(mpc, field, WEDGED + s * u) < 0)
    now = float(_pose_margins(mpc, field, inside, exact=True))
    assert -0.02 < now < 0.0
    wp = plan_maneuver(mpc, field, inside, lane_path(), 0.03)
    assert wp is not None and wp[0, 3] == -1
    assert Maneuver.floor(mpc, field, inside, 0.03) == pytest.approx(now)
    assert Maneuver.floor(mpc, field, WEDGED, 0.03) >= 0.0  # one outside keeps 0 at least, as before


def test_a_turn_starts_only_once_the_body_stops_rolling(setup):
    _profile, _grid, field, mpc = setup
    man = Maneuver(np.array([[WEDGED[0], WEDGED[1], WEDGED[2] + 0.5, 0.0]]), 0.0, 0.0, 30.0)
    assert np.array_equal(man.target(mpc, field, WEDGED, np.array([0.2, 0.0]), 0.0), np.zeros(2))
    cmd = man.target(mpc, field, WEDGED, np.array([0.01, 0.0]), 0.0)
    assert cmd[0] == 0.0 and cmd[1] > 0.0


def test_executor_on_a_lagging_drive_keeps_its_floor(setup):
    """The Jackal's drive as its profile states it (commands acting 50 ms late, 0.2 s / 0.15 s first-order lags), the
    executor driven as the controller drives it (its pose predicted over the latency, its targets turned into the
    commands a lagging drive needs, `nav.actuation`): the manoeuvre into the lane ends done, above its floor. Its
    targets sent as commands, unpredicted and uninverted, leave the robot where its fourth turn is blocked."""
    profile, _grid, field, mpc = setup
    act = ActuationModel(latency_s=0.05, lag_v_s=0.2, lag_w_s=0.15)
    history = CommandHistory(act)
    wp = plan_maneuver(mpc, field, WEDGED, lane_path(), 0.03)
    floor = Maneuver.floor(mpc, field, WEDGED, 0.03)
    man = Maneuver(wp, floor, 0.0, 60.0)
    pose, vel, dt, sub = WEDGED.copy(), np.zeros(2), profile.mpc.dt, 20
    sent: list[tuple[float, np.ndarray]] = [(-1.0, np.zeros(2))]
    least = np.inf
    for k in range(3000):
        t = k * dt
        start_pose, start_vel = history.predict(pose, vel, t, t + act.latency_s)
        target = man.target(mpc, field, start_pose, start_vel, t)
        if target is None:
            break
        command = profile.robot.clip_control(act.command_for(target, start_vel, dt))
        history.record(t, command)
        sent.append((t, command))
        for j in range(sub):  # the body between control steps, acting on what was sent a latency ago
            now = t + j * dt / sub
            acting = [c for ts, c in sent if ts <= now - act.latency_s + 1e-12][-1]
            vel = vel + (acting - vel) * (1.0 - np.exp(-dt / sub / np.array([act.lag_v_s, act.lag_w_s])))
            pose = profile.robot.step(pose, vel, dt / sub)
            least = min(least, float(_pose_margins(mpc, field, pose, exact=True)))
    assert man.reason == "done"
    assert least >= floor - 0.005, f"{least:.4f} below the floor {floor:.4f}"
