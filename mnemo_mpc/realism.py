"""How far the simulated robot departs from the MPC's model (issue 24): actuator lag and saturation, command latency
and jitter, skid-steer slip, drifting odometry with a periodic localiser, and the lidar's field of view, beams, noise
and dropouts.

The ideal robot (`Realism()`, `--realism ideal`) obeys the planner's unicycle exactly: a command acts at once, the body
moves as commanded and the controller is handed the ground-truth pose. That row is an upper bound, kept for
regression. `--realism profile` takes the values of the robot profile's `dynamics:` / `sensor:` sections
(`realism_for(params, "profile")`); `harsh` makes each of them worse than the profile states (`harsh`), so the
controller -- which models the profile's values -- also meets a robot it does not know exactly.

The values live here, with the profile that states them (`mnemo_mpc.profile`); the simulator that applies them
(`Drive`) is `mnemo_mpc.sim.realism`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from mnemo_mpc.errors import InputError, is_real

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
