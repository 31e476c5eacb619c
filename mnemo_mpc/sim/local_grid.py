"""Robot-centred rolling-window occupancy grid fused from lidar scans, like a ROS local costmap's obstacle layer.

The window is axis-aligned with the map frame and snapped to the global lattice of `resolution` (origin at a multiple
of the cell size), so when the robot moves the stored evidence shifts by whole cells and cells leaving the window are
forgotten. Each scan adds log-odds evidence (the standard binary Bayes filter of occupancy mapping): `logodds_miss`
to every cell a beam passes through before its return, `logodds_hit` to the cell of each return (a hit wins over a
miss in the same scan), clamped to [logodds_min, logodds_max]. Cells no beam has reached stay UNKNOWN (-1); observed
cells report round(100 * p) with p = 1 / (1 + exp(-l)). With the defaults one scan already classifies a cell under
`OccupancyGrid`'s thresholds (p = 0.90 >= 0.65 occupied, p = 0.20 <= 0.25 free), as a costmap marks and clears.

Beams are traversed by sampling every `ray_step_cells` cells along all beams at once (vectorised supercover
approximation), deduplicated per scan through a boolean scatter, so a cell gets at most one update per scan.

`costmap="inflated"` (issue 29; `eval --costmap inflated`) publishes the window as a Nav2 local costmap does instead:
the cells classified occupied are LETHAL, Nav2's inflation layer grows them (`planning.costmap.inflate`: inscribed
radius the robot's, inflation radius 0.55 m and cost scaling factor 10 by default, Nav2's defaults), the values are
translated as Nav2's costmap publisher does (100, 99, 1..98, 0, -1) and the grid says `nav2_costmap` semantics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.planning import costmap as cm
from mnemo_mpc.planning.grid import UNKNOWN, OccupancyGrid
from mnemo_mpc.planning.surfaces import shifted
from mnemo_mpc.sim.lidar import LidarScan

COSTMAPS = ("raw", "inflated")


@dataclass(frozen=True)
class LocalGridConfig:
    size_m: float = 6.0  # 120 x 120 cells: whole 5 x 5 patches for the spatial ViT (seed 002 §5.2)
    resolution: float = 0.05
    logodds_hit: float = 2.2
    logodds_miss: float = -1.4
    logodds_min: float = -3.5
    logodds_max: float = 3.5
    # A return's last `hit_margin_m` is not cleared: range noise must not carve into the wall it hit.
    hit_margin_m: float = 0.05
    # A return is marked this far behind its measured range. A wall face lies on a cell boundary; a return measured
    # short by range noise (the lidar's sigma 0.01 m, `LidarConfig.noise_std_m`) falls into the free cell in front of
    # it, and along a passage, where no later miss clears that cell (beams crossing it end at the wall within
    # `hit_margin_m`), the wall grew a whole cell into the passage: the Jackal read a 0.55 m passage as 0.45 m and
    # stood in it for good (dense-1005). 3 sigma; a quarter cell (the former nudge) let ~10 % of the returns through.
    hit_depth_m: float = 0.03
    ray_step_cells: float = 0.5
    # "raw": the fused occupancy; "inflated": a Nav2 local costmap of it (module docstring), with these parameters
    # (inscribed radius: the robot's, set by `sim.profile.closed_loop_setup`) and semantics
    costmap: str = "raw"
    inscribed_radius_m: float = 0.2
    inflation_radius_m: float = cm.NAV2_INFLATION_RADIUS_M
    cost_scaling_factor: float = cm.NAV2_COST_SCALING_FACTOR
    costmap_semantics: str = cm.NAV2

    def __post_init__(self) -> None:
        if self.resolution <= 0 or self.size_m < 4 * self.resolution:
            raise InputError(
                f"LocalGridConfig: expected resolution > 0 and size_m >= 4 cells, got {self.size_m}, {self.resolution}"
            )
        if not self.logodds_min < self.logodds_miss < 0 < self.logodds_hit < self.logodds_max:
            raise InputError(
                "LocalGridConfig log-odds: expected logodds_min < logodds_miss < 0 < logodds_hit < logodds_max"
            )
        if not (is_real(self.hit_depth_m) and 0 <= self.hit_depth_m <= self.hit_margin_m):
            raise InputError(
                f"LocalGridConfig.hit_depth_m: expected [0, hit_margin_m = {self.hit_margin_m}], got {self.hit_depth_m}"
            )
        if not 0 < self.ray_step_cells <= 1:
            raise InputError(f"LocalGridConfig.ray_step_cells: expected (0, 1], got {self.ray_step_cells}")
        if self.costmap not in COSTMAPS:
            raise InputError(f"LocalGridConfig.costmap: expected one of {COSTMAPS}, got {self.costmap!r}")
        for name in ("inscribed_radius_m", "inflation_radius_m", "cost_scaling_factor"):
            if not (is_real(getattr(self, name)) and getattr(self, name) >= 0):
                raise InputError(f"LocalGridConfig.{name}: expected a finite number >= 0, got {getattr(self, name)!r}")
        if cm.check_semantics(self.costmap_semantics, "LocalGridConfig.costmap_semantics") == cm.OCCUPANCY:
            raise InputError("LocalGridConfig.costmap_semantics: an inflated costmap needs a Nav2 semantics")

    @classmethod
    def for_sensor(cls, size_m: float, resolution: float, noise_std_m: float) -> LocalGridConfig:
        """The window for a lidar with range noise `noise_std_m`: returns marked 3 sigma into the surface and the
        last 3 sigma (at least the default 0.05 m) before a return never cleared, so a noisier sensor does not grow
        walls into passages (the reason for `hit_depth_m`) nor carve into them. The default lidar (sigma 0.01 m)
        gets the defaults."""
        depth = max(cls.hit_depth_m, 3.0 * noise_std_m)
        return cls(size_m=size_m, resolution=resolution, hit_depth_m=depth, hit_margin_m=max(cls.hit_margin_m, depth))

    @property
    def cells(self) -> int:
        return int(round(self.size_m / self.resolution))


class LocalGrid:
    """Fused rolling window. `update(scan)` recentres on the scan pose, integrates it and returns the grid."""

    def __init__(self, config: LocalGridConfig | None = None) -> None:
        self.config = config or LocalGridConfig()
        n = self.config.cells
        self.logodds = np.zeros((n, n), dtype=np.float32)
        self.observed = np.zeros((n, n), dtype=bool)
        self.origin_index = np.zeros(2, dtype=np.int64)  # (ix, iy) of cell (0, 0) on the global lattice

    def reset(self, center_xy: np.ndarray | None = None) -> None:
        self.logodds[:] = 0.0
        self.observed[:] = False
        self.origin_index = self._origin_for(np.zeros(2) if center_xy is None else np.asarray(center_xy, float))

    def _origin_for(self, xy: np.ndarray) -> np.ndarray:
        res = self.config.resolution
        return np.floor(xy / res).astype(np.int64) - self.config.cells // 2

    @property
    def origin(self) -> tuple[float, float, float]:
        res = self.config.resolution
        return float(self.origin_index[0] * res), float(self.origin_index[1] * res), 0.0

    def recenter(self, xy: np.ndarray) -> None:
        """Move the window so that `xy` is at its centre cell, keeping the evidence of cells still inside."""
        new = self._origin_for(np.asarray(xy, dtype=float))
        dx, dy = (new - self.origin_index).tolist()
        if dx == 0 and dy == 0:
            return
        self.logodds, self.observed = shifted(self.logodds, dx, dy, 0.0), shifted(self.observed, dx, dy, False)
        self.origin_index = new

    def _scatter(self, cols: np.ndarray, rows: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """Boolean (n*n,) mask of the window cells hit by continuous cell coordinates (points outside dropped)."""
        n = self.config.cells
        ic = np.floor(cols).astype(np.int32)
        ir = np.floor(rows).astype(np.int32)
        valid = valid & (ic >= 0) & (ic < n) & (ir >= 0) & (ir < n)
        mask = np.zeros(n * n, dtype=bool)
        mask[(ir * n + ic)[valid]] = True
        return mask

    def integrate(self, scan: LidarScan) -> None:
        """Add one scan's evidence (log-odds binary Bayes update, clamped)."""
        c = self.config
        n = c.cells
        res = c.resolution
        # Work in window cell units: (col, row) = xy / res - origin_index.
        oc = np.asarray(scan.pose[:2], dtype=float) / res - self.origin_index
        dirs = scan.directions().astype(np.float32)
        # No beam sample beyond the window's far corner can land inside it.
        ranges = np.nan_to_num(scan.ranges, nan=0.0)  # a lost beam (scan.valid False) clears nothing
        reach = min(float(ranges.max(initial=0.0)) / res, math.hypot(*(oc - n / 2)) + n / math.sqrt(2))
        step = c.ray_step_cells
        ts = ((np.arange(int(math.ceil(reach / step))) + 0.5) * step).astype(np.float32)
        free_len = (np.where(scan.hit, ranges - c.hit_margin_m, ranges) / res).astype(np.float32)
        along = ts[None, :] < free_len[:, None]  # (beams, samples)
        miss = self._scatter(oc[0] + ts[None, :] * dirs[:, 0:1], oc[1] + ts[None, :] * dirs[:, 1:2], along)
        # Returns marked `hit_depth_m` into the surface: the wall's cell, not the free one in front of it
        hit_t = (ranges + c.hit_depth_m) / res
        hit = self._scatter(oc[0] + hit_t * dirs[:, 0], oc[1] + hit_t * dirs[:, 1], np.asarray(scan.hit))
        miss &= ~hit
        lo = self.logodds.reshape(-1)
        lo[hit] = np.minimum(lo[hit] + c.logodds_hit, c.logodds_max)
        lo[miss] = np.maximum(lo[miss] + c.logodds_miss, c.logodds_min)
        self.observed.reshape(-1)[hit | miss] = True

    def occupancy_grid(self) -> OccupancyGrid:
        """The window as an `OccupancyGrid` (UNKNOWN where never observed) with its moving origin."""
        prob = 1.0 / (1.0 + np.exp(-self.logodds))
        data = np.where(self.observed, np.rint(100.0 * prob), UNKNOWN).astype(np.int8)
        grid = OccupancyGrid(data, self.config.resolution, self.origin)
        c = self.config
        if c.costmap == "raw":
            return grid
        inflated = cm.inflate(
            grid.occupied_mask(),
            c.resolution,
            c.inscribed_radius_m,
            c.inflation_radius_m,
            c.cost_scaling_factor,
            unknown=grid.unknown_mask(),
        )
        return OccupancyGrid(inflated, c.resolution, self.origin, semantics=c.costmap_semantics)

    def update(self, scan: LidarScan) -> OccupancyGrid:
        self.recenter(scan.pose[:2])
        self.integrate(scan)
        return self.occupancy_grid()
