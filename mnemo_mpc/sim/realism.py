"""How far the simulated robot departs from the MPC's model (issue 24): actuator lag and saturation, command latency
and jitter, skid-steer slip, drifting odometry with a periodic localiser, and the lidar's field of view, beams, noise
and dropouts.

The ideal robot (`Realism()`, `--realism ideal`) obeys the planner's unicycle exactly: a command acts at once, the body
moves as commanded and the controller is handed the ground-truth pose. That row is an upper bound, kept for
regression. `--realism profile` takes the values of the robot profile's `dynamics:` / `sensor:` sections
(`realism_for(params, "profile")`); `harsh` makes each of them worse than the profile states (`harsh`), so the
controller -- which models the profile's values -- also meets a robot it does not know exactly.

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

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.planning.footprint import to_robot, to_world

LEVELS = ("ideal", "profile", "harsh")


@dataclass(frozen=True)
class Realism:
    """The simulated robot's departures from the planner's model (module docstring). Defaults: the ideal robot."""

    level: str = "ideal"  # which of LEVELS produced it (recorded in every result)
    latency_s: float = 0.0  # command -> actuation
    latency_jitter_s: float = 0.0  # half-width of a uniform jitter on each command's latency
    lag_v_s: float = 0.0  # first-order time constants of the velocity loops (0: none)
    lag_w_s: float = 0.0
    accel_v_max: float = 0.0  # the drive's own saturation, m/s^2 and rad/s^2; 0: none beyond the lag
    accel_w_max: float = 0.0
    slip_v: float = 1.0  # body motion over wheel motion
    slip_w: float = 1.0
    slip_noise: float = 0.0  # relative std of the slip factors, drawn per control period
    odom_v_noise: float = 0.0  # relative std of the wheel-speed reading, per control period
    gyro_bias_rad_s: float = 0.0
    gyro_noise_rad_s: float = 0.0
    localization_period_s: float = 0.0  # 0: the controller is handed the true pose (no odometry drift)
    localization_noise_m: float = 0.0
    localization_noise_rad: float = 0.0
    # The lidar: None keeps the simulator's LidarConfig (360 degrees); else these replace its fields.
    lidar_fov_deg: float | None = None
    lidar_beams: int | None = None
    lidar_noise_m: float | None = None
    lidar_dropout: float = 0.0  # probability that a beam returns nothing valid (NaN), per beam and scan

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise InputError(f"Realism.level: expected one of {', '.join(LEVELS)}, got {self.level!r}")
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "level" or value is None:
                continue
            if isinstance(value, bool) or not is_real(value) or value < 0:
                raise InputError(f"realism {f.name}: expected a number >= 0, got {value!r}")
        for name in ("slip_v", "slip_w"):
            if not 0 < getattr(self, name) <= 1.5:
                raise InputError(f"realism {name}: expected a factor in (0, 1.5], got {getattr(self, name)}")
        if not 0 <= self.lidar_dropout < 1:
            raise InputError(f"realism lidar_dropout: expected a probability in [0, 1), got {self.lidar_dropout}")
        if self.lidar_fov_deg is not None and not 0 < self.lidar_fov_deg <= 360:
            raise InputError(f"realism lidar_fov_deg: expected (0, 360], got {self.lidar_fov_deg}")
        if self.lidar_beams is not None and (int(self.lidar_beams) != self.lidar_beams or self.lidar_beams < 1):
            raise InputError(f"realism lidar_beams: expected an integer >= 1, got {self.lidar_beams}")

    @property
    def is_ideal(self) -> bool:
        """True when the robot obeys the planner's model exactly (the lidar may still differ)."""
        ideal = Realism()
        names = [f.name for f in dataclasses.fields(self) if f.name != "level" and not f.name.startswith("lidar_")]
        return all(getattr(self, n) == getattr(ideal, n) for n in names)

    def lidar(self, base: Any) -> Any:
        """`base` (a LidarConfig) with this realism's field of view, beams, noise and dropout."""
        changes: dict[str, Any] = {"dropout": self.lidar_dropout}
        if self.lidar_fov_deg is not None:
            changes["fov_rad"] = math.radians(self.lidar_fov_deg)
        if self.lidar_beams is not None:
            changes["num_beams"] = int(self.lidar_beams)
        if self.lidar_noise_m is not None:
            changes["noise_std_m"] = float(self.lidar_noise_m)
        return dataclasses.replace(base, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# The profile's `dynamics:` and `sensor:` keys (NavParams fields `dynamics_<key>` / `sensor_<key>`) -> Realism fields.
DYNAMICS_KEYS = (
    "latency_s",
    "latency_jitter_s",
    "lag_v_s",
    "lag_w_s",
    "accel_v_max",
    "accel_w_max",
    "slip_v",
    "slip_w",
    "slip_noise",
    "odom_v_noise",
    "gyro_bias_rad_s",
    "gyro_noise_rad_s",
    "localization_period_s",
    "localization_noise_m",
    "localization_noise_rad",
)
SENSOR_KEYS = {
    "fov_deg": "lidar_fov_deg",
    "beams": "lidar_beams",
    "noise_m": "lidar_noise_m",
    "dropout": "lidar_dropout",
}


def profile_realism(params: Any) -> Realism:
    """The realism a profile states (`NavParams` with `dynamics_*` / `sensor_*` fields); the ideal robot without."""
    if params is None:
        return Realism(level="profile")
    values: dict[str, Any] = {k: getattr(params, f"dynamics_{k}") for k in DYNAMICS_KEYS}
    for key, name in SENSOR_KEYS.items():
        values[name] = getattr(params, f"sensor_{key}")
    return Realism(level="profile", **values)


# The harsh level's floor: what a worn, loaded skid-steer base with a cheap lidar does, for robots that state less.
HARSH_FLOOR = Realism(
    level="harsh",
    latency_s=0.1,
    latency_jitter_s=0.02,
    lag_v_s=0.25,
    lag_w_s=0.2,
    slip_v=0.95,
    slip_w=0.8,
    slip_noise=0.05,
    odom_v_noise=0.02,
    gyro_bias_rad_s=0.01,
    gyro_noise_rad_s=0.02,
    localization_period_s=1.0,
    localization_noise_m=0.03,
    localization_noise_rad=0.02,
    lidar_dropout=0.05,
)


def harsh(profile: Realism) -> Realism:
    """Every effect worse than the profile states: 1.5x its latency and lags, twice its slip loss and noises, and at
    least `HARSH_FLOOR`'s; the profile's lidar with twice its noise and dropouts."""
    f = HARSH_FLOOR
    noise = 2 * profile.lidar_noise_m if profile.lidar_noise_m is not None else 0.02
    return dataclasses.replace(
        profile,
        level="harsh",
        latency_s=max(1.5 * profile.latency_s, f.latency_s),
        latency_jitter_s=max(1.5 * profile.latency_jitter_s, f.latency_jitter_s),
        lag_v_s=max(1.5 * profile.lag_v_s, f.lag_v_s),
        lag_w_s=max(1.5 * profile.lag_w_s, f.lag_w_s),
        slip_v=min(1 - 2 * (1 - profile.slip_v), f.slip_v),
        slip_w=min(1 - 2 * (1 - profile.slip_w), f.slip_w),
        slip_noise=max(2 * profile.slip_noise, f.slip_noise),
        odom_v_noise=max(2 * profile.odom_v_noise, f.odom_v_noise),
        gyro_bias_rad_s=max(2 * profile.gyro_bias_rad_s, f.gyro_bias_rad_s),
        gyro_noise_rad_s=max(2 * profile.gyro_noise_rad_s, f.gyro_noise_rad_s),
        localization_period_s=profile.localization_period_s or f.localization_period_s,
        localization_noise_m=max(2 * profile.localization_noise_m, f.localization_noise_m),
        localization_noise_rad=max(2 * profile.localization_noise_rad, f.localization_noise_rad),
        lidar_noise_m=noise,
        lidar_dropout=min(max(2 * profile.lidar_dropout, f.lidar_dropout), 0.5),
    )


def realism_for(params: Any, level: str) -> Realism:
    """The simulated robot for `level` (LEVELS) and a profile (`NavParams`, or None for the built-in robot)."""
    if level not in LEVELS:
        raise InputError(f"--realism: expected one of {', '.join(LEVELS)}, got {level!r}")
    if level == "ideal":
        return Realism()
    profile = profile_realism(params)
    return profile if level == "profile" else harsh(profile)


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
