"""Goal and progress checkers, as Nav2 names them (issue 29), and the in-place alignment that ends at the goal's yaw.

`GoalChecker` is Nav2's SimpleGoalChecker (nav2_controller/plugins/simple_goal_checker.cpp): the goal is reached when
the robot is within `xy_goal_tolerance` of the goal's position and `yaw_goal_tolerance` of its yaw. Stateful (Nav2's
`stateful`, default true), once the position has been within tolerance it counts as reached until `reset()` (a new
goal), so that the robot does not chase the position again while it turns in place: the MPC's terminal heading cost
only shapes the approach, and the last part of a heading is a turn in place (`align_in_place`). The check names the
phase a controller is in — "approach" (drive to the position), "align" (turn in place to the yaw), "reached" — and
both errors, so that the node can say how far off it stopped.

`ProgressChecker` is Nav2's SimpleProgressChecker (`required_movement_radius`, `movement_time_allowance`), the one the
controller's recoveries already run (`mnemo_mpc.nav.recovery.ProgressChecker`, one implementation).

`align_in_place` is the rotation shim's law (`mnemo_mpc.nav.rotation_shim.rotate_to_heading`), aimed at the goal's yaw
itself and limited per control period: v = 0, and a yaw rate within w_max and alpha_max * dt of the current one that
brakes to rest at the yaw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.nav.recovery import ProgressChecker, wrap_angle
from mnemo_mpc.nav.rotation_shim import MIN_SPEED, rotate_to_heading

__all__ = ["APPROACH", "ALIGN", "REACHED", "GoalCheck", "GoalChecker", "ProgressChecker", "align_in_place"]

APPROACH, ALIGN, REACHED = "approach", "align", "reached"


@dataclass(frozen=True)
class GoalCheck:
    """One goal check: the phase, both errors and the tolerances they are held to."""

    phase: str  # APPROACH | ALIGN | REACHED
    xy_error_m: float  # distance from the robot to the goal's position
    yaw_error_rad: float  # goal yaw - robot yaw, wrapped to [-pi, pi): the signed turn left to do
    xy_goal_tolerance: float
    yaw_goal_tolerance: float

    @property
    def reached(self) -> bool:
        return self.phase == REACHED

    def describe(self) -> str:
        """One line for a log or a diagnostic: 'align: xy error 0.12 m (tolerance 0.25), yaw error 0.38 rad (...)'."""
        return (
            f"{self.phase}: xy error {self.xy_error_m:.3f} m (tolerance {self.xy_goal_tolerance:g}), "
            f"yaw error {self.yaw_error_rad:+.3f} rad (tolerance {self.yaw_goal_tolerance:g})"
        )


def _pose(value: object, what: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float).reshape(-1)
    if arr.shape[0] < 3 or not np.all(np.isfinite(arr[:3])):
        raise InputError(f"GoalChecker: {what} expected a finite (x, y, yaw), got {np.asarray(value).tolist()!r}")
    return arr[:3]


class GoalChecker:
    """Nav2's SimpleGoalChecker (module docstring). A `yaw_goal_tolerance` of pi or more ignores the heading (what the
    controller's `goal_tolerance_m` alone did).

    The latch is cleared by `reset()` only, not by a goal that differs from the last one: a goal transformed from the
    map frame into odom moves a little every time the localiser corrects map -> odom, and must not undo the latch.
    """

    def __init__(self, xy_goal_tolerance: float = 0.25, yaw_goal_tolerance: float = 0.25, stateful: bool = True):
        for name, value in (("xy_goal_tolerance", xy_goal_tolerance), ("yaw_goal_tolerance", yaw_goal_tolerance)):
            if not (is_real(value) and value > 0):
                raise InputError(f"GoalChecker.{name}: expected a finite number > 0, got {value!r}")
        if not isinstance(stateful, bool):
            raise InputError(f"GoalChecker.stateful: expected True or False, got {stateful!r}")
        self.xy_goal_tolerance = float(xy_goal_tolerance)
        self.yaw_goal_tolerance = float(yaw_goal_tolerance)
        self.stateful = stateful
        self.xy_reached = False  # the latch: the position was within tolerance since the last reset (stateful only)

    def reset(self) -> None:
        """A new goal: the position must be reached again."""
        self.xy_reached = False

    def check(self, pose: np.ndarray, goal: np.ndarray) -> GoalCheck:
        """The phase at `pose` for `goal` (both (x, y, yaw) in the same frame) and both errors; sets the latch."""
        pose, goal = _pose(pose, "pose"), _pose(goal, "goal")
        xy_error = float(math.hypot(goal[0] - pose[0], goal[1] - pose[1]))
        yaw_error = float(wrap_angle(goal[2] - pose[2]))
        xy_ok = self.xy_reached or xy_error <= self.xy_goal_tolerance
        if xy_ok and self.stateful:
            self.xy_reached = True
        if not xy_ok:
            phase = APPROACH
        elif abs(yaw_error) <= self.yaw_goal_tolerance:
            phase = REACHED
        else:
            phase = ALIGN
        return GoalCheck(phase, xy_error, yaw_error, self.xy_goal_tolerance, self.yaw_goal_tolerance)

    def phase(self, pose: np.ndarray, goal: np.ndarray) -> str:
        return self.check(pose, goal).phase

    def is_goal_reached(self, pose: np.ndarray, goal: np.ndarray) -> bool:
        """Nav2's isGoalReached."""
        return self.check(pose, goal).reached


def align_in_place(
    yaw_error: float, current_w: float, dt: float, w_max: float, alpha_max: float, rotate_speed: float | None = None
) -> np.ndarray:
    """The target (v, w) of the final in-place turn by `yaw_error` (goal yaw - robot yaw, rad): v = 0 (the checked
    command path ramps a moving robot's v down within a_max), w from the rotation shim's braking law aimed at the yaw
    itself (`rotate_to_heading` with stop_within = 0), at most `rotate_speed` (default w_max) and w_max, capped at the
    rest of the turn in one period `dt`, and within alpha_max * dt of `current_w`. Its slowest rate is the shim's
    MIN_SPEED or alpha_max * dt if smaller, so that it can always stop within one period at the yaw.

    Braking at 80 % of alpha_max, a robot told to stop at any moment (the goal checker says "reached" within the yaw
    tolerance) comes to rest before the goal's yaw: it turns at most 0.8 of the error left at full alpha_max."""
    for name, value in (("dt", dt), ("w_max", w_max), ("alpha_max", alpha_max)):
        if not (is_real(value) and value > 0):
            raise InputError(f"align_in_place: {name} expected a finite number > 0, got {value!r}")
    if not (is_real(yaw_error) and is_real(current_w)):
        raise InputError(f"align_in_place: expected finite yaw_error and current_w, got {yaw_error!r}, {current_w!r}")
    max_rate = w_max if rotate_speed is None else min(float(rotate_speed), w_max)
    w = rotate_to_heading(
        float(wrap_angle(yaw_error)),
        max_rate=max_rate,
        alpha_max=alpha_max,
        min_rate=min(MIN_SPEED, alpha_max * dt),
        current_w=float(current_w),
        dt=dt,
    )
    return np.array([0.0, w])
