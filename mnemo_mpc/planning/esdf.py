"""Euclidean signed distance field (ESDF) of an occupancy grid.

Convention: `values[r, c]` is the signed distance in metres from the centre of cell (r, c) to the boundary of the
obstacle set, approximated on the grid as (distance between cell centres) - resolution / 2, so the field crosses zero
half-way between a free and an obstacle cell centre. Positive in free space, negative inside obstacles.

Unknown-space policy: `unknown_policy="occupied"` (default, safe: the planner never plans through what it has not
seen) treats unknown cells as obstacles; `"free"` treats them as free. Space outside the grid is unknown and follows
the same policy. Seed 002 §5.2 plans on an occupancy grid with "conservative safety and collision avoidance
constraints"; this field is what the clearance constraint clearance(x_k) >= radius + margin evaluates.

With `CellSurfaces` (`planning.surfaces`: a face cell's point from the lidar returns) an obstacle cell holding one is
that point less its uncertainty, never nearer than the whole cell: a wall face inside a cell reads where the returns
put it, not at the cell's near face. `cells_only` is the field without them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
from scipy import ndimage
from scipy.spatial import cKDTree

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.surfaces import CellSurfaces

# Nearest obstacle cells `DistanceField.exact_distance` reads a point's exact distance from (the rest proven farther).
EXACT_CANDIDATES = 8

UNKNOWN_POLICIES = ("occupied", "free")

# Passes of the nearest surface point's propagation (`DistanceField._refined_values`)
PROPAGATION_PASSES = 2


class DistanceField:
    """Signed Euclidean distance (metres) on the cell centres of `grid`, via `scipy.ndimage.distance_transform_edt`."""

    def __init__(
        self, grid: OccupancyGrid, unknown_policy: str = "occupied", surfaces: CellSurfaces | None = None
    ) -> None:
        if not isinstance(grid, OccupancyGrid):
            raise InputError(f"DistanceField.grid: expected an OccupancyGrid, got {type(grid).__name__}")
        if unknown_policy not in UNKNOWN_POLICIES:
            raise InputError(
                f"DistanceField.unknown_policy: expected one of {UNKNOWN_POLICIES}, got {unknown_policy!r}"
            )
        self.grid = grid
        self.unknown_policy = unknown_policy
        self.obstacles = self.obstacle_mask(grid, unknown_policy)
        self.cell_values = signed_distance(self.obstacles, grid.resolution, pad_obstacle=unknown_policy == "occupied")
        # Obstacle cells with a measured surface point (`planning.surfaces`) are that point, less its uncertainty
        self.surfaces, self.refined = None, np.zeros(grid.shape, bool)
        if surfaces is not None:
            if surfaces.points.shape != (*grid.shape, 2) or surfaces.uncertainty.shape != grid.shape:
                raise InputError(
                    f"DistanceField.surfaces: expected points {(*grid.shape, 2)} and uncertainty {grid.shape}, got "
                    f"{surfaces.points.shape} and {surfaces.uncertainty.shape}"
                )
            self.refined = self.obstacles & surfaces.known
            if self.refined.any():
                self.surfaces = surfaces
        self._cache: dict = {}

    @property
    def values(self) -> np.ndarray:
        """The field at the cell centres (H, W): the whole cells' (`cell_values`), the refined cells taken as their
        surface points where there are any (computed at the first use: a step that only recovers never needs it)."""
        if self.surfaces is None:
            return self.cell_values
        if "values" not in self._cache:
            self._cache["values"] = self._refined_values(self.unknown_policy == "occupied")
        return self._cache["values"]

    def _refined_values(self, pad: bool) -> np.ndarray:
        """`values` with the refined cells taken as their surface points: at free cells the least of the distance to
        the other obstacle cells (centre distance less half a cell) and to the points (less their uncertainty), and
        never less than the whole cells' field. The nearest point is searched from the nearest refined cell's (by
        centre) on, among those the 8 neighbours chose (`PROPAGATION_PASSES` passes, as vector distance transforms
        propagate): exact but for a rare cell between two clusters (under 1 % of a cluttered grid's cells, by at most
        ~1.5 cm, as the whole cells' rule is towards a corner; the recoveries' exact distance has no such error).
        Obstacle cells, and free cells `CellSurfaces.band_m` or farther from the whole cells, keep their values."""
        res = self.grid.resolution
        h, w = self.shape
        mask = self.obstacles & ~self.refined
        if pad:
            mask = np.pad(mask, 1, constant_values=True)
        squares = ndimage.distance_transform_edt(~mask) * res - 0.5 * res if mask.any() else np.full(mask.shape, np.inf)
        squares = squares[1:-1, 1:-1] if pad else squares
        band = ~self.obstacles & (self.cell_values < self.surfaces.band_m)
        rows, cols = np.mgrid[0:h, 0:w]
        centres = self.grid.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1).astype(float)).reshape(-1, 2)
        # Per cell (flat, and a last row for "no cell": a point at infinity): the point and its uncertainty
        none = h * w
        points = np.full((none + 1, 3), np.inf)
        points[:-1, :2] = np.where(self.refined[..., None], self.surfaces.points, np.inf).reshape(-1, 2)
        points[:, 2] = np.append(np.where(self.refined, self.surfaces.uncertainty, 0.0).ravel(), 0.0)

        def to_point(cells: np.ndarray, k: np.ndarray) -> np.ndarray:
            p, c = points[k], centres[cells]
            return np.hypot(c[:, 0] - p[:, 0], c[:, 1] - p[:, 1]) - p[:, 2]

        r, c = ndimage.distance_transform_edt(~self.refined, return_distances=False, return_indices=True)
        # The point each cell chose (flat index; "no cell" outside the band and off the grid): the nearest refined
        # cell's (by centre) to begin with, a refined cell its own
        choice = np.full((h, w), none)
        choice[band] = (r * w + c)[band]
        choice[self.refined] = np.flatnonzero(self.refined)
        best = np.full(h * w, np.inf)
        cells = np.flatnonzero(band)
        best[cells] = to_point(cells, choice.reshape(-1)[cells])
        chosen = np.full((h + 2, w + 2), none)
        for _ in range(PROPAGATION_PASSES):
            chosen[1:-1, 1:-1] = choice
            for dr in (-1, 0, 1):
                for dc in (-1, 0, 1):
                    if dr or dc:
                        offer = chosen[1 + dr : 1 + dr + h, 1 + dc : 1 + dc + w]
                        offered = band & (offer != choice)
                        at, k = np.flatnonzero(offered), offer[offered]
                        d = to_point(at, k)
                        better = d < best[at]
                        best[at[better]] = d[better]
                        choice.reshape(-1)[at[better]] = k[better]
        best = best.reshape(h, w)
        values = self.cell_values.copy()
        values[band] = np.maximum(np.minimum(squares[band], best[band]), self.cell_values[band])
        return values

    @property
    def cells_only(self) -> DistanceField:
        """This field without the surface points: every obstacle cell whole (itself when it has none)."""
        if self.surfaces is None:
            return self
        if "cells_only" not in self._cache:
            cells = copy.copy(self)  # the whole cells' values are this field's own: not computed again
            cells.surfaces, cells.refined, cells._cache = None, np.zeros(self.shape, bool), {}
            self._cache["cells_only"] = cells
        return self._cache["cells_only"]

    @staticmethod
    def obstacle_mask(grid: OccupancyGrid, unknown_policy: str = "occupied") -> np.ndarray:
        mask = grid.occupied_mask()
        if unknown_policy == "occupied":
            mask = mask | grid.unknown_mask()
        return mask

    @property
    def shape(self) -> tuple[int, int]:
        return self.cell_values.shape

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
        """Distance at points (..., 2) to the nearest obstacle cell's square itself (a refined cell: its surface
        point less its uncertainty, never nearer than its square), where `distance` says it is within `reach` m;
        `distance` elsewhere (and where it is less: inside obstacles, outside the grid).

        `distance` (centre distance - resolution / 2, bilinear) is exact beside a wall but overestimates towards an
        obstacle's corner, by up to ~0.2 resolution (1 cm on a 5 cm grid): a rotation in place whose sweep kept
        1.4 mm of margin on it hit a box corner (TurtleBot3 Burger, dense-1083). Checks that run a robot at a few
        millimetres from obstacles (the recoveries) use this one."""
        xy = np.asarray(xy, dtype=float)
        d = np.asarray(self.distance(xy), dtype=float)
        near = d < reach
        if not np.any(near):
            return d
        tree, obstacles = self._obstacle_cells()
        if tree is None:
            return d
        pts = xy[near]  # (P, 2)
        half = 0.5 * self.grid.resolution
        # The k nearest cell centres hold the nearest square wherever the k-th is far enough: a square's distance is
        # at least its centre's less half its diagonal. The rest (rare: k cells within 1 cm of the nearest's ring)
        # are searched over every cell near them.
        # Cells beyond reach + a cell are not wanted (`distance` stands there): the query stops at them (index
        # len(centres), distance inf: the padding row).
        k = min(EXACT_CANDIDATES, len(obstacles.centres) - 1)
        ring, idx = tree.query(pts, k=k, distance_upper_bound=reach + 2.0 * half)
        ring, idx = ring.reshape(len(pts), k), idx.reshape(len(pts), k)
        exact = obstacles.distance(pts[:, None, :], idx).min(axis=1)
        unsure = (ring[:, -1] - half * np.sqrt(2.0) < exact) & (k < len(obstacles.centres) - 1)
        if np.any(unsure):
            exact[unsure] = self._exact_brute(pts[unsure], reach)
        d[near] = np.minimum(d[near], exact)
        return d

    def _obstacle_cells(self) -> tuple[cKDTree | None, _Obstacles]:
        """A k-d tree over the obstacle cells' centres (map frame), and the cells (`_Obstacles`) with a last row at
        infinity (what a query's missing neighbours index); built once per field."""
        if "obstacle_cells" not in self._cache:
            rows, cols = np.nonzero(self.obstacles)
            centres = self.grid.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1).astype(float))
            points, slack = centres.copy(), np.zeros(len(rows))
            if self.surfaces is not None:
                refined = self.refined[rows, cols]
                points[refined] = self.surfaces.points[rows[refined], cols[refined]]
                slack[refined] = self.surfaces.uncertainty[rows[refined], cols[refined]]
            far = np.full((1, 2), np.inf)
            obstacles = _Obstacles(
                np.concatenate([centres, far]),
                np.concatenate([points, far]),
                np.append(slack, 0.0),
                np.append(self.refined[rows, cols], False),
                0.5 * self.grid.resolution,
            )
            self._cache["obstacle_cells"] = (cKDTree(centres) if rows.size else None, obstacles)
        return self._cache["obstacle_cells"]

    def _exact_brute(self, pts: np.ndarray, reach: float) -> np.ndarray:
        """`exact_distance` at points (P, 2) over every obstacle cell within reach of their bounding box."""
        _, obstacles = self._obstacle_cells()
        grow = reach + self.grid.resolution
        lo, hi = pts.min(axis=0) - grow, pts.max(axis=0) + grow
        near = np.flatnonzero(np.all((obstacles.centres >= lo) & (obstacles.centres <= hi), axis=1))
        if near.size == 0:
            return np.full(len(pts), np.inf)
        exact = np.empty(len(pts))
        for k in range(0, len(pts), 256):  # bounded memory: 256 points x the cells at a time
            exact[k : k + 256] = obstacles.distance(pts[k : k + 256, None, :], near[None]).min(axis=1)
        return exact


@dataclass(frozen=True)
class _Obstacles:
    """A field's obstacle cells for exact distances: centres, surface points (the centre where not refined), the
    points' uncertainty, which are refined, and half a cell."""

    centres: np.ndarray
    points: np.ndarray
    slack: np.ndarray
    refined: np.ndarray
    half: float

    def distance(self, xy: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """From points `xy` (broadcast against `idx`, last axis 2) to the obstacles `idx`: the cell's square, or a
        refined cell's point less its uncertainty, never nearer than its square."""
        square = _square_distance(xy, self.centres[idx], self.half)
        point = np.hypot(*np.moveaxis(xy - self.points[idx], -1, 0)) - self.slack[idx]
        return np.where(self.refined[idx], np.maximum(point, square), square)


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
