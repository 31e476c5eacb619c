"""Wall positions finer than a cell: the lidar returns about each face cell, for the distance field.

An occupancy grid (a costmap, our fused window) marks a cell when a return falls in it, and the distance field takes
the whole cell as obstacle (`planning.esdf`: centre distance less half a cell), so a wall face anywhere inside a 5 cm
cell reads at the cell's near face: up to a cell nearer than it is, 2.5 cm on average where the grid's lattice is not
the world's (a drifting odometry frame's never is). The dense worlds' 0.6 m lanes leave a 0.43 m wide Jackal 2.5-6 cm a
side: the lattice took most of it (docs/realism.md, "the grid's lattice"). The returns themselves say where the
surface is. `ReturnMeans` keeps, per cell of the global lattice (a window around the robot), the running sums of the
returns that fell in it, forgetting past `SurfaceConfig.max_count` returns so that a drifting frame is followed.
`face_points` makes a point of each *face cell* (occupied, open on one side) from the returns across the face in it,
in front of it and behind it -- a cell boundary cuts the noise's scatter, so one cell's own mean lies deeper than the
face -- and `DistanceField(grid, policy, surfaces)` takes such a cell, with at least `min_count` returns, as that point
less its uncertainty: `sigmas` standard errors of the mean of the lidar's range noise (sigma / sqrt(count)). Corners,
thin walls and cells with no such point keep the whole cell, so what was never measured stays as conservative as
before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import MAX_COORDINATE_M, InputError, is_real
from mnemo_mpc.planning.grid import OccupancyGrid

MAX_RETURNS = 100_000  # returns one scan may bring (a 2-D lidar has ~10^3 beams): the controller's and the node's bound


@dataclass(frozen=True)
class SurfaceConfig:
    """The returns' memory: the lidar's range noise (metres, one sigma), returns before a cell's mean counts, the
    most returns a mean weighs (older ones fade: a frame that drifts is followed), standard errors taken off, and the
    window kept around the robot (metres a side; at least the planning window's)."""

    noise_m: float = 0.01
    min_count: int = 3
    max_count: int = 20
    sigmas: float = 2.0
    size_m: float = 8.0
    # Cells farther than this from the whole cells keep the whole cells' distance: the room a point gives (under a
    # cell) matters where the MPC's clearance constraint does (a footprint disc's radius + margin, ~0.3 m), and the
    # refinement's cost goes with the cells it runs on (an open world's free window: 5 ms a step, not 1)
    band_m: float = 0.5

    def __post_init__(self) -> None:
        if not (is_real(self.noise_m) and 0 <= self.noise_m <= 1.0):
            raise InputError(f"SurfaceConfig.noise_m: expected metres in [0, 1], got {self.noise_m!r}")
        for name in ("min_count", "max_count"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 10_000:
                raise InputError(f"SurfaceConfig.{name}: expected an integer in [1, 10000], got {value!r}")
        if self.min_count > self.max_count:
            raise InputError(f"SurfaceConfig: expected min_count <= max_count, got {self.min_count} > {self.max_count}")
        if not (is_real(self.sigmas) and 0 <= self.sigmas <= 10):
            raise InputError(f"SurfaceConfig.sigmas: expected [0, 10], got {self.sigmas!r}")
        if not (is_real(self.band_m) and 0 <= self.band_m <= 100):
            raise InputError(f"SurfaceConfig.band_m: expected metres in [0, 100], got {self.band_m!r}")
        if not (is_real(self.size_m) and 0 < self.size_m <= 100):
            raise InputError(f"SurfaceConfig.size_m: expected metres in (0, 100], got {self.size_m!r}")


@dataclass(frozen=True)
class CellSurfaces:
    """Per cell of one grid: the surface point (map frame, NaN where the cell holds too few returns), how much nearer
    than it the surface may be (metres), and how far from the whole cells the field takes the points."""

    points: np.ndarray  # (H, W, 2)
    uncertainty: np.ndarray  # (H, W)
    band_m: float = math.inf  # refined out to this whole-cell distance (`SurfaceConfig.band_m`)

    @property
    def known(self) -> np.ndarray:
        return np.isfinite(self.points[..., 0])


def shifted(array: np.ndarray, d_col: int, d_row: int, fill: float | bool = 0) -> np.ndarray:
    """A rolling window's `array` (rows, cols last two axes) after its origin moved by (d_col, d_row) cells:
    new[..., r, c] = old[..., r + d_row, c + d_col], `fill` where the old window had nothing."""
    h, w = array.shape[-2:]
    out = np.full_like(array, fill)
    if abs(d_col) < w and abs(d_row) < h:
        src_r, dst_r = slice(max(d_row, 0), h + min(d_row, 0)), slice(max(-d_row, 0), h + min(-d_row, 0))
        src_c, dst_c = slice(max(d_col, 0), w + min(d_col, 0)), slice(max(-d_col, 0), w + min(-d_col, 0))
        out[..., dst_r, dst_c] = array[..., src_r, src_c]
    return out


# A face cell's neighbours across its open side (front) and behind it: (row, col) steps for each open side +x, -x,
# +y, -y, and the axis (0 = x, 1 = y) the face's position is measured on
_NORMALS = (((0, 1), 0), ((0, -1), 0), ((1, 0), 1), ((-1, 0), 1))


def face_points(sums: np.ndarray, occupied: np.ndarray, resolution: float) -> tuple[np.ndarray, np.ndarray]:
    """(count (H, W), offset (H, W, 2) of the surface point from each cell's lower corner; NaN where none) from
    per-cell return sums (3, H, W: n, sum u, sum v; u, v a return's offset from its own cell's lower corner).

    A point is made for a *face cell* only: occupied, with exactly one of its four sides open (not occupied). Across
    the face its position is the mean of the returns in the cell, the one in front of it and the one behind; along
    the face, the cell's own. Why three cells: returns scatter about a face by the range noise, and a cell boundary
    cuts that scatter -- the face's own cell holds the returns behind the face and those in front as far as its
    boundary, the rest fall in the cell in front -- so the cell's own mean lies deeper than the face, by 0.8 sigma
    where the face is on the boundary (1.6 cm for the Jackal's lidar, more than its lanes leave a side). Why along
    the normal only, and face cells only: at a convex corner, or a wall seen from both sides, returns of two faces mix
    into a point on neither (inside the wall: optimistic), and a 3 x 3 neighbourhood next to a corner takes the other
    face's returns in. On dense-1020 (realistic Jackal, mapless) 44 % of the points of each cell's own
    mean lay over 1 cm inside the true wall, 5.5 % of these (docs/realism.md, eighteenth session)."""
    h, w = occupied.shape
    count = np.zeros((h, w))
    offset = np.full((h, w, 2), np.nan)
    padded = np.pad(sums, ((0, 0), (1, 1), (1, 1)))
    closed = np.pad(occupied, 1, constant_values=True)

    def at(array: np.ndarray, dr: int, dc: int) -> np.ndarray:
        return array[..., 1 + dr : 1 + dr + h, 1 + dc : 1 + dc + w]

    open_sides = [~at(closed, dr, dc) for (dr, dc), _ in _NORMALS]
    face = occupied & (np.sum(open_sides, axis=0) == 1) & (sums[0] > 0)
    for is_open, ((dr, dc), axis) in zip(open_sides, _NORMALS, strict=True):
        cells = face & is_open
        if not np.any(cells):
            continue
        n, across = np.zeros((h, w)), np.zeros((h, w))
        for k in (-1, 0, 1):  # behind, the cell, in front
            m = at(padded, k * dr, k * dc)
            n += m[0]
            across += m[1 + axis] + k * (dc, dr)[axis] * resolution * m[0]  # its corner from this cell's
        count[cells] = n[cells]
        offset[cells, axis] = across[cells] / n[cells]
        offset[cells, 1 - axis] = sums[2 - axis][cells] / sums[0][cells]
    return count, offset


class ReturnMeans:
    """The running mean of the lidar returns per cell of the lattice of `resolution` (origin at a multiple of it), in
    a window of `config.size_m` that follows the robot (module docstring)."""

    def __init__(self, resolution: float, config: SurfaceConfig | None = None) -> None:
        if not (is_real(resolution) and resolution > 0):
            raise InputError(f"ReturnMeans.resolution: expected metres > 0, got {resolution!r}")
        self.resolution = float(resolution)
        self.config = config or SurfaceConfig()
        self.cells = max(int(math.ceil(self.config.size_m / self.resolution)), 4)
        # per cell: n, sum u, sum v, (u, v) a return's offset from its cell's lower corner (small numbers whatever
        # the frame's coordinates); [row = y, col = x]
        self.sums = np.zeros((3, self.cells, self.cells))
        self.origin_index: np.ndarray | None = None  # (ix, iy) of cell (0, 0) on the lattice

    def reset(self) -> None:
        self.sums[:] = 0.0
        self.origin_index = None

    def integrate(self, returns: np.ndarray, centre_xy: np.ndarray) -> None:
        """Add one scan's `returns` (K, 2; the grid's frame), the window centred on `centre_xy` (the robot)."""
        pts = np.asarray(returns, dtype=float).reshape(-1, 2)
        pts = pts[np.all(np.abs(pts) <= MAX_COORDINATE_M, axis=1)]  # NaN, inf and absurd returns dropped
        origin = np.floor(np.asarray(centre_xy, dtype=float)[:2] / self.resolution).astype(np.int64) - self.cells // 2
        if self.origin_index is None:
            self.origin_index = origin
        elif np.any(origin != self.origin_index):
            d_col, d_row = (origin - self.origin_index).tolist()
            self.sums, self.origin_index = shifted(self.sums, d_col, d_row, 0.0), origin
        ij = np.floor(pts / self.resolution).astype(np.int64) - self.origin_index
        inside = np.all((ij >= 0) & (ij < self.cells), axis=1)
        ij, pts = ij[inside], pts[inside]
        flat = ij[:, 1] * self.cells + ij[:, 0]
        n = self.cells * self.cells
        u, v = (pts - (ij + self.origin_index) * self.resolution).T
        for k, values in enumerate((np.ones(len(pts)), u, v)):
            self.sums[k].reshape(-1)[:] += np.bincount(flat, weights=values, minlength=n)
        count = self.sums[0]
        over = count > self.config.max_count
        if np.any(over):
            self.sums[:, over] *= self.config.max_count / count[over]

    def surfaces(self, grid: OccupancyGrid) -> CellSurfaces | None:
        """The surface points of `grid`'s cells; None when the grid is not on this lattice (another resolution, a
        turned or off-lattice origin) or nothing was integrated."""
        if self.origin_index is None or not math.isclose(grid.resolution, self.resolution, rel_tol=1e-9):
            return None
        x0, y0, yaw = grid.origin
        offset = np.array([x0, y0]) / self.resolution
        if yaw != 0.0 or np.any(np.abs(offset - np.rint(offset)) > 1e-6):
            return None
        d_col, d_row = (np.rint(offset).astype(np.int64) - self.origin_index).tolist()
        h, w = grid.shape
        block = np.zeros((3, h, w))
        r0, c0 = max(d_row, 0), max(d_col, 0)
        r1, c1 = min(d_row + h, self.cells), min(d_col + w, self.cells)
        if r0 < r1 and c0 < c1:
            block[:, r0 - d_row : r1 - d_row, c0 - d_col : c1 - d_col] = self.sums[:, r0:r1, c0:c1]
        c = self.config
        count, offset = face_points(block, grid.occupied_mask(), self.resolution)
        known = np.isfinite(offset[..., 0]) & (count >= c.min_count)
        rows, cols = np.nonzero(known)
        points = np.full((h, w, 2), np.nan)
        points[rows, cols] = np.stack([cols, rows], axis=-1) * self.resolution + np.array([x0, y0]) + offset[rows, cols]
        uncertainty = np.zeros((h, w))
        uncertainty[rows, cols] = c.sigmas * c.noise_m / np.sqrt(count[rows, cols])
        return CellSurfaces(points, uncertainty, c.band_m)
