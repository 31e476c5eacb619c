"""Rotation shim: turn in place towards the path before the MPC tracks it (Nav2's RotationShimController).

Why: a rectangular base that starts, or stops, facing away from its path beside a wall is a local minimum for the
MPC. Optimising 1.3 s ahead, it drives along its heading while it turns and can end where the box's swinging corners
no longer let it rotate (the Jackal's 8 failures in 28 worlds: all stuck within 0.8 m of the start). Turning first,
where the turn is free, puts the MPC in front of a path it can follow.

As Nav2 does it: the robot's heading is compared with the bearing of the first path point at least
`forward_sampling_distance_m` away (Nav2's forward_sampling_distance, 0.5 m); beyond `angular_dist_threshold_rad`
(Nav2's angular_dist_threshold, 0.785 rad) the shim rotates in place at up to `rotate_speed`, slowing down to come to
rest at the hand-over angle. Unlike Nav2 it hands over at the tighter `handover_rad` (hysteresis): a base handed over
45 degrees off its path is the case the shim exists for, and handed over at rest the MPC starts from a held state. It
engages only while the robot is (almost) at rest, |v| <= `max_engage_speed`, so a curve taken at speed stays the
MPC's; and only where the whole turn keeps the footprint's margin on the grid's whole cells (the recoveries' check),
otherwise the MPC keeps the step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.nav.recovery import rotation_free, wrap_angle
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.mpc import SQPMPC

STATUS = "rotating_to_path"
MIN_SPEED = 0.2  # rad/s: the turn's slowest command, so that it ends in a bounded time


@dataclass(frozen=True)
class ShimConfig:
    angular_dist_threshold_rad: float = 0.785  # engage beyond this heading error (Nav2 default)
    handover_rad: float = 0.15  # hand over to the MPC below this heading error
    forward_sampling_distance_m: float = 0.5  # the path point whose bearing is the target heading (Nav2 default)
    rotate_speed: float = 1.8  # rad/s, capped by w_max (Nav2's rotate_to_heading_angular_vel)
    max_engage_speed: float = 0.05  # m/s: engage only from (near) rest

    def __post_init__(self) -> None:
        for name in (
            "angular_dist_threshold_rad",
            "handover_rad",
            "forward_sampling_distance_m",
            "rotate_speed",
            "max_engage_speed",
        ):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"ShimConfig.{name}: expected a finite number > 0, got {value!r}")
        if not self.handover_rad < self.angular_dist_threshold_rad <= math.pi:
            raise InputError(
                f"ShimConfig: expected handover_rad < angular_dist_threshold_rad <= pi, got {self.handover_rad!r} "
                f"and {self.angular_dist_threshold_rad!r}"
            )


def path_bearing(pose: np.ndarray, reference: np.ndarray, distance: float) -> float | None:
    """Bearing from the robot to the first reference point at least `distance` from it (the last point when none
    is that far); None when every point is within a centimetre (nothing to turn to)."""
    pts = np.asarray(reference, dtype=float)[:, :2]
    d = np.hypot(pts[:, 0] - pose[0], pts[:, 1] - pose[1])
    far = np.flatnonzero(d >= distance)
    i = int(far[0]) if len(far) else int(np.argmax(d))
    if d[i] < 0.01:
        return None
    return math.atan2(pts[i, 1] - pose[1], pts[i, 0] - pose[0])


def rotate_to_heading(
    error: float,
    *,
    max_rate: float,
    alpha_max: float,
    stop_within: float = 0.0,
    min_rate: float = MIN_SPEED,
    current_w: float | None = None,
    dt: float | None = None,
) -> float:
    """The signed yaw rate (rad/s) of an in-place turn by `error` (rad) that comes to rest `stop_within` rad short of
    it: w = sign(e) * min(max_rate, max(sqrt(1.6 * alpha_max * (|e| - stop_within)), min_rate)), the braking profile
    w^2 = 2 * (0.8 alpha_max) * angle left, at 80 % of alpha_max so that the acceleration limit the command is checked
    against does not cut it short, and no slower than `min_rate` so that the turn ends in a bounded time. This is the
    rotation shim's law (Nav2's RotationShimController slows down the same way), shared with the goal alignment.

    With `dt` (the control period, for a command held over it) the profile is the same braking in discrete time:
    w = n * b * dt with b = 0.8 alpha_max and n(n + 1) / 2 * b * dt^2 = the angle left (sqrt(2 b left) as dt -> 0),
    so that each period's rate is b * dt below the last and the turn ends on the angle; and the rate is capped at the
    rest of the turn in one period, left / dt. With `current_w` as well, it stays within alpha_max * dt of the
    current rate (then within +-max_rate, which wins when the current rate is beyond it)."""
    left = max(abs(error) - stop_within, 0.0)
    if dt is None:
        profile = math.sqrt(1.6 * alpha_max * left)
    else:
        brake = 0.8 * alpha_max * dt  # rad/s shed per period
        profile = brake * (math.sqrt(0.25 + 2.0 * left / (brake * dt)) - 0.5)
    w = min(max_rate, max(profile, min_rate))
    if dt is not None:
        w = min(w, left / dt)
    w = math.copysign(w, error)
    if dt is not None and current_w is not None:
        step = alpha_max * dt
        w = min(max(w, current_w - step), current_w + step)
    return min(max(w, -max_rate), max_rate)


class RotationShim:
    """Decides, each step, whether this step is an in-place turn towards the path (module docstring)."""

    def __init__(self, config: ShimConfig | None = None) -> None:
        self.config = config or ShimConfig()
        self.active = False

    def reset(self) -> None:
        self.active = False

    def target(
        self,
        mpc: SQPMPC,
        field_: DistanceField,
        pose: np.ndarray,
        velocity: np.ndarray,
        reference: np.ndarray | None,
        margin: float,
    ) -> np.ndarray | None:
        """The target (v, w) of an in-place turn this step, or None when the MPC should plan it."""
        cfg, robot = self.config, mpc.robot
        bearing = None if reference is None else path_bearing(pose, reference, cfg.forward_sampling_distance_m)
        if bearing is None:
            self.active = False
            return None
        error = wrap_angle(bearing - float(pose[2]))
        if self.active:
            self.active = abs(error) > cfg.handover_rad
        else:
            self.active = (
                abs(error) > cfg.angular_dist_threshold_rad and abs(float(velocity[0])) <= cfg.max_engage_speed
            )
        if self.active and not rotation_free(mpc, field_, pose, error, margin):
            self.active = False
        if not self.active:
            return None
        w = rotate_to_heading(
            error, max_rate=min(cfg.rotate_speed, robot.w_max), alpha_max=robot.alpha_max, stop_within=cfg.handover_rad
        )
        return np.array([0.0, w])
