"""Nav2-style goal and progress checkers and the final in-place alignment (mnemo_mpc.nav.goal_checker, issue 29): the
stateful latch, the yaw wrap at +-pi, the progress checker timing out and resetting, and the alignment law within its
limits reaching the yaw without overshoot on a simulated unicycle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav import rotation_shim
from mnemo_mpc.nav.goal_checker import ALIGN, APPROACH, REACHED, GoalChecker, ProgressChecker, align_in_place
from mnemo_mpc.nav.recovery import ProgressChecker as ControllersProgressChecker
from mnemo_mpc.planning.robot import RobotModel

GOAL = np.array([2.0, 1.0, 0.5])
UNICYCLE = RobotModel()  # its step is the MPC's discrete unicycle


def at(dx: float, dyaw: float) -> np.ndarray:
    """A pose `dx` m beside the goal's position and `dyaw` rad off its yaw."""
    return np.array([GOAL[0] + dx, GOAL[1], GOAL[2] + dyaw])


# --- goal checker ---------------------------------------------------------------------------------------------------
def test_stateful_checker_keeps_the_position_reached_while_it_aligns():
    checker = GoalChecker(xy_goal_tolerance=0.25, yaw_goal_tolerance=0.2, stateful=True)
    assert checker.phase(at(1.0, 1.0), GOAL) == APPROACH
    result = checker.check(at(0.1, 1.0), GOAL)
    assert (
        result.phase == ALIGN and result.xy_error_m == pytest.approx(0.1) and result.yaw_error_rad == pytest.approx(-1)
    )
    # Turning in place, the robot drifts out of the xy tolerance: still aligning, not approaching again.
    assert checker.phase(at(0.4, 0.5), GOAL) == ALIGN
    result = checker.check(at(0.4, 0.1), GOAL)
    assert result.reached and result.phase == REACHED and result.xy_error_m == pytest.approx(0.4)
    # a new goal: the position must be reached again
    checker.reset()
    assert checker.phase(at(0.4, 0.1), GOAL) == APPROACH


def test_stateless_checker_needs_both_tolerances_at_once():
    checker = GoalChecker(xy_goal_tolerance=0.25, yaw_goal_tolerance=0.2, stateful=False)
    assert checker.phase(at(0.1, 1.0), GOAL) == ALIGN
    assert checker.phase(at(0.4, 0.5), GOAL) == APPROACH
    assert not checker.is_goal_reached(at(0.4, 0.1), GOAL)
    assert checker.is_goal_reached(at(0.2, 0.1), GOAL)
    assert checker.is_goal_reached(at(0.25, 0.1), GOAL)  # the tolerance is inclusive, as Nav2's


def test_the_latch_survives_a_goal_that_moves_with_map_to_odom():
    checker = GoalChecker(0.25, 0.2)
    assert checker.phase(at(0.2, 1.0), GOAL) == ALIGN
    moved = GOAL - np.array([0.1, 0.0, 0.0])  # the same goal after a localiser correction, now 0.3 m away
    assert checker.phase(at(0.2, 1.0), moved) == ALIGN


def test_yaw_error_wraps_at_plus_minus_pi():
    checker = GoalChecker(0.25, 0.15)
    goal = np.array([0.0, 0.0, math.pi - 0.05])
    result = checker.check(np.array([0.0, 0.0, -math.pi + 0.05]), goal)
    assert result.yaw_error_rad == pytest.approx(-0.1) and result.reached  # 0.1 rad clockwise, not 6.18 rad
    result = checker.check(np.array([0.0, 0.0, -math.pi + 0.3]), goal)
    assert result.phase == ALIGN and result.yaw_error_rad == pytest.approx(-0.35)
    assert checker.check(np.array([0.0, 0.0, math.pi]), np.array([0.0, 0.0, -math.pi])).yaw_error_rad == 0.0
    # a heading tolerance of pi or more ignores the heading: the old position-only check
    assert GoalChecker(0.25, math.pi).is_goal_reached(np.array([0.0, 0.0, 0.0]), np.array([0.1, 0.0, math.pi]))


def test_the_result_reports_both_errors_and_tolerances():
    line = GoalChecker(0.25, 0.2).check(at(0.23, -0.38), GOAL).describe()
    assert line == "align: xy error 0.230 m (tolerance 0.25), yaw error +0.380 rad (tolerance 0.2)"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"xy_goal_tolerance": 0.0}, "GoalChecker.xy_goal_tolerance"),
        ({"yaw_goal_tolerance": float("nan")}, "GoalChecker.yaw_goal_tolerance"),
        ({"stateful": 1}, "GoalChecker.stateful"),
    ],
)
def test_goal_checker_settings_are_validated(kwargs, match):
    with pytest.raises(InputError, match=match):
        GoalChecker(**kwargs)


def test_goal_checker_refuses_a_non_finite_pose():
    with pytest.raises(InputError, match="pose expected a finite"):
        GoalChecker().check(np.array([0.0, float("nan"), 0.0]), GOAL)
    with pytest.raises(InputError, match="goal expected a finite"):
        GoalChecker().check(GOAL, np.array([0.0, 0.0]))


# --- progress checker -----------------------------------------------------------------------------------------------
def test_progress_checker_times_out_and_resets():
    assert ProgressChecker is ControllersProgressChecker  # one implementation, the one the recoveries run
    checker = ProgressChecker(required_movement_radius=0.5, movement_time_allowance=10.0)
    assert checker.check(np.zeros(3), 0.0)  # the first check sets the baseline
    assert checker.check(np.array([0.49, 0.0, 1.0]), 9.9)  # within the radius, within the allowance
    assert not checker.check(np.array([0.49, 0.0, 1.0]), 10.0)  # stuck
    assert checker.check(np.array([0.0, 0.5, 0.0]), 10.5)  # moved 0.5 m from the baseline: a new baseline
    assert checker.check(np.array([0.0, 0.9, 0.0]), 20.4)  # 0.4 m from the new one, 9.9 s after it
    assert not checker.check(np.array([0.0, 0.9, 0.0]), 20.5)
    checker.reset()  # a new goal: the allowance starts again from the next check
    assert checker.check(np.array([0.0, 0.9, 0.0]), 21.0)
    assert checker.check(np.array([0.0, 0.9, 0.0]), 30.9)
    assert not checker.check(np.array([0.0, 0.9, 0.0]), 31.0)


@pytest.mark.parametrize("kwargs", [{"required_movement_radius": 0.0}, {"movement_time_allowance": float("inf")}])
def test_progress_checker_settings_are_validated(kwargs):
    with pytest.raises(InputError, match=f"ProgressChecker.{next(iter(kwargs))}"):
        ProgressChecker(**kwargs)


# --- the final in-place alignment -----------------------------------------------------------------------------------
def turn(e0: float, w_max: float, alpha_max: float, dt: float, w0: float = 0.0, steps: int = 2000):
    """Drive a unicycle (x, y, yaw) with align_in_place towards yaw e0 from yaw 0 (turning at w0) until at rest on
    it: (yaws, rates) of every period; the position never moves."""
    pose, w = np.array([1.0, -2.0, 0.0]), w0
    yaws, rates = [0.0], [w0]
    for _ in range(steps):
        v, w = align_in_place(e0 - pose[2], w, dt, w_max, alpha_max)
        assert v == 0.0
        pose = UNICYCLE.step(pose, np.array([v, w]), dt)
        assert pose[0] == 1.0 and pose[1] == -2.0
        yaws.append(pose[2])
        rates.append(w)
        if w == 0.0 and abs(math.remainder(e0 - pose[2], 2 * math.pi)) < 1e-12:
            break
    return np.array(yaws), np.array(rates)


LIMITS = [(w_max, alpha_max, dt) for w_max in (0.5, 1.8, 3.0) for alpha_max in (0.5, 3.2, 8.0) for dt in (0.05, 0.1)]


@pytest.mark.parametrize("w_max, alpha_max, dt", LIMITS)
def test_alignment_stays_within_its_limits_and_stops_on_the_yaw_without_overshoot(w_max, alpha_max, dt):
    for e0 in (-3.0, -1.0, -0.2, -0.01, 0.003, 0.05, 0.4, 2.5, math.pi - 1e-3):
        yaws, rates = turn(e0, w_max, alpha_max, dt)
        assert rates[-1] == 0.0 and yaws[-1] == pytest.approx(e0, abs=1e-12)  # at rest on the yaw
        assert np.all(np.abs(rates) <= w_max + 1e-12)
        assert np.all(np.abs(np.diff(rates)) <= alpha_max * dt + 1e-9)
        assert np.all(np.sign(e0) * (e0 - yaws) >= -1e-12)  # never past the goal's yaw
        assert np.all(np.sign(e0) * rates >= 0.0)  # towards it throughout
        assert len(rates) < 2000


def test_alignment_from_a_turning_robot_keeps_the_limits():
    rng = np.random.default_rng(7)
    for _ in range(200):
        w_max, alpha_max, dt = rng.uniform(0.3, 3.0), rng.uniform(0.3, 8.0), float(rng.choice([0.05, 0.1, 0.2]))
        e0, w0 = rng.uniform(-math.pi, math.pi), rng.uniform(-w_max, w_max)
        yaws, rates = turn(e0, w_max, alpha_max, dt, w0=w0, steps=4000)
        assert abs(math.remainder(e0 - yaws[-1], 2 * math.pi)) < 1e-9 and rates[-1] == 0.0
        assert np.all(np.abs(rates) <= w_max + 1e-12)
        assert np.all(np.abs(np.diff(rates)) <= alpha_max * dt + 1e-9)


def test_stopping_when_the_checker_says_reached_ends_short_of_the_yaw():
    # The loop a controller runs: align until the goal checker says "reached", then brake at alpha_max.
    w_max, alpha_max, dt = 2.0, 4.0, 0.05
    checker = GoalChecker(0.25, 0.25)
    goal = np.array([0.0, 0.0, 2.0])
    pose, w = np.array([0.1, 0.0, 0.0]), 0.0
    phases = []
    while (result := checker.check(pose, goal)).phase != REACHED:
        phases.append(result.phase)
        w = align_in_place(result.yaw_error_rad, w, dt, w_max, alpha_max)[1]
        pose = pose + np.array([0.0, 0.0, w * dt])
    assert set(phases) == {ALIGN} and w > 0.5  # still turning fast when within the tolerance
    while w > 0.0:
        w = max(w - alpha_max * dt, 0.0)
        pose = pose + np.array([0.0, 0.0, w * dt])
    assert 0.0 <= goal[2] - pose[2] <= 0.25


def test_the_shims_law_is_unchanged_without_a_period():
    # rotate_to_heading without dt is the rotation shim's law as it was written in the shim.
    rng = np.random.default_rng(0)
    for _ in range(500):
        error, handover = rng.uniform(-math.pi, math.pi), rng.uniform(0.01, 0.5)
        rotate_speed, w_max, alpha_max = rng.uniform(0.2, 3.0), rng.uniform(0.2, 3.0), rng.uniform(0.2, 8.0)
        left = abs(error) - handover
        want = min(rotate_speed, w_max, max(math.sqrt(1.6 * alpha_max * max(left, 0.0)), rotation_shim.MIN_SPEED))
        got = rotation_shim.rotate_to_heading(
            error, max_rate=min(rotate_speed, w_max), alpha_max=alpha_max, stop_within=handover
        )
        assert got == math.copysign(want, error)


def test_alignment_refuses_bad_arguments():
    with pytest.raises(InputError, match="dt"):
        align_in_place(0.5, 0.0, 0.0, 1.0, 1.0)
    with pytest.raises(InputError, match="finite yaw_error"):
        align_in_place(float("nan"), 0.0, 0.1, 1.0, 1.0)
