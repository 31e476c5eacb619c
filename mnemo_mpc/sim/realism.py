"""The simulated drive (issue 24): how the robot departs from the MPC's model, applied per physics substep. What
it departs by (`Realism`, the profile's `dynamics:` / `sensor:` values, `--realism ideal|profile|harsh`) is
`mnemo_mpc.realism`.

The model, per physics substep h (`mnemo_mpc.sim.simulator.Simulator.step`):

* **latency**: a command sent at t acts from t + latency_s + U(-jitter, +jitter) (never before an earlier command);
* **actuator lag**: each axis follows its active command c as a first-order system with saturation,
  v <- v + clip((1 - exp(-h / lag_v_s)) (c - v), -accel_v_max h, accel_v_max h) (the same for w);
* **slip**: the body moves at (slip_v v, slip_w w), each factor times (1 + N(0, slip_noise)) drawn per control
  period -- a skid-steer base turns and drives less than its wheels;
* **odometry**: the wheels' speed (1 + N(0, odom_v_noise)) and a gyro's yaw rate (the body's, + gyro_bias_rad_s +
  N(0, gyro_noise_rad_s)) are integrated into the odometry pose the controller gets, in the `odom` frame (REP-105:
  continuous, drifting). Slip is invisible to the wheels, so it drifts. The local grid is fused in that frame, as a
  robot's local costmap is. Every `localization_period_s` a localiser (AMCL on a known map, say) re-estimates the
  map -> odom transform from the true pose within N(0, localization_noise_m) and N(0, localization_noise_rad); goals
  and paths given in the map frame reach the controller through it (`Drive.to_odom`), as Nav2's controller server
  transforms its plan. Period 0: no drift (odometry = truth).
"""

from __future__ import annotations

import math

import numpy as np

from mnemo_mpc.planning.footprint import to_robot, to_world
from mnemo_mpc.realism import (  # the values the drive applies, re-exported for the simulator's users
    DYNAMICS_KEYS,
    HARSH_FLOOR,
    LEVELS,
    SENSOR_KEYS,
    Realism,
    harsh,
    profile_realism,
    realism_for,
)

__all__ = [
    "LEVELS",
    "Realism",
    "DYNAMICS_KEYS",
    "SENSOR_KEYS",
    "profile_realism",
    "HARSH_FLOOR",
    "harsh",
    "realism_for",
    "Drive",
]


class Drive:
    """The simulated drive between the command and the body (module docstring): command queue (latency, jitter),
    first-order lag with saturation, slip, and the odometry/localiser estimate. One per episode (`reset`)."""

    def __init__(self, realism: Realism, rng: np.random.Generator) -> None:
        self.realism = realism
        self.rng = rng
        self.queue: list[tuple[float, float, float]] = []  # (acts from, v, w), in order
        self.command = np.zeros(2)  # the command acting now
        self.velocity = np.zeros(2)  # the wheels' (v, w) after lag and saturation
        self.slip = np.array([realism.slip_v, realism.slip_w])
        self.odom_v_scale = 1.0
        self.gyro_noise = 0.0
        self.estimate: np.ndarray | None = None  # the odometry pose (odom frame) the controller is handed
        self.map_from_odom = np.zeros(3)  # the localiser's (x, y, yaw) of the odom frame in the map frame
        self.next_fix_s = 0.0

    def reset(self, pose: np.ndarray) -> None:
        self.queue.clear()
        self.command[:] = 0.0
        self.velocity[:] = 0.0
        self.estimate = np.asarray(pose, dtype=float).copy()  # odom starts where the robot is: odom = map at t 0
        self.map_from_odom = np.zeros(3)
        self.next_fix_s = self.realism.localization_period_s

    def send(self, v: float, w: float, now_s: float) -> None:
        """Queue a command sent at `now_s`, and draw this period's slip and sensor noise."""
        r = self.realism
        jitter = self.rng.uniform(-r.latency_jitter_s, r.latency_jitter_s) if r.latency_jitter_s > 0 else 0.0
        acts = max(now_s + max(r.latency_s + jitter, 0.0), self.queue[-1][0] if self.queue else now_s)
        self.queue.append((acts, float(v), float(w)))
        if r.slip_noise > 0:
            self.slip = np.array([r.slip_v, r.slip_w]) * (1 + self.rng.normal(0.0, r.slip_noise, 2))
        if r.odom_v_noise > 0:
            self.odom_v_scale = 1 + float(self.rng.normal(0.0, r.odom_v_noise))
        if r.gyro_noise_rad_s > 0:
            self.gyro_noise = float(self.rng.normal(0.0, r.gyro_noise_rad_s))

    def body_velocity(self, t_s: float, h: float) -> np.ndarray:
        """Advance the drive by one substep ending at `t_s`; the (v, w) the body is driven at during it."""
        r = self.realism
        while self.queue and self.queue[0][0] <= t_s - h + 1e-12:  # commands acting from this substep's start
            _, v, w = self.queue.pop(0)
            self.command[:] = (v, w)
        for i, (tau, amax) in enumerate(((r.lag_v_s, r.accel_v_max), (r.lag_w_s, r.accel_w_max))):
            delta = self.command[i] - self.velocity[i]
            if tau > 0:
                delta *= -math.expm1(-h / tau)
            if amax > 0:
                delta = min(max(delta, -amax * h), amax * h)
            self.velocity[i] += delta
        return self.velocity * self.slip

    def odometry(self, body_w: float, h: float, t_s: float, true_pose: np.ndarray) -> None:
        """Integrate the odometry over the substep (wheel speed, gyro yaw rate); at a localiser fix, re-estimate the
        map -> odom transform from `true_pose` within the localiser's noise."""
        r = self.realism
        if r.localization_period_s <= 0:
            self.estimate = np.asarray(true_pose, dtype=float).copy()
            return
        v = self.velocity[0] * self.odom_v_scale
        w = body_w + r.gyro_bias_rad_s + self.gyro_noise
        x, y, yaw = self.estimate
        mid = yaw + 0.5 * w * h
        yaw = (yaw + w * h + math.pi) % (2 * math.pi) - math.pi
        self.estimate = np.array([x + v * h * math.cos(mid), y + v * h * math.sin(mid), yaw])
        if t_s >= self.next_fix_s - 1e-9:
            self.next_fix_s += r.localization_period_s
            true_pose = np.asarray(true_pose, dtype=float)
            c_yaw = true_pose[2] - yaw + float(self.rng.normal(0.0, r.localization_noise_rad))
            c, s = math.cos(c_yaw), math.sin(c_yaw)
            ox, oy = self.estimate[:2]
            noise = self.rng.normal(0.0, r.localization_noise_m, 2)
            c_xy = true_pose[:2] - np.array([c * ox - s * oy, s * ox + c * oy]) + noise
            self.map_from_odom = np.array([c_xy[0], c_xy[1], c_yaw])

    def to_odom(self, points: np.ndarray) -> np.ndarray:
        """Map-frame (x, y[, yaw]) rows -> the odom frame through the localiser's current map -> odom transform."""
        pts = np.array(points, dtype=float, copy=True)
        shape = pts.shape
        pts = pts.reshape(-1, shape[-1])
        pts[:, :2] = to_robot(pts[:, :2], self.map_from_odom)
        if shape[-1] > 2:
            pts[:, 2] -= self.map_from_odom[2]
        return pts.reshape(shape)

    def to_map(self, pose: np.ndarray) -> np.ndarray:
        """An odom-frame pose (x, y, yaw) in the map frame through the localiser's current transform."""
        xy = to_world(np.asarray(pose, dtype=float)[:2], self.map_from_odom)[0]
        return np.array([xy[0], xy[1], float(pose[2]) + self.map_from_odom[2]])

    def measured_velocity(self, body_w: float) -> np.ndarray:
        """The odometry's twist: the wheels' speed (slip unseen) and the gyro's yaw rate."""
        r = self.realism
        return np.array([self.velocity[0] * self.odom_v_scale, body_w + r.gyro_bias_rad_s + self.gyro_noise])
