"""Euclidean signed distance field (ESDF) of an occupancy grid.

Convention: `values[r, c]` is the signed distance in metres from the centre of cell (r, c) to the boundary of the
obstacle set, approximated on the grid as (distance between cell centres) - resolution / 2, so the field crosses zero
half-way between a free and an obstacle cell centre. Positive in free space, negative inside obstacles.

Unknown-space policy: `unknown_policy="occupied"` (default, safe: the planner never plans through what it has not
seen) treats unknown cells as obstacles; `"free"` treats them as free. Space outside the grid is unknown and follows
the same policy. Seed 002 §5.2 plans on an occupancy grid with "conservative safety and collision avoidance
constraints"; this field is what the clearance constraint clearance(x_k) >= radius + margin evaluates.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OccupancyGrid

# Nearest obstacle cells `DistanceField.exact_distance` reads a point's exact distance from (the rest proven farther).
EXACT_CANDIDATES = 8

UNKNOWN_POLICIES = ("occupied", "free")


class DistanceField:
    """Signed Euclidean distance (metres) on the cell centres of `grid`, via `scipy.ndimage.distance_transform_edt`."""

    def __init__(self, grid: OccupancyGrid, unknown_policy: str = "occupied") -> None:
        if not isinstance(grid, OccupancyGrid):
            raise InputError(f"DistanceField.grid: expected an OccupancyGrid, got {type(grid).__name__}")
        if unknown_policy not in UNKNOWN_POLICIES:
            raise InputError(
                f"DistanceField.unknown_policy: expected one of {UNKNOWN_POLICIES}, got {unknown_policy!r}"
            )
        self.grid = grid
        self.unknown_policy = unknown_policy
        self.obstacles = self.obstacle_mask(grid, unknown_policy)
        self.values = signed_distance(self.obstacles, grid.resolution, pad_obstacle=unknown_policy == "occupied")
        self._cache: dict = {}

    @staticmethod
    def obstacle_mask(grid: OccupancyGrid, unknown_policy: str = "occupied") -> np.ndarray:
        mask = grid.occupied_mask()
        if unknown_policy == "occupied":
            mask = mask | grid.unknown_mask()
        return mask

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape

    def distance(self, xy: np.ndarray) -> np.ndarray:
        """Signed distance at map-frame points (..., 2), bilinear between cell centres.

        Outside the grid the field continues as the policy says: with "occupied" the outside is an obstacle, so the
        distance drops below zero past the grid edge; with "free" the border value is held.
        """
        xy = np.asarray(xy, dtype=float)
        g = self.grid.world_to_grid(xy)  # (col, row) in cells, cell centre at +0.5
        coords = np.stack([g[..., 1] - 0.5, g[..., 0] - 0.5]).reshape(2, -1)
        d = ndimage.map_coordinates(self.values, coords, order=1, mode="nearest").reshape(xy.shape[:-1])
        if self.unknown_policy == "occupied":
            h, w = self.shape
            ex = np.maximum(np.maximum(-g[..., 0], g[..., 0] - w), 0.0)
            ey = np.maximum(np.maximum(-g[..., 1], g[..., 1] - h), 0.0)
            outside = np.hypot(ex, ey) * self.grid.resolution
            d = np.where(outside > 0, np.minimum(d, 0.0) - outside, d)
        return d

    def padded_values(self, pad: int) -> np.ndarray:
        """`values` with `pad` extra cells on every side, continued outside the grid by `distance`'s policy."""
        h, w = self.shape
        if pad == 0:
            return self.values
        rows, cols = np.mgrid[-pad : h + pad, -pad : w + pad]
        xy = self.grid.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1))
        out = self.distance(xy)
        out[pad:-pad, pad:-pad] = self.values
        return out

    def spline_coefficients(self, pad: int = 3) -> np.ndarray:
        """Cubic B-spline coefficients of the padded field, shape (H + 2 pad, W + 2 pad).

        The MPC's clearance constraint evaluates the spline with these coefficients (they are the NLP parameter the
        map enters through); `spline_distance` is the same spline in numpy.
        """
        key = ("coeffs", pad)
        if key not in self._cache:
            self._cache[key] = ndimage.spline_filter(self.padded_values(pad), order=3, mode="mirror")
        return self._cache[key]

    @property
    def cost_values(self) -> np.ndarray:
        """The grid's soft cost per cell in [0, 1] (`OccupancyGrid.cost_field`: a Nav2 costmap's inflation; zeros for
        an occupancy grid), unknown cells as this field's policy takes them."""
        if "cost" not in self._cache:
            self._cache["cost"] = self.grid.cost_field(self.unknown_policy)
        return self._cache["cost"]

    def cost_spline_coefficients(self, pad: int = 3) -> np.ndarray:
        """Cubic B-spline coefficients of the soft cost on the same padded lattice as `spline_coefficients` (the
        border cells' values continued outward): the parameter the MPC's costmap term reads
        (`MPCConfig.costmap_cost_weight`); `spline_cost` is the same spline in numpy."""
        key = ("cost_coeffs", pad)
        if key not in self._cache:
            padded = np.pad(self.cost_values, pad, mode="edge")
            self._cache[key] = ndimage.spline_filter(padded, order=3, mode="mirror")
        return self._cache[key]

    def spline_cost(self, xy: np.ndarray, pad: int = 3) -> np.ndarray:
        """The smooth soft cost the optimiser sees, at map-frame points (..., 2)."""
        return self._spline_at(self.cost_spline_coefficients(pad), xy, pad)

    def spline_distance(self, xy: np.ndarray, pad: int = 3) -> np.ndarray:
        """The smooth (bicubic interpolating spline) field the optimiser sees, at map-frame points (..., 2)."""
        return self._spline_at(self.spline_coefficients(pad), xy, pad)

    def _spline_at(self, coefficients: np.ndarray, xy: np.ndarray, pad: int) -> np.ndarray:
        xy = np.asarray(xy, dtype=float)
        g = self.grid.world_to_grid(xy)
        h, w = self.shape
        qx = np.clip(g[..., 0] - 0.5 + pad, 1.0, w + 2 * pad - 2.0 - 1e-9)
        qy = np.clip(g[..., 1] - 0.5 + pad, 1.0, h + 2 * pad - 2.0 - 1e-9)
        coords = np.stack([qy, qx]).reshape(2, -1)
        vals = ndimage.map_coordinates(coefficients, coords, order=3, mode="mirror", prefilter=False)
        return vals.reshape(xy.shape[:-1])

    def min_clearance(self, points: np.ndarray) -> float:
        """Smallest signed distance over `points` (K, 2)."""
        return float(np.min(self.distance(points)))

    def exact_distance(self, xy: np.ndarray, reach: float = 0.3) -> np.ndarray:
        """Distance at points (..., 2) to the nearest obstacle cell's square itself, where `distance` says it is
        within `reach` m; `distance` elsewhere (and where it is less: inside obstacles, outside the grid).

        `distance` (centre distance - resolution / 2, bilinear) is exact beside a wall but overestimates towards an
        obstacle's corner, by up to ~0.2 resolution (1 cm on a 5 cm grid): a rotation in place whose sweep kept
        1.4 mm of margin on it hit a box corner (TurtleBot3 Burger, dense-1083). Checks that run a robot at a few
        millimetres from obstacles (the recoveries) use this one."""
        xy = np.asarray(xy, dtype=float)
        d = np.asarray(self.distance(xy), dtype=float)
        near = d < reach
        if not np.any(near):
            return d
        tree, centres = self._obstacle_cells()
        if tree is None:
            return d
        pts = xy[near]  # (P, 2)
        half = 0.5 * self.grid.resolution
        # The k nearest cell centres hold the nearest square wherever the k-th is far enough: a square's distance is
        # at least its centre's less half its diagonal. The rest (rare: k cells within 1 cm of the nearest's ring)
        # are searched over every cell near them.
        # Cells beyond reach + a cell are not wanted (`distance` stands there): the query stops at them (index
        # len(centres), distance inf: the padding row).
        k = min(EXACT_CANDIDATES, len(centres) - 1)
        ring, idx = tree.query(pts, k=k, distance_upper_bound=reach + 2.0 * half)
        ring, idx = ring.reshape(len(pts), k), idx.reshape(len(pts), k)
        exact = _square_distance(pts[:, None, :], centres[idx], half).min(axis=1)
        unsure = (ring[:, -1] - half * np.sqrt(2.0) < exact) & (k < len(centres) - 1)
        if np.any(unsure):
            exact[unsure] = self._exact_brute(pts[unsure], reach)
        d[near] = np.minimum(d[near], exact)
        return d

    def _obstacle_cells(self) -> tuple[cKDTree | None, np.ndarray]:
        """A k-d tree over the obstacle cells' centres (map frame), and the centres with a last row at infinity (what
        a query's missing neighbours index); built once per field."""
        if "obstacle_cells" not in self._cache:
            rows, cols = np.nonzero(self.obstacles)
            centres = self.grid.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1).astype(float))
            tree = cKDTree(centres) if rows.size else None
            self._cache["obstacle_cells"] = (tree, np.concatenate([centres, np.full((1, 2), np.inf)]))
        return self._cache["obstacle_cells"]

    def _exact_brute(self, pts: np.ndarray, reach: float) -> np.ndarray:
        """`exact_distance` at points (P, 2) over every obstacle cell within reach of their bounding box."""
        res = self.grid.resolution
        grow = reach + res
        (x0, y0), (x1, y1) = pts.min(axis=0) - grow, pts.max(axis=0) + grow
        corners = self.grid.world_to_cell(np.array([[x0, y0], [x1, y0], [x0, y1], [x1, y1]]))  # a grid may be turned
        h, w = self.shape
        r0, c0 = np.maximum(corners.min(axis=0), 0)
        r1, c1 = np.minimum(corners.max(axis=0) + 1, (h, w))
        rows, cols = np.nonzero(self.obstacles[r0:r1, c0:c1])
        if rows.size == 0:
            return np.full(len(pts), np.inf)
        centres = self.grid.grid_to_world(np.stack([cols + c0 + 0.5, rows + r0 + 0.5], axis=-1))  # (C, 2)
        exact = np.empty(len(pts))
        for k in range(0, len(pts), 256):  # bounded memory: 256 points x the cells at a time
            exact[k : k + 256] = _square_distance(pts[k : k + 256, None, :], centres[None], 0.5 * res).min(axis=1)
        return exact


def _square_distance(points: np.ndarray, centres: np.ndarray, half: float) -> np.ndarray:
    """Distance from `points` to the axis-aligned squares of half-side `half` at `centres` (broadcast, last axis 2)."""
    gap = np.maximum(np.abs(points - centres) - half, 0.0)
    return np.hypot(gap[..., 0], gap[..., 1])


def signed_distance(obstacles: np.ndarray, resolution: float, pad_obstacle: bool = True) -> np.ndarray:
    """Signed distance (metres) from each cell centre to the obstacle boundary; see the module docstring.

    `pad_obstacle` surrounds the grid with a ring of obstacle cells (the outside is unknown and treated as occupied).
    With no obstacle at all the distance is unbounded; we return the grid diagonal, which is larger than any
    distance the planner can query inside the grid.
    """
    obstacles = np.asarray(obstacles, dtype=bool)
    if obstacles.ndim != 2:
        raise InputError(f"signed_distance.obstacles: expected a 2-D mask, got shape {obstacles.shape}")
    if not resolution > 0:
        raise InputError(f"signed_distance.resolution: expected > 0, got {resolution}")
    mask = np.pad(obstacles, 1, constant_values=True) if pad_obstacle else obstacles
    if not mask.any():
        diag = float(np.hypot(*obstacles.shape)) * resolution
        return np.full(obstacles.shape, diag)
    outside = ndimage.distance_transform_edt(~mask) * resolution  # free cell -> nearest obstacle centre
    if mask.all():  # no free cell: every point is deep inside; the depth is unbounded, use the diagonal
        inside = np.full(mask.shape, float(np.hypot(*mask.shape)) * resolution)
    else:
        inside = ndimage.distance_transform_edt(mask) * resolution
    half = 0.5 * resolution
    values = np.where(mask, -(inside - half), outside - half)
    if pad_obstacle:
        values = values[1:-1, 1:-1]
    return values.astype(float)
