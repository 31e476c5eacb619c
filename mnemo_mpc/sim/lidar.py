"""2-D lidar by `pybullet.rayTestBatch`: `num_beams` horizontal rays from the robot centre at `height_m`.

Ranges follow sensor_msgs/LaserScan: beam i points at `angle_min + i * angle_increment` relative to the heading;
beams without a return report `range_max` and `hit = False`. Additive Gaussian range noise is drawn from the
simulator's seeded generator, so a run is reproducible. With `dropout` > 0 each beam is lost with that probability
(a real scanner's NaN on dark, shiny or grazing surfaces): `valid` is False there, and consumers ignore the beam --
neither a return nor free space along it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError


@dataclass(frozen=True)
class LidarConfig:
    num_beams: int = 360
    fov_rad: float = 2 * math.pi  # centred on the heading
    range_min_m: float = 0.05
    range_max_m: float = 5.0  # reaches the corners of the default 6 m local window (3 * sqrt 2 = 4.24 m)
    noise_std_m: float = 0.01
    height_m: float = 0.2
    dropout: float = 0.0  # probability that a beam is lost (no valid reading), per beam and scan

    def __post_init__(self) -> None:
        if self.num_beams < 1:
            raise InputError(f"LidarConfig.num_beams: expected >= 1, got {self.num_beams}")
        if not 0 < self.fov_rad <= 2 * math.pi:
            raise InputError(f"LidarConfig.fov_rad: expected (0, 2*pi], got {self.fov_rad}")
        if not 0 <= self.range_min_m < self.range_max_m:
            raise InputError(
                f"LidarConfig ranges: expected 0 <= range_min_m < range_max_m, "
                f"got {self.range_min_m}, {self.range_max_m}"
            )
        if not 0 <= self.dropout < 1:
            raise InputError(f"LidarConfig.dropout: expected a probability in [0, 1), got {self.dropout}")
        if self.noise_std_m < 0:
            raise InputError(f"LidarConfig.noise_std_m: expected >= 0, got {self.noise_std_m}")

    @property
    def angles(self) -> np.ndarray:
        """Beam angles relative to the heading. A full circle omits the duplicate end beam."""
        full = math.isclose(self.fov_rad, 2 * math.pi)
        return np.linspace(-self.fov_rad / 2, self.fov_rad / 2, self.num_beams, endpoint=not full)


@dataclass(frozen=True, eq=False)
class LidarScan:
    angles: np.ndarray  # (n,) relative to the robot heading
    ranges: np.ndarray  # (n,) metres; range_max where there is no return
    hit: np.ndarray  # (n,) bool
    pose: np.ndarray  # (3,) sensor pose (x, y, yaw) in the map frame at scan time
    range_max: float
    valid: np.ndarray | None = None  # (n,) bool: False for a lost beam (LidarConfig.dropout); None: all valid

    def directions(self) -> np.ndarray:
        """(n, 2) unit beam directions in the map frame."""
        a = self.angles + self.pose[2]
        return np.stack([np.cos(a), np.sin(a)], axis=-1)

    def points(self) -> np.ndarray:
        """(m, 2) map-frame points of the beams with a return."""
        d = self.directions()[self.hit]
        return self.pose[:2] + self.ranges[self.hit, None] * d


class Lidar:
    def __init__(self, client: int, config: LidarConfig | None = None, rng: np.random.Generator | None = None) -> None:
        self.client = client
        self.config = config or LidarConfig()
        self.rng = rng if rng is not None else np.random.default_rng(0)
        self._angles = self.config.angles

    def scan(self, pose: np.ndarray, exclude_body: int | None = None) -> LidarScan:
        """Cast the beams from `pose` (x, y, yaw). Returns from `exclude_body` (the robot) count as no return."""
        import pybullet as p

        c = self.config
        pose = np.asarray(pose, dtype=float)
        a = self._angles + pose[2]
        d = np.stack([np.cos(a), np.sin(a), np.zeros_like(a)], axis=-1)
        origin = np.array([pose[0], pose[1], c.height_m])
        starts = origin + c.range_min_m * d
        ends = origin + c.range_max_m * d
        res = p.rayTestBatch(starts.tolist(), ends.tolist(), physicsClientId=self.client)
        body = np.fromiter((r[0] for r in res), dtype=np.int64, count=len(res))
        frac = np.fromiter((r[2] for r in res), dtype=float, count=len(res))
        hit = (body >= 0) & (frac < 1.0)
        if exclude_body is not None:
            hit &= body != exclude_body
        ranges = np.where(hit, c.range_min_m + frac * (c.range_max_m - c.range_min_m), c.range_max_m)
        if c.noise_std_m > 0:
            noisy = ranges + self.rng.normal(0.0, c.noise_std_m, size=ranges.shape)
            ranges = np.where(hit, np.clip(noisy, c.range_min_m, c.range_max_m), ranges)
        valid = None
        if c.dropout > 0:
            valid = self.rng.random(ranges.shape) >= c.dropout
            hit &= valid
            ranges = np.where(valid, ranges, np.nan)
        return LidarScan(
            angles=self._angles.copy(), ranges=ranges, hit=hit, pose=pose.copy(), range_max=c.range_max_m, valid=valid
        )
