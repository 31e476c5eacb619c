"""Getting unstuck (issue 10 item 4): a progress checker and the recovery behaviours, as Nav2 arranges them.

`ProgressChecker` is Nav2's SimpleProgressChecker: the robot must move `required_movement_m` away from the pose where
progress was last seen within `progress_timeout_s`, else it is stuck. The controller then runs the next recovery in
the order manoeuvre onto the path (`mnemo_mpc.nav.maneuver`: a footprint-aware lattice motion, for a robot pinned
misaligned at a passage) -> rotate in place (re-observe) -> back off (only when the robot may reverse, v_min < 0) ->
re-plan, round robin, skipping one that cannot run here, and declares failure after `max_recoveries` of them without
progress. Progress resets the count.

The behaviours here produce *target* commands only; the controller passes every one through its checked command
path (velocity and acceleration limits, finite). Motions are checked against the current grid with the footprint's
covering discs (`planning.collision.FootprintChecker`), as the MPC's own clearance constraint sees the robot.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.mpc import SQPMPC

MANEUVER, ROTATE, BACK_OFF, REPLAN = "recovery_maneuver", "recovery_rotate", "recovery_back_off", "recovery_replan"
ORDER: tuple[str, ...] = (MANEUVER, ROTATE, BACK_OFF, REPLAN)


class ProgressChecker:
    """Nav2's SimpleProgressChecker: stuck when the robot stays within `required_movement_radius` (m) of its baseline
    pose for `movement_time_allowance` (s); moving that far makes the pose where it got there the new baseline.
    Parameter names and defaults are Nav2's (the controller passes its `required_movement_m` and
    `progress_timeout_s`). `reset()` forgets the baseline (a new goal): the next check sets it afresh."""

    def __init__(self, required_movement_radius: float = 0.5, movement_time_allowance: float = 10.0) -> None:
        for name, value in (
            ("required_movement_radius", required_movement_radius),
            ("movement_time_allowance", movement_time_allowance),
        ):
            if not (is_real(value) and value > 0):
                raise InputError(f"ProgressChecker.{name}: expected a finite number > 0, got {value!r}")
        self.required_movement_radius = float(required_movement_radius)
        self.movement_time_allowance = float(movement_time_allowance)
        self.baseline: np.ndarray | None = None
        self.since_s = 0.0

    def reset(self, pose: np.ndarray | None = None, now_s: float | None = None) -> None:
        """Without arguments, forget the baseline (Nav2's reset, on a new goal); with both, make `pose` at `now_s`
        the baseline."""
        if pose is None or now_s is None:
            self.baseline = None
            return
        self.baseline, self.since_s = np.asarray(pose[:2], dtype=float).copy(), float(now_s)

    def update(self, pose: np.ndarray, now_s: float) -> tuple[bool, bool]:
        """(progress made since the baseline, stuck); progress moves the baseline here."""
        if self.baseline is None:
            self.reset(pose, now_s)
            return False, False
        if float(np.hypot(*(np.asarray(pose[:2]) - self.baseline))) >= self.required_movement_radius:
            self.reset(pose, now_s)
            return True, False
        return False, now_s - self.since_s >= self.movement_time_allowance - 1e-9

    def check(self, pose: np.ndarray, now_s: float) -> bool:
        """Nav2's `check`: True while the robot makes progress, False once it is stuck (`update`'s second value)."""
        return not self.update(pose, now_s)[1]


def pose_margins(mpc: SQPMPC, field_: DistanceField, poses: np.ndarray, exact: bool = False) -> np.ndarray:
    """Per pose (..., 3): min over the covering discs of esdf(disc centre) - disc radius; with `exact`, the distance
    to the obstacle cells themselves near them (`DistanceField.exact_distance`), as the motions here check it."""
    return mpc.collision.pose_margins(field_, poses, exact)


def footprint_margin(mpc: SQPMPC, field_: DistanceField, poses: np.ndarray) -> float:
    """min over `poses` (M, 3) and the covering discs of the exact distance (`pose_margins`) - disc radius."""
    return float(np.min(pose_margins(mpc, field_, np.asarray(poses, dtype=float).reshape(-1, 3), exact=True)))


def required_margin(mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, margin: float | None = None) -> float:
    """The margin a motion from `pose` must keep: the safety margin (or the step's narrowed `margin`), or less when
    the robot is already inside that band, as `SQPMPC.solve` relaxes its constraint (`SQPMPC.start_margin`), and
    never more than the exact margin it has now; less 1e-3."""
    pose = np.asarray(pose, dtype=float)
    return min(mpc.start_margin(field_, pose, margin), float(pose_margins(mpc, field_, pose, exact=True))) - 1e-3


class Trail:
    """The poses the robot has just stood at (odometry, `max_m` of travel, one every `spacing_m`): its body was
    there, so a reverse back over them may keep the margin it kept there, not only the one it has now
    (`reverse_free`). The robot's own motion, not the grid, is the evidence; the grid still bounds it below."""

    def __init__(self, spacing_m: float = 0.02, max_m: float = 2.0) -> None:
        self.spacing_m = float(spacing_m)
        self.poses: deque[np.ndarray] = deque(maxlen=max(int(math.ceil(max_m / spacing_m)), 1))

    def add(self, pose: np.ndarray) -> None:
        pose = np.asarray(pose, dtype=float)[:3]
        if not self.poses or float(np.hypot(*(pose[:2] - self.poses[-1][:2]))) >= self.spacing_m:
            self.poses.append(pose.copy())


# A reverse pose counts as one the robot stood at within these of it (`reverse_reach`): about the lateral wander of a
# body driven straight down a lane, and the few degrees a stalled MPC turns it (dense-1020: 8 degrees in 3 s); the
# floor below, on the cells, is what keeps the body off the walls.
TRAIL_M, TRAIL_RAD = 0.02, 0.15
# ... and over such poses keeps at least this on the cells (the controller's least passage margin, min_margin_m).
TRAIL_FLOOR_M = 0.01


class Behaviour:
    """One running recovery motion: rotate in place or reverse straight, bounded in extent and time; a reverse over
    the robot's `trail` keeps what `reverse_free` allows there."""

    def __init__(
        self,
        name: str,
        pose: np.ndarray,
        now_s: float,
        extent: float,
        speed: float,
        time_allowance_s: float,
        trail: Trail | None = None,
    ) -> None:
        self.name = name
        self.start = np.asarray(pose, dtype=float).copy()
        self.started_s = float(now_s)
        self.extent = float(extent)  # rad (signed for rotation) or m (reverse distance)
        self.speed = float(speed)
        self.time_allowance_s = float(time_allowance_s)
        self.last_yaw = float(pose[2])
        self.turned = 0.0
        self.trail = trail

    def target(
        self, mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, velocity: np.ndarray, now_s: float
    ) -> np.ndarray | None:
        """The target command this period, or None when the behaviour is over (done, blocked or out of time)."""
        robot = mpc.robot
        if now_s - self.started_s >= self.time_allowance_s - 1e-9:
            return None
        if self.name == ROTATE:
            self.turned += wrap_angle(float(pose[2]) - self.last_yaw)
            self.last_yaw = float(pose[2])
            left = abs(self.extent) - abs(self.turned)
            if left <= 0.02 or not rotation_free(mpc, field_, pose, math.copysign(left, self.extent)):
                return None
            # Slow down so as to stop at the end: |w| <= sqrt(2 alpha_max * angle left).
            w = min(self.speed, math.sqrt(2.0 * robot.alpha_max * left))
            return np.array([0.0, math.copysign(w, self.extent)])
        travelled = float(np.hypot(*(np.asarray(pose[:2]) - self.start[:2])))
        left = self.extent - travelled
        if left <= 0.01 or not reverse_free(mpc, field_, pose, left, self.trail):
            return None
        v = min(self.speed, math.sqrt(2.0 * robot.a_max * left), max(-robot.v_min, 0.0))
        return np.array([-v, 0.0])


def rotation_angle(mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, goal: np.ndarray, angle: float) -> float:
    """The signed rotation to run: `angle` towards the goal's bearing first, the other way when that one would bring
    the footprint too close to an obstacle; 0 when neither is free."""
    bearing = math.atan2(goal[1] - pose[1], goal[0] - pose[0])
    first = 1.0 if wrap_angle(bearing - float(pose[2])) >= 0 else -1.0
    for sign in (first, -first):
        if rotation_free(mpc, field_, pose, sign * angle):
            return sign * angle
    return 0.0


def reverse_free(
    mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, distance: float, trail: Trail | None = None
) -> bool:
    """A straight reverse of `distance` from `pose` keeps the footprint's margin (robot allowed to reverse): the one
    it has (`required_margin`), or, back over poses the robot stood at (`trail`), the least it kept there on this
    field, not under TRAIL_FLOOR_M. Without the trail a lane a few millimetres narrower behind the robot than where it
    stands refused every back-off: a Jackal stood 60 s at 3.1 cm in a 0.6 m lane it had come along at 2.0-2.2 cm, its
    manoeuvre and turns refused too (dense-1020 mapless, realistic)."""
    return reverse_reach(mpc, field_, pose, (distance,), trail) > 0.0


def reverse_reach(
    mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, distances: tuple[float, ...], trail: Trail | None = None
) -> float:
    """The first of `distances` a straight reverse from `pose` may go (`reverse_free`), 0.0 when none: the reverse's
    poses and their margins computed once, for the longest."""
    if mpc.robot.v_min >= 0 or not distances:
        return 0.0
    longest = max(distances)
    step = 0.5 * field_.grid.resolution
    s = np.linspace(0.0, longest, max(int(math.ceil(longest / step)), 1) + 1)
    c, si = math.cos(float(pose[2])), math.sin(float(pose[2]))
    poses = np.stack([pose[0] - s * c, pose[1] - s * si, np.full_like(s, pose[2])], axis=-1)
    margins = np.minimum.accumulate(pose_margins(mpc, field_, poses, exact=True))  # the least up to each pose
    need = required_margin(mpc, field_, pose)
    steps = [int(np.searchsorted(s, d - 1e-9)) if d > 0 else 0 for d in distances]
    retrace = None
    for distance, k in zip(distances, steps, strict=True):
        if k == 0:
            continue
        if margins[k] >= need:
            return float(distance)
        if trail is not None and trail.poses:
            retrace = retrace or _retrace_margins(mpc, field_, poses, trail)
            if retrace[k] is not None and margins[k] >= max(min(need, retrace[k] - 1e-3), TRAIL_FLOOR_M):
                return float(distance)
    return 0.0


def _retrace_margins(mpc: SQPMPC, field_: DistanceField, poses: np.ndarray, trail: Trail) -> list[float | None]:
    """Per prefix poses[: k + 1] of a reverse: the least margin on this field of the poses the robot stood at within
    TRAIL_M and TRAIL_RAD of its poses 1..k, or None when one of those has none (poses[0] is where it stands)."""
    past = np.asarray(trail.poses)
    d = np.hypot(poses[1:, None, 0] - past[None, :, 0], poses[1:, None, 1] - past[None, :, 1])
    near = (d <= TRAIL_M) & (np.abs(wrap_angle(poses[1:, None, 2] - past[None, :, 2])) <= TRAIL_RAD)
    used = np.any(near, axis=0)
    kept = np.full(len(past), np.inf)
    kept[used] = pose_margins(mpc, field_, past[used], exact=True)
    out: list[float | None] = [None]
    least, covered = np.inf, True
    for row in near:
        covered = covered and bool(np.any(row))
        least = min(least, float(np.min(kept[row]))) if covered else least
        out.append(least if covered else None)
    return out


def rotation_free(
    mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, angle: float, margin: float | None = None
) -> bool:
    """Turning in place by `angle` from `pose` keeps the footprint's margin (`required_margin`) all the way."""
    steps = max(int(math.ceil(abs(angle) / 0.05)), 1)
    yaws = float(pose[2]) + np.linspace(0.0, angle, steps + 1)
    poses = np.stack([np.full_like(yaws, pose[0]), np.full_like(yaws, pose[1]), yaws], axis=-1)
    return footprint_margin(mpc, field_, poses) >= required_margin(mpc, field_, pose, margin)


def wrap_angle(angle: Any) -> Any:
    """`angle` (a number or an array) wrapped to [-pi, pi)."""
    return (angle + math.pi) % (2.0 * math.pi) - math.pi
