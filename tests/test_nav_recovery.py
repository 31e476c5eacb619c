"""Getting unstuck (issue 10 item 4): with no global path the controller plans its own on what it has seen, a
progress checker starts the recovery behaviours (rotate -> back off -> re-plan) and "failed" ends them; the
previous-plan fallback checks the footprint, not the circumscribed circle.

Kinematic closed loop as tests/test_nav_sparse_path.py: the local grid is an 80 x 80 window of the map around the
robot, no simulator."""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace

import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.nav.maneuver import Maneuver
from mnemo_mpc.nav.own_path import SeenMap
from mnemo_mpc.nav.recovery import ProgressChecker
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.global_path import plan_global_path
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim.worlds import generate_world

RES = 0.05
WINDOW = (80, 80)
RECOVERIES = ("recovery_rotate", "recovery_back_off", "recovery_replan")


def drive(controller: Controller, grid: OccupancyGrid, start, goal, steps: int) -> tuple[str, list, np.ndarray]:
    """(outcome, per-step (status, command, velocity before), final pose) of a no-plan run; every pose checked
    collision-free (centre clearance >= radius: a disc robot)."""
    controller.reset()
    field = DistanceField(grid)
    pose, vel, goal = np.asarray(start, float), np.zeros(2), np.asarray(goal, float)
    trace = []
    for _ in range(steps):
        out = controller.step(grid.window(pose[:2], WINDOW), pose, vel, goal)
        trace.append((out.status, out.command.copy(), vel.copy()))
        if out.status in ("goal_reached", "failed"):
            return out.status, trace, pose
        pose, vel = controller.robot.step(pose, out.command, controller.mpc_config.dt), out.command
        assert field.distance(pose[:2]) >= controller.robot.radius, f"collision at {pose}"
    return "timeout", trace, pose


def walled(shape=(120, 240)) -> np.ndarray:
    data = np.zeros(shape, np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    return data


# --- configuration -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("plan_own_path", 1),
        ("planner_unknown_policy", "maybe"),
        ("replan_period_s", 0.0),
        ("required_movement_m", -0.1),
        ("progress_timeout_s", float("nan")),
        ("max_recoveries", -1),
        ("max_recoveries", 2.0),
        ("spin_dist_rad", "1.57"),
        ("backup_dist_m", 0.0),
        ("backup_speed", float("inf")),
        ("recovery_time_allowance_s", True),
        ("stall_wait_s", 0.0),
    ],
)
def test_config_is_validated_naming_the_field(field, value):
    with pytest.raises(InputError, match=f"ControllerConfig.{field}"):
        ControllerConfig(**{field: value})


def test_progress_checker_and_seen_map():
    checker = ProgressChecker(0.5, 2.0)
    assert checker.update(np.zeros(3), 0.0) == (False, False)
    assert checker.update(np.array([0.4, 0.0, 0.0]), 1.9) == (False, False)
    assert checker.update(np.array([0.4, 0.0, 0.0]), 2.0) == (False, True)
    assert checker.update(np.array([0.5, 0.0, 0.0]), 2.1) == (True, False)  # progress moves the baseline
    assert checker.update(np.array([0.6, 0.0, 0.0]), 4.0) == (False, False)
    # the memory keeps what windows showed, on the map's lattice
    data = walled((60, 100))
    world = OccupancyGrid(data, RES)
    seen = SeenMap()
    for x in (1.0, 2.5, 4.0):
        seen.update(world.window(np.array([x, 1.5]), (60, 40)))  # three 2 m x 3 m windows along a 5 m x 3 m room
    grid = seen.grid([np.array([0.5, 0.5])], pad_m=0.5)
    assert grid.resolution == RES and grid.origin[2] == 0.0 and grid.shape == (80, 120)
    known = ~grid.unknown_mask()
    assert known.sum() == data.size
    xs, ys = grid.cell_centers()
    cells = world.world_to_cell(np.stack([xs[known], ys[known]], axis=-1))
    np.testing.assert_array_equal(grid.data[known], world.data[cells[:, 0], cells[:, 1]])


# --- no global path --------------------------------------------------------------------------------------------------


def door_far_away() -> tuple[OccupancyGrid, list, list]:
    """12 m x 6 m; a wall at x = 6 m with its only door at the top (y 4.8..5.8 m), the goal behind the wall on the
    straight line from the start: the local window never shows the door from where the straight line ends."""
    data = walled()
    data[:96, 118:122] = 100
    return OccupancyGrid(data, RES), [3.0, 1.5, 0.0], [9.0, 1.5, 0.0]


@pytest.mark.parametrize("own, background", [(True, False), (True, True), (False, False)])
def test_goal_behind_a_wall_is_reached_only_with_the_own_path(own, background):
    """... planned on the control step or in the worker process (nav.own_path: the real-time profiles' setting)."""
    grid, start, goal = door_far_away()
    cfg = ControllerConfig(plan_own_path=own, plan_own_path_async=background, progress_timeout_s=3.0, max_recoveries=3)
    outcome, trace, pose = drive(Controller(RobotModel(), MPCConfig(), cfg), grid, start, goal, 500)
    if own:
        assert outcome == "goal_reached", f"{outcome} at {pose}"
    else:  # what the node did before: stuck at the wall, now with recoveries and an explicit end
        assert outcome == "failed" and float(np.hypot(*(pose[:2] - goal[:2]))) > 2.0


@pytest.fixture(scope="module")
def rooms_controller() -> Controller:
    return Controller(RobotModel(), MPCConfig(), ControllerConfig(progress_timeout_s=5.0))


def rooms_episode(controller: Controller, seed: int, time_factor: float = 1.0) -> str:
    """A no-plan episode in generated world `seed` of the rooms family, within `time_factor` times the time limit
    `mnemo-mpc eval` gives it (20 s + 5 s per metre of the global path the robot is not told)."""
    world = generate_world(seed, kind="rooms")
    path = plan_global_path(world.grid, world.start[:2], world.goal[:2], controller.robot)
    limit_s = time_factor * (20.0 + 5.0 * float(np.sum(np.hypot(*np.diff(path, axis=0).T))))
    return drive(controller, world.grid, world.start, world.goal, int(limit_s / controller.mpc_config.dt))[0]


def test_no_plan_rooms_episode_reaches_the_goal(rooms_controller):
    assert rooms_episode(rooms_controller, 1000) == "goal_reached"


@pytest.mark.slow
def test_no_plan_rooms_episodes_all_reach_the_goal(rooms_controller):
    """12 held-out rooms worlds with a 4 m window and no map: exploring takes longer than following a global path
    (two of them need up to 1.05x the eval's time limit), but every one is reached, none collides, none fails."""
    outcomes = [rooms_episode(rooms_controller, seed, time_factor=1.5) for seed in range(1000, 1012)]
    assert outcomes == ["goal_reached"] * 12, outcomes


# --- recoveries ------------------------------------------------------------------------------------------------------


def boxed_in() -> tuple[OccupancyGrid, list, list]:
    """A pen the robot cannot leave, 1.2 m x 1.2 m inside (x 0.7..1.9 m, y 0.4..1.6 m), the goal 2.6 m beyond its
    front wall: room to turn and back off, no way out."""
    data = walled((80, 120))
    data[4:8, 10:42] = data[32:36, 10:42] = data[4:36, 10:14] = data[4:36, 38:42] = 100
    return OccupancyGrid(data, RES), [1.1, 1.0, 0.0], [4.5, 1.0, 0.0]


@pytest.mark.parametrize("v_min", [-0.2, 0.0])
def test_boxed_in_robot_runs_the_recoveries_then_fails(v_min, caplog):
    grid, start, goal = boxed_in()
    robot = RobotModel(v_min=v_min)
    cfg = ControllerConfig(progress_timeout_s=1.0, max_recoveries=3, spin_dist_rad=1.0, recovery_time_allowance_s=3)
    controller = Controller(robot, MPCConfig(), cfg)
    with caplog.at_level(logging.INFO, logger="mnemo_mpc.nav.controller"):
        outcome, trace, _ = drive(controller, grid, start, goal, 400)
    assert outcome == "failed"
    statuses = [s for s, _, _ in trace]
    order = [s for i, s in enumerate(statuses) if s in RECOVERIES and (i == 0 or statuses[i - 1] != s)]
    if v_min < 0:
        assert order == list(RECOVERIES)
    else:  # no reverse: back off is skipped, round robin goes on
        assert order == ["recovery_rotate", "recovery_replan", "recovery_rotate"]
        assert "recovery_back_off skipped" in caplog.text
    for name in order:
        assert f"recovery {order.index(name) + 1}/3: {name}" in caplog.text
    assert "failed: no progress" in caplog.text
    # every recovery command is finite, within the velocity limits and one period's acceleration of the velocity
    dt = controller.mpc_config.dt
    for status, command, velocity in trace:
        assert np.all(np.isfinite(command))
        assert robot.v_min - 1e-9 <= command[0] <= robot.v_max + 1e-9 and abs(command[1]) <= robot.w_max + 1e-9
        assert np.all(np.abs(command - velocity) <= robot.accel_limits * dt + 1e-6), status
    if v_min < 0:
        assert any(c[0] < 0 for s, c, _ in trace if s == "recovery_back_off")
    # and it ends: further steps stay "failed", decelerating to a stop
    out = controller.step(grid.window(np.array(start[:2]), WINDOW), np.array(start), np.zeros(2), np.array(goal))
    assert out.status == "failed" and not np.any(out.command)
    # a new goal starts afresh
    out = controller.step(grid.window(np.array(start[:2]), WINDOW), np.array(start), np.zeros(2), np.array([1.5, 1, 0]))
    assert out.status != "failed"


@pytest.mark.parametrize("stall_s, within_s", [(1.0, 5.0), (20.0, None)])
def test_a_robot_standing_still_recovers_before_the_progress_checker(stall_s, within_s, caplog):
    """Boxed in, the robot drives to the front wall and stands there: with `stall_recovery_s` = 1 s the recoveries
    start within seconds, not after the progress checker's 10 s."""
    grid, start, goal = boxed_in()
    cfg = ControllerConfig(progress_timeout_s=10.0, stall_recovery_s=stall_s, recovery_time_allowance_s=3)
    controller = Controller(RobotModel(), MPCConfig(), cfg)
    steps = int(round(5.0 / controller.mpc_config.dt))
    with caplog.at_level(logging.WARNING, logger="mnemo_mpc.nav.controller"):
        _, trace, _ = drive(controller, grid, start, goal, steps)
    first = next((i for i, (status, _, _) in enumerate(trace) if status.startswith("recovery_")), None)
    if within_s is None:
        assert first is None
    else:
        assert first is not None and first * controller.mpc_config.dt <= within_s
        assert "standing still for 1.0 s: recovery not counted" in caplog.text


@pytest.mark.parametrize("wait_s, by_s", [(2.0, 5.0), (100.0, None)])
def test_a_moving_obstacle_in_view_holds_the_stall_clock_for_stall_wait_s(wait_s, by_s):
    """Boxed in, with a moving obstacle always in view (the drifting Jackal's detector firing on its own wall faces),
    the robot waits for it to pass for `stall_wait_s` of standing, then stalls as it would without one; never for
    good (dense-1034: held 8 s at a junction)."""
    grid, start, goal = boxed_in()
    cfg = ControllerConfig(progress_timeout_s=100.0, stall_recovery_s=1.0, stall_wait_s=wait_s)
    controller = Controller(RobotModel(), MPCConfig(), cfg)
    controller._moving_in_view = lambda: True
    _, trace, _ = drive(controller, grid, start, goal, int(round(7.0 / controller.mpc_config.dt)))
    first = next((i for i, (status, _, _) in enumerate(trace) if status.startswith("recovery_")), None)
    if by_s is None:
        assert first is None
    else:
        # It stood at the wall from ~1 s: waited wait_s, then stall_recovery_s
        assert first is not None and wait_s + 1.0 <= first * controller.mpc_config.dt <= by_s


def test_a_manoeuvre_driven_to_its_end_is_progress():
    """A manoeuvre that ends "done" stands on the path, aligned, further along it: the progress checker starts
    afresh there and the count of recoveries is cleared, so the next step is the MPC's -- not a back-off undoing the
    manoeuvre because the checker's old baseline ran out meanwhile (dense-1034, realistic)."""
    grid, start, goal = boxed_in()
    cfg = ControllerConfig(progress_timeout_s=2.0, stall_recovery_s=100.0)
    controller = Controller(RobotModel(v_min=-0.2), MPCConfig(), cfg)
    pose, goal = np.asarray(start, float), np.asarray(goal, float)
    window = grid.window(pose[:2], WINDOW)
    controller.step(window, pose, np.zeros(2), goal)  # the progress checker's baseline, now
    controller._checker.since_s -= 10.0  # ... made long ago: stuck at the next check
    controller._recoveries, controller._next_behaviour = 2, 2
    # A manoeuvre (started by a stall: not counted) with nothing left to drive: over, "done", at the next step
    controller._behaviour, controller._behaviour_counts = Maneuver(np.zeros((0, 4)), 0.0, 0.0, 10.0), False
    controller.step(window, pose, np.zeros(2), goal)
    out = controller.step(window, pose, np.zeros(2), goal)
    assert not out.status.startswith("recovery_"), out.status
    assert controller._recoveries == 0 and controller._next_behaviour == 0


def test_a_robot_creeping_on_the_spot_is_standing_still(caplog):
    """A robot whose MPC rests in a local minimum creeps: 1 cm/s back and forth, its measured twist jittering with
    odometry noise well above any velocity threshold. Where it stands counts, not its twist: the recoveries start
    after `stall_recovery_s`, not after the progress checker's 10 s (dense-1062, the Jackal realistic: 9 s of
    creeping)."""
    grid, start, goal = boxed_in()
    cfg = ControllerConfig(progress_timeout_s=10.0, stall_recovery_s=1.0, recovery_time_allowance_s=3)
    controller = Controller(RobotModel(), MPCConfig(), cfg)
    dt = controller.mpc_config.dt
    statuses = []
    with caplog.at_level(logging.WARNING, logger="mnemo_mpc.nav.controller"):
        for k in range(int(round(3.0 / dt))):
            sway = 0.02 * np.sin(2 * np.pi * k * dt / 4.0)  # +-2 cm along x, +-0.1 rad: creeping, not going
            pose = np.array([start[0] + sway, start[1], 0.1 * np.sin(k)])
            velocity = np.array([0.03 * (-1) ** k, 0.2 * (-1) ** (k // 2)])  # jitter above |v| 0.02, |w| 0.05
            out = controller.step(grid.window(pose[:2], WINDOW), pose, velocity, np.asarray(goal, float))
            statuses.append(out.status)
    first = next((i for i, s in enumerate(statuses) if s.startswith("recovery_")), None)
    assert first is not None and first * dt <= 1.5, statuses[:: int(0.5 / dt)]
    assert "standing still for 1.0 s" in caplog.text


def test_stall_recoveries_leave_the_failure_to_the_progress_checker(caplog):
    """Boxed in, the robot stands still every second: those recoveries run but do not count, so "failed" comes from
    the progress checker, after max_recoveries x progress_timeout_s at the earliest -- not after a few stalls (the
    Jackal mapless gave up in a corridor after six stalls in ~20 s, corridor-1043)."""
    grid, start, goal = boxed_in()
    cfg = ControllerConfig(
        progress_timeout_s=5.0, stall_recovery_s=1.0, max_recoveries=2, spin_dist_rad=1.0, recovery_time_allowance_s=2
    )
    controller = Controller(RobotModel(v_min=-0.2), MPCConfig(), cfg)
    dt = controller.mpc_config.dt
    with caplog.at_level(logging.WARNING, logger="mnemo_mpc.nav.controller"):
        outcome, trace, _ = drive(controller, grid, start, goal, int(round(40.0 / dt)))
    assert outcome == "failed"
    assert len(trace) * dt >= cfg.max_recoveries * cfg.progress_timeout_s
    assert "recovery not counted" in caplog.text and "recovery 2/2" in caplog.text


def test_a_far_goal_moved_by_localiser_corrections_is_the_same_goal():
    """A map-frame goal re-expressed in odom after each localiser correction turns about the robot by the heading
    correction: 10 m away, 0.03 rad moves it 0.3 m, beyond the goal tolerance. It is still the same goal: the
    progress checker keeps its clock and the boxed-in robot's recoveries start (they never did while each correction
    restarted them, the Jackal profile's dense worlds)."""
    grid, start, _ = boxed_in()
    cfg = ControllerConfig(progress_timeout_s=1.0, max_recoveries=3, spin_dist_rad=1.0, recovery_time_allowance_s=3)
    controller = Controller(RobotModel(), MPCConfig(), cfg)
    pose = np.asarray(start, float)
    statuses = []
    for k in range(100):
        turn = 0.03 * (-1) ** (k // 10)  # a correction every 10 steps (0.5 s), alternating in sign
        goal = pose + np.array([10.0 * np.cos(turn), 10.0 * np.sin(turn), turn])
        statuses.append(controller.step(grid.window(pose[:2], WINDOW), pose, np.zeros(2), goal).status)
    assert any(s.startswith("recovery_") for s in statuses)
    assert controller._checker.baseline is not None
    # a goal moved farther than the corrections do is a new goal
    from mnemo_mpc.nav.controller import same_goal

    robot = np.zeros(3)
    assert same_goal(np.array([10.3, 0.0, 0.0]), np.array([10.0, 0.0, 0.0]), 0.2, robot)
    assert not same_goal(np.array([10.3, 0.0, 0.0]), np.array([10.0, 0.0, 0.0]), 0.2)  # no robot: no allowance
    assert not same_goal(np.array([11.5, 0.0, 0.0]), np.array([10.0, 0.0, 0.0]), 0.2, robot)
    assert not same_goal(np.array([0.5, 0.0, 0.0]), np.array([0.2, 0.0, 0.0]), 0.2, robot)


# --- the previous-plan fallback checks the footprint ------------------------------------------------------------------


def test_fallback_reuses_a_plan_the_footprint_fits_but_the_circumscribed_circle_does_not():
    """A 0.6 m x 0.3 m robot (circumscribed radius 0.335 m) driving along a 0.56 m wide corridor: its discs keep the
    margin, its circumscribed circle would not; a plan turning into the wall is refused."""
    robot = RobotModel.from_footprint(Footprint.rectangle(0.6, 0.3), safety_margin=0.05)
    controller = Controller(robot, MPCConfig(), ControllerConfig())
    data = np.zeros(WINDOW, np.int8)
    data[:29, :] = data[51:, :] = 100  # free rows 29..50: y 1.45..2.55 m ... narrowed below
    data[29:34, :] = data[46:51, :] = 100  # free y 1.7..2.3 m: 0.6 m minus the boundary half-cells
    field_ = DistanceField(OccupancyGrid(data, RES))
    pose = np.array([1.0, 2.0, 0.0])
    assert field_.distance(pose[:2]) < robot.clearance  # the circle check would refuse any plan here
    n = controller.mpc_config.N
    straight = np.tile([0.3, 0.0], (n, 1))
    controller._last_plan, controller._plan_age = SimpleNamespace(controls=straight), 0
    command, status = controller._fallback(field_, pose, np.array([0.3, 0.0]))
    assert status == "fallback_previous_plan" and np.allclose(command, [0.3, 0.0])
    turning = np.tile([0.3, 0.8], (n, 1))
    controller._last_plan, controller._plan_age = SimpleNamespace(controls=turning), 0
    command, status = controller._fallback(field_, pose, np.array([0.3, 0.0]))
    assert status == "fallback_stop"


@pytest.mark.parametrize("distance_m", [1e3, 2e4, 1e5, 9e5])
def test_a_far_goal_costs_what_a_near_one_does(distance_m):
    """Issue 26 item 1: a goal between 1e3 and 1e6 m away (inside the input bound) with a wall in the way made the own
    path's memory grid and its straight-line check grow with the distance (20 km: 1-6 s and ~1.1 GB a tick; 1.4e6 m:
    a 68 GiB request). Both are now confined to the memory: the tick's allocations stay small and the own path
    heads for the goal from at most half the memory's side away."""
    import tracemalloc

    data = np.zeros((120, 120), np.int8)
    data[40:80, 70:74] = 100  # a wall across the line to the goal
    grid = OccupancyGrid(data, 0.05, (-3.0, -3.0, 0.0))
    ctrl = Controller(RobotModel(), MPCConfig(fallback=None), ControllerConfig(rotation_shim=None))
    goal = np.array([distance_m, 0.0, 0.0])
    ctrl.step(grid, np.zeros(3), np.zeros(2), goal)  # the memory learns the wall
    tracemalloc.start()
    out = ctrl.step(grid, np.zeros(3), np.zeros(2), goal)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert out.status in ("planned", "rotating_to_path", "fallback_stop", "fallback_previous_plan")
    assert peak < 64 << 20, peak
    path = ctrl.own_path
    assert path is not None and np.hypot(*path[-1]) <= 0.5 * ctrl.config.seen_map_max_m + 1.0


def test_own_path_down_a_passage_the_planner_allowed_is_not_blocked():
    """A Jackal's own path down a 0.6 m lane runs 0.3 m from both walls: less than its circumscribed radius (0.333 m)
    but more than half its width, which is what the planner inflates by. It is kept, not re-planned at every step;
    a wall across the lane still blocks it."""
    from mnemo_mpc.nav.own_path import OwnPath
    from mnemo_mpc.profile import NavParams, build

    robot = build(NavParams.from_yaml("config/robots/jackal.yaml")).robot
    data = np.full((40, 120), 100, np.int8)
    data[14:26, 2:118] = 0  # y 0.70-1.30: 0.6 m wide
    grid = OccupancyGrid(data, RES)
    own = OwnPath(robot, "free", replan_period_s=10.0, max_size_m=40.0)
    own.seen.update(grid)
    assert own.plan(np.array([0.5, 1.0, 0.0]), np.array([5.5, 1.0, 0.0]), 0.3, 0.0) and own.path is not None
    assert robot.radius > 0.3
    assert own.needs_replan(grid, 0.0, 1.0) is None
    data[:, 60:62] = 100
    assert own.needs_replan(OccupancyGrid(data, RES), 0.0, 1.0) == "blocked"


def test_a_clear_own_path_is_kept_unless_a_re_plan_is_clearly_shorter():
    """Periodic re-plans keep a path that is still clear unless the new one is SWITCH_GAIN shorter than its rest; a
    blocked path is replaced whatever the new one's length."""
    from mnemo_mpc.nav.own_path import SWITCH_GAIN, OwnPath, remaining_length

    grid = OccupancyGrid(walled((60, 120)), RES)  # 6 m x 3 m, empty
    start, goal = np.array([0.5, 1.5, 0.0]), np.array([5.5, 1.5, 0.0])

    def detour(height: float) -> np.ndarray:  # start -> (3, 1.5 + height) -> goal
        return np.array([[0.5, 1.5], [3.0, 1.5 + height], [5.5, 1.5]])

    own = OwnPath(RobotModel(), "free", replan_period_s=1.0, max_size_m=40.0)
    own.seen.update(grid)
    for height, reason, replaced in ((0.5, "period", False), (1.5, "period", True), (0.5, "blocked", True)):
        own.path = kept = detour(height)
        gain = 1.0 - 5.0 / remaining_length(kept, start)  # what the straight path saves
        assert (gain > SWITCH_GAIN) == (height > 1.0)
        assert own.plan(start, goal, 0.3, 0.0, reason) is replaced
        assert (own.path is kept) is not replaced
        if replaced:
            assert remaining_length(own.path, start) < 5.2


def test_own_path_in_the_worker_never_blocks_the_step_and_is_adopted_when_done():
    from mnemo_mpc.nav.own_path import OwnPath

    grid, start, goal = door_far_away()
    own = OwnPath(RobotModel(), "free", replan_period_s=1.0, max_size_m=40.0, background=True)
    own.seen.update(grid)
    own.plan(np.asarray(start), np.asarray(goal), 0.3, 0.0)  # warm: the worker's first start
    deadline = time.monotonic() + 60.0
    while not own.poll():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert own.path is not None and own.needs_replan(grid, 0.0, 0.5) is None
    kept = own.path
    assert own.plan(np.asarray(start), np.asarray(goal), 0.3, 1.0, "period") is False and own.path is kept
    assert own.pending and own.needs_replan(grid, 0.0, 5.0) is None  # one plan at a time
    while not own.pending or not own._pending.done():  # the periodic re-plan finds the same path: kept
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert own.poll() is False and own.path is kept
    own.plan(np.asarray(start), np.asarray(goal), 0.3, 2.0, "period")
    own.clear_path()  # the running plan was asked for the old situation: dropped
    assert not own.pending and own.path is None and not own.poll()


def _own_path_in_a_daemon(queue) -> None:
    from mnemo_mpc.nav.own_path import OwnPath

    own = OwnPath(RobotModel(), "free", replan_period_s=1.0, max_size_m=40.0, background=True)
    queue.put(own.background)


def test_own_path_in_a_daemonic_process_plans_on_the_step():
    """A multiprocessing.Pool worker (daemonic) may not start the planning worker: the controller plans on the step
    instead of failing to build (a user's pool of evaluations)."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_own_path_in_a_daemon, args=(queue,), daemon=True)
    proc.start()
    proc.join(timeout=60.0)
    assert proc.exitcode == 0  # built: no AssertionError escaped
    assert queue.get(timeout=5.0) is False  # and plans on the step


def test_the_re_plan_recovery_brakes_for_its_step_instead_of_solving(monkeypatch):
    """The step that starts the re-plan recovery has paid for the recoveries tried before it; it brakes and the next
    step plans afresh (a cold solve and its fallback on top took the Jackal's mapless steps past its period)."""
    from mnemo_mpc.planning.mpc import SQPMPC

    grid, start, goal = boxed_in()
    cfg = ControllerConfig(progress_timeout_s=1.0, max_recoveries=3, spin_dist_rad=1.0, recovery_time_allowance_s=3)
    controller = Controller(RobotModel(v_min=0.0), MPCConfig(), cfg)
    solves = []
    solve = SQPMPC.solve

    def counted(self, *args, **kwargs):
        solves.append(1)
        return solve(self, *args, **kwargs)

    monkeypatch.setattr(SQPMPC, "solve", counted)
    pose, vel = np.asarray(start, float), np.zeros(2)
    seen = False
    for _ in range(400):
        before = len(solves)
        out = controller.step(grid.window(pose[:2], WINDOW), pose, vel, np.asarray(goal, float))
        if out.status == "recovery_replan":
            seen = True
            assert len(solves) == before and out.plan is None
            assert np.all(np.abs(out.command) <= np.abs(vel) + 1e-9)
        if out.status == "failed":
            break
        pose, vel = controller.robot.step(pose, out.command, controller.mpc_config.dt), out.command
    assert seen


def test_the_own_path_takes_a_lane_the_whole_cells_read_a_cell_narrower():
    """A lane 0.50 m wide on the memory's whole cells (a 0.55 m lane read from a drifting frame: each wall face at
    the near face of its cell) leaves a Jackal's centre 0.225 m: under half its width plus the safety margin, over
    half its width. The own path takes it (a cell off the margin, `own_path._plan`); a planner asking the full margin
    finds no path."""
    from mnemo_mpc.nav.own_path import _plan
    from mnemo_mpc.profile import NavParams, build

    robot = build(NavParams.from_yaml("config/robots/jackal.yaml")).robot
    data = np.full((40, 120), 100, np.int8)
    data[15:25, 2:118] = 0  # y 0.75-1.25: 10 cells
    grid = OccupancyGrid(data, RES)
    start, goal = np.array([0.5, 1.0]), np.array([5.5, 1.0])
    with pytest.raises(InfeasibleProblemError, match="no collision-free path"):
        plan_global_path(grid, start, goal, robot, unknown_policy="free")
    path, message, _ = _plan(grid, start, goal, robot, "free")
    assert path is not None, message
    assert np.all(np.abs(path[:, 1] - 1.0) < 0.03)


def ring() -> OccupancyGrid:
    """A 0.6 m lane round a block: centre line the rectangle x 0.35-3.15, y 0.35-2.15 (9.2 m round)."""
    data = walled((50, 70))
    data[13:37, 13:57] = 100
    return OccupancyGrid(data, RES)


@pytest.mark.parametrize("cost, forward", [(0.0, False), (5.0, True)])
def test_a_path_leaving_the_robot_backwards_costs_what_turning_back_does(cost, forward):
    """Facing +x near the lane's east end, the goal up the west lane: 3.2 m back the way the robot came, 6.0 m on
    round the block. Without a cost for turning back the path goes back; at 5 m it goes on (plan_global_path's
    start_yaw)."""
    start, goal = np.array([2.9, 0.35]), np.array([0.35, 1.0])
    path = plan_global_path(ring(), start, goal, RobotModel(), start_yaw=0.0, turn_back_cost_m=cost)
    assert heads_on(path, start) == forward


def heads_on(path: np.ndarray, start: np.ndarray) -> bool:
    """Whether `path` leaves `start` towards +x (its point 0.2 m along)."""
    return bool(path[np.searchsorted(np.cumsum(np.hypot(*np.diff(path, axis=0).T)), 0.2) + 1, 0] > start[0])


@pytest.mark.parametrize("turns_in_place", [True, False])
def test_the_own_path_goes_on_where_the_robot_cannot_turn_back(turns_in_place):
    """The ring above, planned by `OwnPath.plan` (TURN_BACK_COST_M, 3 m): back the way the robot came where it turns in
    place, on round the block where it does not."""
    from mnemo_mpc.nav.own_path import TURN_BACK_COST_M, OwnPath

    assert TURN_BACK_COST_M > 6.0 - 3.2
    own = OwnPath(RobotModel(), "free", replan_period_s=10.0, max_size_m=40.0)
    own.seen.update(ring())
    start = np.array([2.9, 0.35, 0.0])
    assert own.plan(start, np.array([0.35, 1.0, 0.0]), 0.3, 0.0, turns_in_place=turns_in_place)
    assert heads_on(own.path, start) != turns_in_place


def test_the_own_path_costs_turning_back_only_where_the_robot_cannot_turn_in_place(monkeypatch):
    """The controller asks `OwnPath.plan` to cost a path leaving backwards (turns_in_place False) in a lane a Jackal
    cannot turn round in, and not in the open."""
    from mnemo_mpc.nav.own_path import OwnPath
    from mnemo_mpc.profile import NavParams, build

    asked = []

    def plan(self, pose, goal, clearance, now, reason="no path", turns_in_place=True):
        asked.append(turns_in_place)
        return False

    monkeypatch.setattr(OwnPath, "plan", plan)
    profile = build(NavParams.from_yaml("config/robots/jackal.yaml"))
    for lane, expected in ((True, False), (False, True)):
        ctrl = profile.controller(None, None, "mpc", plan_own_path_async=False)
        data = walled((80, 80))
        if lane:
            data[1:79, 1:79] = 100
            data[34:46, 1:79] = 0  # y 1.7-2.3: 0.6 m wide
        data[30:50, 60:62] = 100  # a wall across the way to the goal, seen
        grid = OccupancyGrid(data, RES)
        asked.clear()
        ctrl.step(grid, np.array([2.0, 2.0, 0.0]), np.zeros(2), np.array([3.6, 2.0, 0.0]))
        assert asked == [expected]


def test_a_back_off_may_retrace_the_way_the_robot_came_at_the_margin_it_kept_there():
    """A Jackal stands where a lane is 0.60 m wide (8.5 cm a side), having come along it where it is 0.55 m (3.5 cm on
    one side). Backing off into the narrow part gets closer than it is, which a back-off may not (`required_margin`)
    -- unless it retraces poses it stood at (`recovery.Trail`): then it keeps what it kept there. Poses it did not
    stand at, or a lane now narrower than TRAIL_FLOOR_M a side, still refuse it."""
    from mnemo_mpc.nav import recovery
    from mnemo_mpc.profile import NavParams, build

    profile = build(NavParams.from_yaml("config/robots/jackal.yaml"))
    mpc = profile.controller(None, None, "mpc").mpc(WINDOW)
    data = np.full(WINDOW, 100, np.int8)
    data[15:26, 2:40] = 0  # x 0.1-2.0: y 0.75-1.30
    data[14:26, 40:78] = 0  # x 2.0-3.9: y 0.70-1.30
    field = DistanceField(OccupancyGrid(data, RES)).cells_only
    pose = np.array([2.5, 1.0, 0.0])

    def trail_along(y: float) -> recovery.Trail:  # driven east along y up to the pose
        trail = recovery.Trail()
        for x in np.arange(1.0, 2.51, 0.01):
            trail.add(np.array([x, y, 0.0]))
        return trail

    came = trail_along(1.0)
    assert not recovery.reverse_free(mpc, field, pose, 0.3)
    assert recovery.reverse_free(mpc, field, pose, 0.3, came)
    assert not recovery.reverse_free(mpc, field, pose, 0.3, trail_along(1.05))
    data[16, 2:40] = 100  # the narrow part now 0.50 m: 0.5 cm a side at y = 1.0
    assert not recovery.reverse_free(mpc, DistanceField(OccupancyGrid(data, RES)).cells_only, pose, 0.3, came)
    # A back-off goes as far as is free of its distances, in order: a wall across the lane 0.2 m behind the body
    data[14:26, 40] = 100  # x 2.00-2.05; the rear is at 2.246
    walled_in = DistanceField(OccupancyGrid(data, RES)).cells_only
    assert recovery.reverse_reach(mpc, walled_in, pose, (0.3, 0.2, 0.1)) == 0.1
    assert recovery.reverse_reach(mpc, walled_in, pose, (0.3, 0.2)) == 0.0
