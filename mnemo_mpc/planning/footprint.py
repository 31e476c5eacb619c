"""Robot footprints (Nav2's convention) and the covering discs the MPC enforces clearance with.

A footprint is a convex polygon in the robot frame (x forward, y left; metres), given as Nav2 gives it
(`footprint: "[[x, y], ...]"`), a rectangle (length x width, optionally offset from the rotation centre), or a circle
of `robot_radius` about the rotation centre. The rotation centre (the origin of the robot frame) must lie inside.

The MPC cannot constrain a polygon against a distance field directly; it constrains discs: the robot is collision-free
when, for every covering disc (o_d, r_d), esdf(p + R(yaw) o_d) >= r_d (+ the safety margin). `Footprint.cover(e)`
chooses the discs so that

- their union covers the footprint exactly (every point of the polygon lies in some disc; see `_sample_grid`), and
- their union sticks out of the footprint by at most `e`: every point of a disc is within `e` of the polygon. This is
  the error bound: the disc constraints are conservative by at most `e` (the robot keeps up to `e` more clearance
  than the polygon needs, never less).

How: a disc centred at an interior point c with radius r <= d(c) + e, where d(c) is c's distance to the polygon's
boundary, sticks out by at most e (a point p of the disc is within r - d(c) of the point c + d(c) (p - c)/|p - c|,
which lies in the polygon since B(c, d(c)) does). Candidates are such discs on a grid of centres inside the polygon;
the fewest that cover a dense sample of the polygon is a minimum set cover, solved exactly as a 0-1 integer programme
(scipy's HiGHS `milp`); each chosen disc is then shrunk to what its share of the cover needs. Centres are not tied to
the long axis: discs on the axis cover the long sides well but cannot cover a corner closer than (sqrt 2 - 1) times
the half-width (0.089 m for a 0.43 m wide base), so a tight bound needs small discs in the corners, which a general
cover finds by itself. `cover_error` measures the excess of any disc set by sampling the disc boundaries.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError

# Default bound on how far the covering discs may stick out of the footprint [m]: the MPC then sees a rectangular base
# at most 2 cm wider and longer than it is (6, 8 and 12 discs for the TurtleBot3 Burger, Waffle and the Jackal).
DEFAULT_COVER_TOLERANCE_M = 0.02
# Candidate disc centres: a grid of this many steps across the polygon's narrowest width (see `_cover`).
CANDIDATES_ACROSS = 24
# Coverage samples are spaced so that every point of the polygon is within tolerance / SLACK_FRACTION of one.
SLACK_FRACTION = 4.0
MAX_SAMPLES = 40_000  # bounds the set-cover problem's size (tolerance too small for the footprint otherwise)
BOUNDARY_SAMPLES = 1440  # points per disc boundary in `cover_error`


@dataclass(frozen=True)
class DiscCover:
    """Discs (K, 3) = (ox, oy, r) in the robot frame whose union covers the footprint; `tolerance` is the stated
    bound on how far the union sticks out of the footprint, `error` that excess as measured by `cover_error`."""

    discs: np.ndarray
    tolerance: float
    error: float

    @property
    def count(self) -> int:
        return int(self.discs.shape[0])

    @property
    def lateral_extent(self) -> float:
        """Width of the discs' union across the robot (max (oy + r) - min (oy - r)) [m]: what a gap must exceed."""
        d = self.discs
        return float(np.max(d[:, 1] + d[:, 2]) - np.min(d[:, 1] - d[:, 2]))


@dataclass(frozen=True)
class Footprint:
    """A convex polygon (counter-clockwise `vertices`, robot frame) or, when `vertices` is empty, a circle of
    `radius` about the rotation centre. Build with `circle`, `rectangle`, `polygon` or `parse_footprint`."""

    vertices: tuple[tuple[float, float], ...] = ()
    radius: float = 0.0

    def __post_init__(self) -> None:
        if not self.vertices:
            if not (math.isfinite(self.radius) and self.radius > 0):
                raise InputError(f"footprint: expected a circle radius > 0, got {self.radius}")

    # --- construction ---------------------------------------------------------------------------------------------
    @classmethod
    def circle(cls, radius: float) -> Footprint:
        """A circular footprint of `radius` about the rotation centre (Nav2's `robot_radius`)."""
        return cls((), float(radius))

    @classmethod
    def rectangle(cls, length: float, width: float, x_offset: float = 0.0) -> Footprint:
        """A `length` (along x) by `width` (along y) rectangle whose centre is `x_offset` ahead of the rotation
        centre (negative: the body extends further behind the axle, as on a TurtleBot3)."""
        if not (math.isfinite(length) and math.isfinite(width) and length > 0 and width > 0):
            raise InputError(f"footprint rectangle: expected length > 0 and width > 0, got {length} x {width}")
        hx, hy = 0.5 * length, 0.5 * width
        return cls.polygon([(x_offset - hx, -hy), (x_offset + hx, -hy), (x_offset + hx, hy), (x_offset - hx, hy)])

    @classmethod
    def polygon(cls, points: Any) -> Footprint:
        """A convex polygon from its vertices in order (either orientation, any start; stored counter-clockwise from
        the vertex of least x (then y), without collinear or repeated vertices).
        InputError when there are fewer than 3 vertices, a non-finite one, a non-convex or self-intersecting
        outline, or the rotation centre (0, 0) is not strictly inside."""
        try:
            pts = np.asarray(points, dtype=float)
        except (TypeError, ValueError) as exc:
            raise InputError(f"footprint: expected a list of [x, y] vertices, got {points!r}") from exc
        if pts.ndim != 2 or pts.shape[1] != 2 or pts.shape[0] < 3:
            raise InputError(f"footprint: expected at least 3 [x, y] vertices, got shape {pts.shape}")
        if not np.all(np.isfinite(pts)):
            raise InputError(f"footprint: vertices must be finite numbers, got {pts.tolist()}")
        area2 = float(np.sum(pts[:, 0] * np.roll(pts[:, 1], -1) - np.roll(pts[:, 0], -1) * pts[:, 1]))
        scale = float(np.max(np.abs(pts)))
        if abs(area2) <= 1e-12 * max(scale, 1e-12) ** 2:
            raise InputError(f"footprint: the vertices enclose no area: {pts.tolist()}")
        if area2 < 0:
            pts = pts[::-1]
        edges = np.roll(pts, -1, axis=0) - pts
        keep = np.linalg.norm(edges, axis=1) > 1e-12 * scale  # repeated vertices
        pts = pts[keep]
        edges = np.roll(pts, -1, axis=0) - pts
        prev = np.roll(edges, 1, axis=0)
        cross = prev[:, 0] * edges[:, 1] - prev[:, 1] * edges[:, 0]
        tol = 1e-9 * scale * scale
        if np.any(cross < -tol):
            raise InputError(f"footprint: expected a convex polygon, got {pts.tolist()} (not convex)")
        turning = np.arctan2(cross, np.sum(prev * edges, axis=1))
        if abs(float(np.sum(turning)) - 2 * math.pi) > 1e-6:
            raise InputError(f"footprint: the outline {pts.tolist()} crosses itself (winds more than once)")
        pts = pts[cross > tol]  # collinear vertices add nothing
        first = int(np.lexsort((pts[:, 1], pts[:, 0]))[0])
        pts = np.roll(pts, -first, axis=0)  # one canonical start (least x, then y): equal polygons compare equal
        fp = cls(tuple((float(x), float(y)) for x, y in pts))
        if fp.signed_distance(np.zeros((1, 2)))[0] >= 0:
            raise InputError(
                f"footprint: the rotation centre (0, 0) must be inside the polygon {fp.vertices} (base_link frame)"
            )
        return fp

    # --- geometry -------------------------------------------------------------------------------------------------
    @property
    def is_circle(self) -> bool:
        return not self.vertices

    @property
    def points(self) -> np.ndarray:
        """The vertices (M, 2), counter-clockwise; empty (0, 2) for a circle."""
        return np.asarray(self.vertices, dtype=float).reshape(-1, 2)

    @property
    def circumscribed_radius(self) -> float:
        """Largest distance from the rotation centre to the footprint: the disc the robot sweeps turning in place."""
        if self.is_circle:
            return float(self.radius)
        return float(np.max(np.linalg.norm(self.points, axis=1)))

    @property
    def inscribed_radius(self) -> float:
        """Distance from the rotation centre to the footprint's boundary."""
        return float(-self.signed_distance(np.zeros((1, 2)))[0])

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(x_min, x_max, y_min, y_max) in the robot frame."""
        if self.is_circle:
            r = float(self.radius)
            return (-r, r, -r, r)
        p = self.points
        return (float(p[:, 0].min()), float(p[:, 0].max()), float(p[:, 1].min()), float(p[:, 1].max()))

    @property
    def min_width(self) -> float:
        """The footprint's narrowest width (for a convex polygon: the least extent across one of its edges)."""
        if self.is_circle:
            return 2.0 * float(self.radius)
        _, normals, _ = self._edges()
        proj = self.points @ normals.T  # (M, E)
        return float(np.min(proj.max(axis=0) - proj.min(axis=0)))

    @property
    def area(self) -> float:
        if self.is_circle:
            return math.pi * float(self.radius) ** 2
        p = self.points
        return 0.5 * float(np.sum(p[:, 0] * np.roll(p[:, 1], -1) - np.roll(p[:, 0], -1) * p[:, 1]))

    def _edges(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(starts (E, 2), outward unit normals (E, 2), edge vectors (E, 2)) of the counter-clockwise polygon."""
        a = self.points
        e = np.roll(a, -1, axis=0) - a
        n = np.stack([e[:, 1], -e[:, 0]], axis=1) / np.linalg.norm(e, axis=1, keepdims=True)
        return a, n, e

    def signed_distance(self, points: Any) -> np.ndarray:
        """Signed distance (N,) from robot-frame points (N, 2) to the footprint: negative inside, exact (the
        largest edge half-plane distance inside a convex polygon, the nearest edge segment outside)."""
        q = np.asarray(points, dtype=float).reshape(-1, 2)
        if self.is_circle:
            return np.linalg.norm(q, axis=1) - float(self.radius)
        a, n, e = self._edges()
        rel = q[:, None, :] - a[None, :, :]  # (N, E, 2)
        plane = np.einsum("nej,ej->ne", rel, n).max(axis=1)
        t = np.clip(np.einsum("nej,ej->ne", rel, e) / np.sum(e * e, axis=1), 0.0, 1.0)
        seg = np.linalg.norm(rel - t[..., None] * e[None], axis=2).min(axis=1)
        return np.where(plane > 0.0, seg, plane)

    def contains(self, points: Any, tolerance: float = 0.0) -> np.ndarray:
        """Whether robot-frame points (N, 2) lie in the footprint grown by `tolerance` (boundary included)."""
        return self.signed_distance(points) <= tolerance

    def outline(self, pose: Any = (0.0, 0.0, 0.0), segments: int = 64) -> np.ndarray:
        """The footprint's outline in the world at `pose` (x, y, yaw): the vertices (M, 2) of the polygon, or of a
        `segments`-gon circumscribing the circle (so the drawn outline never understates the body)."""
        pose = np.asarray(pose, dtype=float).reshape(3)
        if self.is_circle:
            ang = np.linspace(0.0, 2 * np.pi, segments, endpoint=False)
            r = float(self.radius) / math.cos(math.pi / segments)
            local = r * np.stack([np.cos(ang), np.sin(ang)], axis=1)
        else:
            local = self.points
        return to_world(local, pose)

    def transform(self, pose: Any) -> np.ndarray:
        """The world polygon (M, 2) at `pose` (x, y, yaw); `outline` with its defaults."""
        return self.outline(pose)

    def world_signed_distance(self, pose: Any, points: Any) -> np.ndarray:
        """Signed distance (N,) from world points (N, 2) to the footprint at `pose` (negative: inside the robot)."""
        return self.signed_distance(to_robot(points, pose))

    # --- covering discs -------------------------------------------------------------------------------------------
    def cover(self, tolerance: float = DEFAULT_COVER_TOLERANCE_M) -> DiscCover:
        """The fewest discs (among grid-centred candidates) that cover the footprint and stick out of it by at most
        `tolerance` metres (module docstring). A circle is its own single disc (error 0). Cached per footprint and
        tolerance; InputError when the tolerance is too small to solve for this footprint."""
        if not (math.isfinite(tolerance) and tolerance > 0):
            raise InputError(f"footprint cover tolerance: expected a number > 0, got {tolerance}")
        if self.is_circle:
            return DiscCover(np.array([[0.0, 0.0, float(self.radius)]]), float(tolerance), 0.0)
        discs = _cover(self.vertices, float(tolerance))
        return DiscCover(discs.copy(), float(tolerance), self.cover_error(discs))

    def cover_error(self, discs: Any) -> float:
        """How far the union of `discs` (K, 3) sticks out of the footprint [m]: the largest signed distance to the
        polygon over BOUNDARY_SAMPLES points on each disc's circle (the excess of a disc is attained on its circle,
        distance to a convex set being convex). Sampling can miss at most pi r / BOUNDARY_SAMPLES (the distance is
        1-Lipschitz), under 0.7 mm for r <= 0.3 m; 0 when no disc sticks out."""
        d = np.asarray(discs, dtype=float).reshape(-1, 3)
        ang = np.linspace(0.0, 2 * np.pi, BOUNDARY_SAMPLES, endpoint=False)
        ring = np.stack([np.cos(ang), np.sin(ang)], axis=1)
        pts = (d[:, None, :2] + d[:, None, 2:3] * ring[None]).reshape(-1, 2)
        return max(0.0, float(self.signed_distance(pts).max()))

    def covered_by(self, discs: Any, points: Any) -> np.ndarray:
        """Whether each robot-frame point (N, 2) lies in the union of `discs` (K, 3)."""
        d = np.asarray(discs, dtype=float).reshape(-1, 3)
        q = np.asarray(points, dtype=float).reshape(-1, 2)
        dist = np.linalg.norm(q[:, None, :] - d[None, :, :2], axis=2)
        return np.any(dist <= d[None, :, 2] + 1e-12, axis=1)


def to_world(local: Any, pose: Any) -> np.ndarray:
    """Robot-frame points (N, 2) to the world at pose (x, y, yaw)."""
    x, y, yaw = np.asarray(pose, dtype=float).reshape(3)
    c, s = math.cos(yaw), math.sin(yaw)
    p = np.asarray(local, dtype=float).reshape(-1, 2)
    return np.stack([x + c * p[:, 0] - s * p[:, 1], y + s * p[:, 0] + c * p[:, 1]], axis=1)


def to_robot(points: Any, pose: Any) -> np.ndarray:
    """World points (N, 2) to the robot frame at pose (x, y, yaw)."""
    x, y, yaw = np.asarray(pose, dtype=float).reshape(3)
    c, s = math.cos(yaw), math.sin(yaw)
    p = np.asarray(points, dtype=float).reshape(-1, 2) - (x, y)
    return np.stack([c * p[:, 0] + s * p[:, 1], -s * p[:, 0] + c * p[:, 1]], axis=1)


# A footprint parameter is a polygon of a few to a few dozen vertices (~20 characters each). PyYAML parses a 240 KB
# flow sequence in ~2 s; 10,000 characters (~500 vertices) parse in milliseconds (issue 26: a profile's bad input
# is refused within a second).
MAX_FOOTPRINT_CHARS = 10_000


def parse_footprint(value: Any, robot_radius: float | None = None) -> Footprint:
    """A footprint from Nav2-style parameters: `value` is the `footprint` parameter, a string "[[x, y], ...]" or a
    list of [x, y]; empty ("" or []) means a circle of `robot_radius`. InputError naming what is wrong."""
    if isinstance(value, str):
        text = value.strip()
        if not text or text == "[]":
            value = []
        elif len(text) > MAX_FOOTPRINT_CHARS:
            raise InputError(
                f"footprint: a string of {len(text):,} characters, expected at most {MAX_FOOTPRINT_CHARS:,} ('[[x, y], "
                f"...]' with at most a few hundred vertices)"
            )
        else:
            from mnemo_mpc.safe_io import first_line, parse_yaml, show

            try:  # "[[x, y], ...]" is a YAML flow sequence; strict: no aliases, nesting <= 16, digit limit an error
                value = parse_yaml(text, "footprint", "the value")
            except InputError as exc:
                raise InputError(f"footprint: expected '[[x, y], ...]', got {show(text)} ({first_line(exc)})") from exc
            if not isinstance(value, list) or not all(
                isinstance(v, list) and len(v) == 2 and all(_is_number(c) for c in v) for v in value
            ):
                raise InputError(f"footprint: expected '[[x, y], ...]' with numbers, got {show(text)}")
    if value is None or (isinstance(value, list | tuple) and len(value) == 0):
        if robot_radius is None:
            raise InputError("footprint: empty, and no robot_radius for a circular footprint")
        return Footprint.circle(robot_radius)
    return Footprint.polygon(value)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _sample_grid(fp: Footprint, spacing: float) -> np.ndarray:
    """Grid points (spacing apart) within spacing / sqrt 2 of the polygon: every point of the polygon is within
    spacing / sqrt 2 of one of them (its nearest grid point is that close, hence that close to the polygon too)."""
    x0, x1, y0, y1 = fp.bounds
    xs = np.arange(x0 - spacing, x1 + 1.5 * spacing, spacing)
    ys = np.arange(y0 - spacing, y1 + 1.5 * spacing, spacing)
    g = np.stack(np.meshgrid(xs, ys, indexing="ij"), axis=-1).reshape(-1, 2)
    return g[fp.signed_distance(g) <= spacing / math.sqrt(2.0)]


def _mirror_pairs(fp: Footprint, ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    """Index pairs (P, 2) of candidates mirrored about y = 0 (iy -> -iy) when the polygon is symmetric about its x
    axis, else none. The candidate grid is centred on the bounding box, so the mirror of a grid point is one."""
    p = fp.points
    mirrored = p * (1.0, -1.0)
    key = np.lexsort((p[:, 1], p[:, 0]))
    mkey = np.lexsort((mirrored[:, 1], mirrored[:, 0]))
    if not np.allclose(p[key], mirrored[mkey], rtol=0.0, atol=1e-12):
        return np.zeros((0, 2), dtype=int)
    index = {(int(a), int(b)): n for n, (a, b) in enumerate(zip(ix, iy, strict=True))}
    pairs = [(n, index[(int(a), -int(b))]) for n, (a, b) in enumerate(zip(ix, iy, strict=True)) if b > 0]
    return np.asarray(pairs, dtype=int).reshape(-1, 2)


@functools.lru_cache(maxsize=64)
def _cover(vertices: tuple[tuple[float, float], ...], tolerance: float) -> np.ndarray:
    """Minimum set cover (module docstring): discs (K, 3) covering the polygon, each sticking out by <= tolerance.

    Candidates: centres c on a fixed grid (CANDIDATES_ACROSS steps across the narrowest width, the same for every
    tolerance, centred on the bounding box so symmetric footprints get symmetric candidates), radius d(c) + e.
    Samples: `_sample_grid` at spacing s with slack delta = s / sqrt 2 = e / SLACK_FRACTION; a candidate covers a
    sample g when |g - c| <= r - delta, which makes the union cover every point of the polygon. With delta = e / 4 a
    cover at tolerance e / 2 is feasible at e, so halving the tolerance never needs fewer discs (`milp` is exact).
    """
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import csc_matrix
    from scipy.spatial import cKDTree

    fp = Footprint(vertices)
    delta = tolerance / SLACK_FRACTION
    spacing = delta * math.sqrt(2.0)
    n_samples = fp.area / spacing**2
    if n_samples > MAX_SAMPLES:
        smallest = SLACK_FRACTION * math.sqrt(fp.area / MAX_SAMPLES) / math.sqrt(2.0)
        raise InputError(
            f"footprint cover tolerance {tolerance} m: too fine for a {fp.area:.3f} m^2 footprint; expected >= "
            f"{smallest:.4f} m"
        )
    samples = _sample_grid(fp, spacing)

    step = fp.min_width / CANDIDATES_ACROSS
    x0, x1, y0, y1 = fp.bounds
    cx, cy = 0.5 * (x0 + x1), 0.5 * (y0 + y1)
    kx, ky = int(math.ceil(0.5 * (x1 - x0) / step)), int(math.ceil(0.5 * (y1 - y0) / step))
    ix, iy = np.meshgrid(np.arange(-kx, kx + 1), np.arange(-ky, ky + 1), indexing="ij")
    ix, iy = ix.ravel(), iy.ravel()
    centres = np.stack([cx + step * ix, cy + step * iy], axis=-1)
    depth = -fp.signed_distance(centres)
    inside = depth > 0
    centres, radii, ix, iy = centres[inside], depth[inside] + tolerance, ix[inside], iy[inside]

    tree = cKDTree(samples)
    rows, cols = [], []
    for j, (c, r) in enumerate(zip(centres, radii, strict=True)):
        hits = tree.query_ball_point(c, r - delta)
        rows.extend(hits)
        cols.extend([j] * len(hits))
    a = csc_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(samples), len(centres)))
    if np.any(np.asarray(a.sum(axis=1)).ravel() == 0):
        raise InputError(
            f"footprint cover tolerance {tolerance} m: too fine for the candidate discs of footprint {vertices}"
        )
    constraints = [LinearConstraint(a, lb=np.ones(len(samples)), ub=np.inf)]
    mirror = _mirror_pairs(fp, ix, iy)
    if len(mirror):
        # A footprint symmetric about its x axis gets a symmetric cover: no side of the robot is padded more.
        rows = np.repeat(np.arange(len(mirror)), 2)
        pair = csc_matrix((np.tile([1.0, -1.0], len(mirror)), (rows, mirror.ravel())), shape=(len(mirror), len(ix)))
        constraints.append(LinearConstraint(pair, lb=0.0, ub=0.0))
    res = milp(
        c=np.ones(len(centres)),
        constraints=constraints,
        integrality=np.ones(len(centres)),
        bounds=Bounds(0, 1),
        options={"time_limit": 60.0},
    )
    if res.x is None:
        raise InputError(f"footprint cover: the set cover found no solution ({res.message})")
    chosen = np.flatnonzero(res.x > 0.5)
    c, r = centres[chosen], radii[chosen].copy()
    # Shrink each disc (largest first) to the samples no other disc covers: same cover, smaller excess.
    dist = np.linalg.norm(samples[:, None, :] - c[None], axis=2) + delta  # radius each disc needs per sample
    for k in np.argsort(-r, kind="stable"):
        others = np.delete(np.arange(len(r)), k)
        alone = ~np.any(dist[:, others] <= r[others], axis=1) if len(others) else np.ones(len(samples), bool)
        if np.any(alone):
            r[k] = min(r[k], float(dist[alone, k].max()))
    if len(mirror):  # mirrored discs keep the larger of their two radii (still within the bound): symmetric again
        where = {int(j): n for n, j in enumerate(chosen)}
        for a_, b_ in mirror:
            if int(a_) in where and int(b_) in where:
                r[where[int(a_)]] = r[where[int(b_)]] = max(r[where[int(a_)]], r[where[int(b_)]])
    order = np.lexsort((c[:, 1], c[:, 0]))  # front-to-back order is irrelevant; a stable one keeps output reproducible
    return np.column_stack([c[order], r[order]])
