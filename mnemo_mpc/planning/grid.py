"""Occupancy grid in the nav_msgs/OccupancyGrid convention.

`data[row, col]` holds -1 (unknown) or an occupancy probability 0..100. Row 0 is the bottom of the map (smallest y),
as in nav_msgs and after map_server flips the image. Cell (row, col) covers
`[ox + col*res, ox + (col+1)*res) x [oy + row*res, oy + (row+1)*res)` in the map frame, where (ox, oy, oyaw) is
the origin pose of cell (0, 0)'s outer corner. A non-zero origin yaw rotates the grid about that corner.

Classification policy (stated once, used everywhere): a cell is OCCUPIED if its value >= `occupied_thresh`, FREE if
0 <= value <= `free_thresh`, and UNKNOWN otherwise (-1, or a value between the thresholds). What the planner does with
unknown cells is its `unknown_policy` (see `mnemo_mpc.planning.esdf`).

`semantics` says what the values mean (`mnemo_mpc.planning.costmap`): `"occupancy"` (the above, map_server style) or a
Nav2 costmap (`"nav2_costmap"`: 100 lethal OCCUPIED, 0..99 FREE with a soft cost, -1 UNKNOWN), whose thresholds are
set from it, so the classification above reads either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning import costmap

UNKNOWN = -1
FREE = 0
OCCUPIED = 100


@dataclass(frozen=True)
class OccupancyGrid:
    data: np.ndarray  # (H, W) int8
    resolution: float  # metres per cell
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)  # x, y, yaw of cell (0, 0)'s corner in the map frame
    occupied_thresh: int = 65
    free_thresh: int = 25
    semantics: str = costmap.OCCUPANCY  # what the values mean (`planning.costmap`); a costmap's sets the thresholds

    def __post_init__(self) -> None:
        costmap.check_semantics(self.semantics, "OccupancyGrid.semantics")
        forced = costmap.thresholds(self.semantics)
        if forced is not None:
            object.__setattr__(self, "occupied_thresh", forced[0])
            object.__setattr__(self, "free_thresh", forced[1])
        data = np.asarray(self.data)
        if data.ndim != 2 or data.shape[0] < 1 or data.shape[1] < 1:
            raise InputError(f"OccupancyGrid.data: expected a non-empty 2-D array, got shape {data.shape}")
        if not np.issubdtype(data.dtype, np.integer):
            raise InputError(f"OccupancyGrid.data: expected integers (-1 or 0..100), got dtype {data.dtype}")
        if data.size and (data.min() < -1 or data.max() > 100):
            raise InputError(
                f"OccupancyGrid.data: values must be -1 (unknown) or 0..100, got range [{data.min()}, {data.max()}]"
            )
        res = float(self.resolution)
        if not math.isfinite(res) or res <= 0.0:
            raise InputError(f"OccupancyGrid.resolution: expected a finite positive number of metres, got {res}")
        if len(self.origin) != 3 or not all(math.isfinite(float(v)) for v in self.origin):
            raise InputError(f"OccupancyGrid.origin: expected finite (x, y, yaw), got {self.origin}")
        if not 0 <= self.free_thresh < self.occupied_thresh <= 100:
            raise InputError(
                f"OccupancyGrid thresholds: expected 0 <= free_thresh < occupied_thresh <= 100, "
                f"got free={self.free_thresh}, occupied={self.occupied_thresh}"
            )
        object.__setattr__(self, "data", data.astype(np.int8, copy=False))
        object.__setattr__(self, "resolution", res)
        object.__setattr__(self, "origin", tuple(float(v) for v in self.origin))

    # --- geometry -------------------------------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int]:
        return self.data.shape  # (rows = H, cols = W)

    @property
    def size_m(self) -> tuple[float, float]:
        """(width along x, height along y) in metres."""
        return self.data.shape[1] * self.resolution, self.data.shape[0] * self.resolution

    def world_to_grid(self, xy: np.ndarray) -> np.ndarray:
        """Map-frame points (..., 2) -> continuous grid coordinates (..., 2) as (col, row) in cells, where the
        centre of cell (r, c) is at (c + 0.5, r + 0.5)."""
        xy = np.asarray(xy, dtype=float)
        ox, oy, yaw = self.origin
        d = xy - np.array([ox, oy])
        c, s = math.cos(yaw), math.sin(yaw)
        local = np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], axis=-1)
        return local / self.resolution

    def grid_to_world(self, colrow: np.ndarray) -> np.ndarray:
        """Inverse of `world_to_grid`."""
        colrow = np.asarray(colrow, dtype=float) * self.resolution
        ox, oy, yaw = self.origin
        c, s = math.cos(yaw), math.sin(yaw)
        x = ox + c * colrow[..., 0] - s * colrow[..., 1]
        y = oy + s * colrow[..., 0] + c * colrow[..., 1]
        return np.stack([x, y], axis=-1)

    def world_to_cell(self, xy: np.ndarray) -> np.ndarray:
        """Map-frame points (..., 2) -> integer (row, col) indices (..., 2); may lie outside the grid."""
        g = np.floor(self.world_to_grid(xy)).astype(int)
        return np.stack([g[..., 1], g[..., 0]], axis=-1)

    def cell_centers(self) -> tuple[np.ndarray, np.ndarray]:
        """(X, Y) map-frame coordinates of every cell centre, each of shape (H, W)."""
        rows, cols = np.mgrid[0 : self.shape[0], 0 : self.shape[1]]
        xy = self.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1))
        return xy[..., 0], xy[..., 1]

    def in_bounds(self, cells: np.ndarray) -> np.ndarray:
        cells = np.asarray(cells)
        return (
            (cells[..., 0] >= 0)
            & (cells[..., 0] < self.shape[0])
            & (cells[..., 1] >= 0)
            & (cells[..., 1] < self.shape[1])
        )

    # --- classification -------------------------------------------------------------------------------------------
    def occupied_mask(self) -> np.ndarray:
        return self.data >= self.occupied_thresh

    def free_mask(self) -> np.ndarray:
        return (self.data >= 0) & (self.data <= self.free_thresh)

    def unknown_mask(self) -> np.ndarray:
        return ~(self.occupied_mask() | self.free_mask())

    def with_data(self, data: np.ndarray, origin: tuple[float, float, float] | None = None) -> OccupancyGrid:
        """A grid of the same resolution, thresholds and semantics with other cell values (and origin)."""
        return OccupancyGrid(
            data,
            self.resolution,
            self.origin if origin is None else origin,
            self.occupied_thresh,
            self.free_thresh,
            self.semantics,
        )

    def cost_field(self, unknown_policy: str = "occupied") -> np.ndarray:
        """The soft cost per cell in [0, 1] (`planning.costmap.cost_field`; zeros for an occupancy grid)."""
        return costmap.cost_field(self.data, self.semantics, unknown_policy)

    # --- nav_msgs/OccupancyGrid flat form --------------------------------------------------------------------------
    @classmethod
    def from_msg_arrays(
        cls,
        width: int,
        height: int,
        resolution: float,
        origin: tuple[float, float, float],
        data: np.ndarray | list[int],
        **thresholds: int,
    ) -> OccupancyGrid:
        """From nav_msgs/OccupancyGrid fields: `data` is row-major, length width*height, row 0 at the origin."""
        flat = np.asarray(data)
        if flat.ndim != 1 or flat.size != int(width) * int(height):
            raise InputError(
                f"OccupancyGrid msg: data has {flat.size} values, expected width*height = {int(width) * int(height)}"
            )
        return cls(flat.reshape(int(height), int(width)), resolution, origin, **thresholds)

    # --- local windows (added for the MPC, whose NLP is built for one fixed grid shape) -----------------------------
    def window(self, center_xy: np.ndarray, shape: tuple[int, int]) -> OccupancyGrid:
        """A (H, W) = `shape` sub-grid aligned with this one and centred (to the nearest cell) on `center_xy`.

        Cells beyond this grid's edge are UNKNOWN. The MPC is built once per grid shape, so a robot on a large map
        plans on a fixed-size window around itself.
        """
        h, w = int(shape[0]), int(shape[1])
        if h < 1 or w < 1:
            raise InputError(f"OccupancyGrid.window.shape: expected positive (rows, cols), got {shape}")
        center = np.asarray(center_xy, dtype=float)
        if center.shape != (2,) or not np.all(np.isfinite(center)):
            raise InputError(f"OccupancyGrid.window.center_xy: expected finite (x, y), got {center_xy}")
        g = self.world_to_grid(center)
        c0 = int(np.round(g[0] - w / 2.0))
        r0 = int(np.round(g[1] - h / 2.0))
        out = np.full((h, w), UNKNOWN, dtype=np.int8)
        rs, re = max(r0, 0), min(r0 + h, self.shape[0])
        cs, ce = max(c0, 0), min(c0 + w, self.shape[1])
        if rs < re and cs < ce:
            out[rs - r0 : re - r0, cs - c0 : ce - c0] = self.data[rs:re, cs:ce]
        ox, oy = self.grid_to_world(np.array([c0, r0], dtype=float))
        return self.with_data(out, (float(ox), float(oy), self.origin[2]))

    # --- any grid -> the MPC's fixed window (a costmap of another size, resolution or orientation) ------------------
    def classes(self) -> np.ndarray:
        """Per-cell class as a rank ordered by caution: 0 free, 1 unknown, 2 occupied."""
        return np.where(self.occupied_mask(), 2, np.where(self.free_mask(), 0, 1)).astype(np.int8)

    def coarsened(self, factor: int) -> OccupancyGrid:
        """Cells `factor` times larger, each the most cautious class of the cells it covers (occupied > unknown >
        free), so no obstacle is lost when a fine costmap is resampled; partial blocks at the far edges are kept. A
        free block of a costmap keeps the highest value (soft cost) of its free cells."""
        k = int(factor)
        if k < 1:
            raise InputError(f"OccupancyGrid.coarsened.factor: expected an integer >= 1, got {factor}")
        if k == 1:
            return self
        h, w = self.shape
        hp, wp = -(-h // k) * k, -(-w // k) * k
        ranks = np.zeros((hp, wp), dtype=np.int8)  # padding counts as free: it never wins a block over real cells
        ranks[:h, :w] = self.classes()
        pooled = ranks.reshape(hp // k, k, wp // k, k).max(axis=(1, 3))
        values = _CLASS_VALUES[pooled]
        if self.semantics == costmap.OCCUPANCY:
            return OccupancyGrid(values, self.resolution * k, self.origin)
        free = np.zeros((hp, wp), dtype=np.int8)
        free[:h, :w] = np.where(self.free_mask(), self.data, 0)
        soft = free.reshape(hp // k, k, wp // k, k).max(axis=(1, 3))
        values = np.where(pooled == 0, soft, values).astype(np.int8)
        return OccupancyGrid(values, self.resolution * k, self.origin, semantics=self.semantics)

    def fit_window(self, center_xy: np.ndarray, shape: tuple[int, int], resolution: float) -> OccupancyGrid:
        """This grid seen as an axis-aligned (H, W) = `shape` window of `resolution` cells centred on `center_xy`.

        The MPC's NLP is built for one grid shape and resolution, so every incoming costmap is fitted to it. A grid
        that already has that shape, resolution and no rotation is returned as is (a rolling-window costmap); the same
        resolution without rotation is cropped (`window`); anything else is sampled at the window's cell centres
        (nearest cell; call `coarsened` first for a finer grid so that sampling cannot skip an obstacle). Cells
        beyond this grid are UNKNOWN."""
        h, w = int(shape[0]), int(shape[1])
        same_res = abs(self.resolution - resolution) <= 1e-6 * resolution  # messages carry float32 resolutions
        if same_res and self.origin[2] == 0.0:
            return self if self.shape == (h, w) else self.window(center_xy, (h, w))
        center = np.asarray(center_xy, dtype=float)
        origin = np.round(center / resolution - np.array([w, h]) / 2.0) * resolution  # on the window's lattice
        cols, rows = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
        xy = origin + np.stack([cols, rows], axis=-1) * resolution
        cells = self.world_to_cell(xy)
        inside = self.in_bounds(cells)
        out = np.full((h, w), UNKNOWN, dtype=np.int8)
        out[inside] = self.data[cells[inside][:, 0], cells[inside][:, 1]]
        return OccupancyGrid(
            out,
            resolution,
            (float(origin[0]), float(origin[1]), 0.0),
            self.occupied_thresh,
            self.free_thresh,
            self.semantics,
        )


_CLASS_VALUES = np.array([FREE, UNKNOWN, OCCUPIED], dtype=np.int8)  # `OccupancyGrid.classes` rank -> cell value
