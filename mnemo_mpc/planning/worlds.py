"""Seeded procedural generator of indoor navigation worlds (seed 002 §5.2: "2787 different environments").

The paper collects its SQP dataset by driving an MPC agent through thousands of indoor layouts "with narrow corridors
and doors"; it does not publish the layouts, so this module generates them: rooms split by walls with doors, a
corridor maze, an office (rooms off a corridor), clutter fields, open halls, and rooms with clutter ("mixed").

Every world is a ground-truth `OccupancyGrid` holding only FREE (0) and OCCUPIED (100), framed by closed outer walls,
plus a start and goal pose. The generator guarantees that start and goal are joined by a path of the robot's disc
footprint inflated by the safety margin: a cell is traversable when its clearance (distance from the cell centre to
the nearest obstacle cell edge, from `scipy.ndimage.distance_transform_edt`) exceeds `robot_radius_m +
safety_margin_m`; start and goal lie in the same 4-connected component (`scipy.ndimage.label`) of that set, and the
goal is picked by geodesic distance along it (`skimage.graph.MCP_Geometric`). The same check (`validate_world`) is
applied to worlds built from external maps, so a start inside an obstacle is an `InfeasibleProblemError`.

Determinism: everything is drawn from `numpy.random.default_rng(SeedSequence([seed, kind]))`, so a (seed, kind,
config) triple always yields the same world. This module is library code: it must not import pybullet.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import minimum_spanning_tree
from skimage.draw import disk, polygon
from skimage.graph import MCP_Geometric

from mnemo_mpc.errors import InfeasibleProblemError, InputError, MnemoError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = ("rooms", "corridor", "doors", "clutter", "open", "mixed")


@dataclass(frozen=True)
class WorldConfig:
    """Generator knobs. Lengths in metres. `difficulty` in [0, 1] narrows doors and corridors, adds clutter and
    rooms; the defaults give ~12 m square worlds whose start-goal paths take ~150-200 MPC steps at 10 Hz, the
    episode length the paper reports (seed 002 §5.2: "180 steps on average")."""

    size_m: tuple[float, float] = (12.0, 12.0)  # (x extent, y extent) including the outer walls
    resolution: float = 0.05
    difficulty: float = 0.5
    robot_radius_m: float = RobotModel.radius  # the planner's footprint, one source of truth
    safety_margin_m: float = RobotModel.safety_margin
    wall_thickness_m: float = 0.15
    # Doors: width drawn in [footprint + 2*margin + door_extra_min_m, door_width_max_m]; difficulty shrinks the top.
    door_extra_min_m: float = 0.3
    door_width_max_m: float = 1.3
    # Corridors (maze and office kinds): width drawn in corridor_width_m, narrower with difficulty.
    corridor_width_m: tuple[float, float] = (1.0, 1.8)
    min_room_m: float = 2.6  # no room side shorter than this
    # Clutter: obstacles per square metre at difficulty 1 (scaled by 0.25 + 0.75*difficulty), sizes in metres.
    clutter_density: float = 0.3
    clutter_size_m: tuple[float, float] = (0.2, 0.8)
    # Start and goal: clearance from any obstacle, and the window for the geodesic start-goal distance.
    endpoint_clearance_m: float = 0.45
    min_start_goal_m: float = 5.0
    max_start_goal_m: float = 14.0
    max_attempts: int = 25

    def __post_init__(self) -> None:
        if len(self.size_m) != 2 or min(self.size_m) < 3.0:
            raise InputError(f"WorldConfig.size_m: expected (x, y) extents >= 3 m, got {self.size_m}")
        if not 0.0 <= self.difficulty <= 1.0:
            raise InputError(f"WorldConfig.difficulty: expected a value in [0, 1], got {self.difficulty}")
        if not 0.0 < self.resolution <= 0.25:
            raise InputError(f"WorldConfig.resolution: expected (0, 0.25] metres per cell, got {self.resolution}")
        if self.robot_radius_m <= 0 or self.safety_margin_m < 0:
            raise InputError(
                f"WorldConfig robot_radius_m/safety_margin_m: expected > 0 and >= 0, got "
                f"{self.robot_radius_m}/{self.safety_margin_m}"
            )
        if self.door_width_min_m > self.door_width_max_m:
            raise InputError(
                f"WorldConfig.door_width_max_m: expected >= footprint + margins + door_extra_min_m = "
                f"{self.door_width_min_m:.2f} m, got {self.door_width_max_m}"
            )
        lo, hi = self.corridor_width_m
        if not self.door_width_min_m <= lo <= hi:
            raise InputError(
                f"WorldConfig.corridor_width_m: expected door_width_min ({self.door_width_min_m:.2f}) <= lo <= hi, "
                f"got {self.corridor_width_m}"
            )
        if not 0 < self.min_start_goal_m <= self.max_start_goal_m:
            raise InputError(
                f"WorldConfig min/max_start_goal_m: expected 0 < min <= max, got "
                f"{self.min_start_goal_m}/{self.max_start_goal_m}"
            )
        if self.endpoint_clearance_m <= self.inflation_m:
            raise InputError(
                f"WorldConfig.endpoint_clearance_m: expected > robot_radius_m + safety_margin_m = "
                f"{self.inflation_m:.2f}, got {self.endpoint_clearance_m}"
            )

    @property
    def inflation_m(self) -> float:
        """Clearance the robot centre needs: footprint radius plus safety margin."""
        return self.robot_radius_m + self.safety_margin_m

    @property
    def door_width_min_m(self) -> float:
        return 2.0 * self.inflation_m + self.door_extra_min_m


@dataclass(frozen=True, eq=False)
class World:
    """A navigation problem: ground-truth grid (FREE/OCCUPIED only for generated worlds), start and goal poses
    (x, y, yaw) in the grid's map frame, and provenance."""

    grid: OccupancyGrid
    start: np.ndarray
    goal: np.ndarray
    seed: int
    kind: str
    config: WorldConfig | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.seed}"


# --------------------------------------------------------------------------------------------------------------------
# Clearance / connectivity (shared with map-loaded worlds)
# --------------------------------------------------------------------------------------------------------------------
def clearance_map(grid: OccupancyGrid, unknown_is_obstacle: bool = True) -> np.ndarray:
    """Distance in metres from each cell centre to the nearest obstacle cell's edge (0 inside obstacles).

    Outside the grid counts as obstacle so that a map without outer walls still bounds the robot."""
    blocked = grid.occupied_mask() | (grid.unknown_mask() if unknown_is_obstacle else False)
    free = np.pad(~blocked, 1, constant_values=False)
    d = ndimage.distance_transform_edt(free)[1:-1, 1:-1]
    # EDT is centre-to-centre; the obstacle cell's edge is half a cell nearer.
    return np.maximum(d - 0.5, 0.0) * grid.resolution


def traversable_mask(grid: OccupancyGrid, inflation_m: float, unknown_is_obstacle: bool = True) -> np.ndarray:
    """Cells where the robot centre may be: clearance strictly greater than footprint radius + margin."""
    return clearance_map(grid, unknown_is_obstacle) > inflation_m


def validate_world(
    grid: OccupancyGrid,
    start: np.ndarray,
    goal: np.ndarray,
    robot_radius_m: float = 0.2,
    safety_margin_m: float = 0.05,
) -> None:
    """Raise `InfeasibleProblemError` unless start and goal are in bounds, clear of obstacles by the footprint plus
    margin, and joined by a traversable path (same 4-connected component of the inflated free space)."""
    inflation = robot_radius_m + safety_margin_m
    clear = clearance_map(grid)
    trav = clear > inflation
    labels, _ = ndimage.label(trav)
    comp = []
    for name, pose in (("start", start), ("goal", goal)):
        pose = np.asarray(pose, dtype=float)
        if pose.shape != (3,) or not np.all(np.isfinite(pose)):
            raise InputError(f"{name}: expected a finite (x, y, yaw), got {pose.tolist()}")
        rc = grid.world_to_cell(pose[:2])
        if not grid.in_bounds(rc):
            raise InfeasibleProblemError(
                f"{name} ({pose[0]:.2f}, {pose[1]:.2f}) lies outside the map "
                f"(x in [{grid.origin[0]:.2f}, {grid.origin[0] + grid.size_m[0]:.2f}], "
                f"y in [{grid.origin[1]:.2f}, {grid.origin[1] + grid.size_m[1]:.2f}] for a zero-yaw origin)"
            )
        r, c = int(rc[0]), int(rc[1])
        if grid.occupied_mask()[r, c]:
            raise InfeasibleProblemError(f"{name} ({pose[0]:.2f}, {pose[1]:.2f}) lies inside an obstacle")
        if grid.unknown_mask()[r, c]:
            raise InfeasibleProblemError(f"{name} ({pose[0]:.2f}, {pose[1]:.2f}) lies in unknown space")
        if not trav[r, c]:
            raise InfeasibleProblemError(
                f"{name} ({pose[0]:.2f}, {pose[1]:.2f}) has clearance {clear[r, c]:.2f} m, the robot needs more than "
                f"radius + margin = {inflation:.2f} m"
            )
        comp.append(labels[r, c])
    if comp[0] != comp[1]:
        raise InfeasibleProblemError(
            f"no path for a {robot_radius_m:.2f} m radius robot (+{safety_margin_m:.2f} m margin) joins start "
            f"{np.asarray(start)[:2].tolist()} and goal {np.asarray(goal)[:2].tolist()}"
        )


def world_from_grid(
    grid: OccupancyGrid,
    start: np.ndarray,
    goal: np.ndarray,
    *,
    kind: str = "map",
    seed: int = 0,
    robot_radius_m: float = 0.2,
    safety_margin_m: float = 0.05,
) -> World:
    """Wrap an existing grid (e.g. a map_server map) as a `World` after `validate_world`."""
    start = np.asarray(start, dtype=float).reshape(-1)
    goal = np.asarray(goal, dtype=float).reshape(-1)
    validate_world(grid, start, goal, robot_radius_m, safety_margin_m)
    return World(grid=grid, start=start, goal=goal, seed=int(seed), kind=kind)


# --------------------------------------------------------------------------------------------------------------------
# Raster helpers (metres -> cells of the ground-truth boolean occupancy, origin at (0, 0))
# --------------------------------------------------------------------------------------------------------------------
class _Canvas:
    def __init__(self, cfg: WorldConfig) -> None:
        self.res = cfg.resolution
        self.w_m, self.h_m = float(cfg.size_m[0]), float(cfg.size_m[1])
        self.occ = np.zeros((round(self.h_m / self.res), round(self.w_m / self.res)), dtype=bool)
        # Clutter never lands here: door mouths and corridor cores, so clutter cannot seal a room.
        self.keepout = np.zeros_like(self.occ)

    def _span(self, a: float, b: float, n: int) -> slice:
        lo, hi = sorted((a, b))
        return slice(max(0, int(round(lo / self.res))), min(n, int(round(hi / self.res))))

    def rect(self, x0: float, y0: float, x1: float, y1: float, value: bool = True, target: str = "occ") -> None:
        arr = getattr(self, target)
        arr[self._span(y0, y1, arr.shape[0]), self._span(x0, x1, arr.shape[1])] = value

    def rotated_box(self, cx: float, cy: float, sx: float, sy: float, yaw: float) -> None:
        c, s = math.cos(yaw), math.sin(yaw)
        corners = np.array([[-sx, -sy], [sx, -sy], [sx, sy], [-sx, sy]]) / 2.0
        xy = corners @ np.array([[c, s], [-s, c]]) + [cx, cy]
        rr, cc = polygon(xy[:, 1] / self.res, xy[:, 0] / self.res, shape=self.occ.shape)
        self.occ[rr, cc] = True

    def disc(self, cx: float, cy: float, r: float, target: str = "occ") -> None:
        arr = getattr(self, target)
        rr, cc = disk((cy / self.res, cx / self.res), r / self.res, shape=arr.shape)
        arr[rr, cc] = True

    def outer_walls(self, t: float) -> None:
        self.rect(0, 0, self.w_m, t)
        self.rect(0, self.h_m - t, self.w_m, self.h_m)
        self.rect(0, 0, t, self.h_m)
        self.rect(self.w_m - t, 0, self.w_m, self.h_m)


def _lerp(a: float, b: float, t: float) -> float:
    return a + (b - a) * t


def _door_width(rng: np.random.Generator, cfg: WorldConfig) -> float:
    hi = _lerp(cfg.door_width_max_m, cfg.door_width_min_m, 0.7 * cfg.difficulty)
    return float(rng.uniform(cfg.door_width_min_m, hi))


def _corridor_width(rng: np.random.Generator, cfg: WorldConfig) -> float:
    lo, hi = cfg.corridor_width_m
    return float(rng.uniform(lo, _lerp(hi, lo, 0.7 * cfg.difficulty)))


def _scatter_clutter(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig, density_scale: float) -> None:
    """Random boxes and discs at `clutter_density * density_scale` per m², kept off `cv.keepout`."""
    t = cfg.wall_thickness_m
    area = (cv.w_m - 2 * t) * (cv.h_m - 2 * t)
    n = int(rng.poisson(cfg.clutter_density * density_scale * area))
    lo, hi = cfg.clutter_size_m
    for _ in range(n):
        cx = rng.uniform(t, cv.w_m - t)
        cy = rng.uniform(t, cv.h_m - t)
        r, c = min(int(cy / cv.res), cv.occ.shape[0] - 1), min(int(cx / cv.res), cv.occ.shape[1] - 1)
        size = rng.uniform(lo, hi, size=2)
        # A keepout cell within the obstacle's reach rejects it (checked on the bounding disc).
        reach = int(math.ceil(0.5 * math.hypot(*size) / cv.res)) + 1
        if cv.keepout[max(0, r - reach) : r + reach + 1, max(0, c - reach) : c + reach + 1].any():
            continue
        if rng.random() < 0.35:
            cv.disc(cx, cy, 0.5 * size[0])
        else:
            cv.rotated_box(cx, cy, size[0], size[1], rng.uniform(0, math.pi))


# --------------------------------------------------------------------------------------------------------------------
# Layout kinds
# --------------------------------------------------------------------------------------------------------------------
def _wall_with_door(
    rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig, vertical: bool, pos: float, a: float, b: float
) -> tuple[float, float, float, bool] | None:
    """Wall at x=pos (vertical) or y=pos spanning [a, b] with one door; returns (cx, cy, width, vertical)."""
    t = cfg.wall_thickness_m
    dw = _door_width(rng, cfg)
    # Keep the door off the wall ends, where perpendicular walls join.
    lo, hi = a + t + 0.5 * dw + 0.1, b - t - 0.5 * dw - 0.1
    if hi < lo:
        return None
    d = float(rng.uniform(lo, hi))
    if vertical:
        cv.rect(pos - t / 2, a, pos + t / 2, b)
        cv.rect(pos - t / 2 - cv.res, d - dw / 2, pos + t / 2 + cv.res, d + dw / 2, value=False)
        door = (pos, d, dw, True)
    else:
        cv.rect(a, pos - t / 2, b, pos + t / 2)
        cv.rect(d - dw / 2, pos - t / 2 - cv.res, d + dw / 2, pos + t / 2 + cv.res, value=False)
        door = (d, pos, dw, False)
    cv.disc(door[0], door[1], 0.5 * dw + 2.5 * cfg.inflation_m, target="keepout")
    return door


def _blocks_door(
    pos: float, vertical: bool, rect: tuple[float, float, float, float], doors: list, clear: float
) -> bool:
    """Would a new wall at `pos` inside `rect` end on a door in one of the rect's bounding walls?"""
    x0, y0, x1, y1 = rect
    for cx, cy, dw, dv in doors:
        if vertical and not dv and (abs(cy - y0) < 1e-6 or abs(cy - y1) < 1e-6) and abs(cx - pos) < dw / 2 + clear:
            return True
        if not vertical and dv and (abs(cx - x0) < 1e-6 or abs(cx - x1) < 1e-6) and abs(cy - pos) < dw / 2 + clear:
            return True
    return False


def _bsp_rooms(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig, rect: tuple, depth: int, doors: list) -> None:
    """Binary space partition into rooms; each split wall gets one door, so the rooms form a connected tree."""
    x0, y0, x1, y1 = rect
    w, h = x1 - x0, y1 - y0
    m = cfg.min_room_m
    options = [v for v, span in ((True, w), (False, h)) if span >= 2 * m]
    # Deeper splits are likelier with difficulty: more, smaller rooms.
    p_stop = 0.0 if depth < 1 else _lerp(0.55, 0.15, cfg.difficulty) + 0.1 * (depth - 1)
    if not options or rng.random() < p_stop:
        return
    vertical = bool(rng.choice(options)) if len(options) == 1 else bool(w > h if rng.random() < 0.75 else w <= h)
    clear = cfg.wall_thickness_m + 2 * cfg.inflation_m
    for _ in range(20):
        pos = float(rng.uniform(x0 + m, x1 - m) if vertical else rng.uniform(y0 + m, y1 - m))
        if not _blocks_door(pos, vertical, rect, doors, clear):
            break
    else:
        return
    door = _wall_with_door(rng, cv, cfg, vertical, pos, *((y0, y1) if vertical else (x0, x1)))
    if door is None:
        return
    doors.append(door)
    if vertical:
        children = ((x0, y0, pos, y1), (pos, y0, x1, y1))
    else:
        children = ((x0, y0, x1, pos), (x0, pos, x1, y1))
    for child in children:
        _bsp_rooms(rng, cv, cfg, child, depth + 1, doors)


def _gen_rooms(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig, clutter: float) -> None:
    t = cfg.wall_thickness_m
    cv.outer_walls(t)
    doors: list = []
    _bsp_rooms(rng, cv, cfg, (t / 2, t / 2, cv.w_m - t / 2, cv.h_m - t / 2), 0, doors)
    if clutter > 0:
        _scatter_clutter(rng, cv, cfg, clutter)


def _gen_corridor(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig) -> None:
    """A corridor maze: a random spanning tree (MST of random edge weights) over a coarse lattice of junctions,
    carved at one corridor width; extra loops at low difficulty."""
    t = cfg.wall_thickness_m
    cw = _corridor_width(rng, cfg)
    pitch = cw + max(t, float(rng.uniform(t, 1.5)))  # wall blocks between corridors vary in thickness
    nx = max(2, int((cv.w_m - t) // pitch))
    ny = max(2, int((cv.h_m - t) // pitch))
    # Centre the lattice in the world.
    ox = 0.5 * (cv.w_m - nx * pitch) + 0.5 * pitch
    oy = 0.5 * (cv.h_m - ny * pitch) + 0.5 * pitch
    cv.occ[:] = True
    idx = np.arange(nx * ny).reshape(ny, nx)
    edges = np.concatenate(
        [np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1), np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1)]
    )
    wts = rng.uniform(1.0, 2.0, size=len(edges))
    tree = minimum_spanning_tree(coo_matrix((wts, (edges[:, 0], edges[:, 1])), shape=(nx * ny, nx * ny))).tocoo()
    keep = {(min(a, b), max(a, b)) for a, b in zip(tree.row, tree.col, strict=True)}
    p_loop = _lerp(0.35, 0.05, cfg.difficulty)
    for a, b in edges:
        if (a, b) in keep or rng.random() < p_loop:
            (ra, ca), (rb, cb) = divmod(int(a), nx), divmod(int(b), nx)
            xa, ya, xb, yb = ox + ca * pitch, oy + ra * pitch, ox + cb * pitch, oy + rb * pitch
            cv.rect(min(xa, xb) - cw / 2, min(ya, yb) - cw / 2, max(xa, xb) + cw / 2, max(ya, yb) + cw / 2, False)
    # Some junctions widen into small halls.
    for r in range(ny):
        for c in range(nx):
            if rng.random() < _lerp(0.3, 0.1, cfg.difficulty):
                hw = float(rng.uniform(cw, min(pitch, 2 * cw))) / 2 + 0.3
                cv.rect(ox + c * pitch - hw, oy + r * pitch - hw, ox + c * pitch + hw, oy + r * pitch + hw, False)
    cv.outer_walls(t)


def _gen_doors(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig) -> None:
    """Office: a straight corridor across the world, a row of rooms on each side, each with a door onto it."""
    t = cfg.wall_thickness_m
    cv.outer_walls(t)
    horizontal = bool(rng.random() < 0.5)
    # Work in (u, v): u along the corridor, v across it; transpose at the end for a vertical corridor.
    lu, lv = (cv.w_m, cv.h_m) if horizontal else (cv.h_m, cv.w_m)
    cw = _corridor_width(rng, cfg)
    vc = float(rng.uniform(cfg.min_room_m + t, lv - cfg.min_room_m - t - cw))
    walls_v = (vc, vc + cw)

    def rect_uv(u0: float, v0: float, u1: float, v1: float, value: bool = True, target: str = "occ") -> None:
        if horizontal:
            cv.rect(u0, v0, u1, v1, value, target)
        else:
            cv.rect(v0, u0, v1, u1, value, target)

    def disc_uv(u: float, v: float, r: float) -> None:
        cv.disc(u, v, r, "keepout") if horizontal else cv.disc(v, u, r, "keepout")

    rect_uv(0, walls_v[0] - t / 2, lu, walls_v[0] + t / 2)
    rect_uv(0, walls_v[1] - t / 2, lu, walls_v[1] + t / 2)
    rect_uv(0, walls_v[0] + t / 2, lu, walls_v[1] - t / 2, target="keepout")
    for side, (va, vb) in enumerate(((t, walls_v[0]), (walls_v[1], lv - t))):
        # Room widths along the corridor: at least min_room, narrower rooms with difficulty.
        u = t
        while u < lu - t - 1e-6:
            width = float(rng.uniform(cfg.min_room_m, _lerp(2.2, 1.3, cfg.difficulty) * cfg.min_room_m))
            u_end = min(u + width, lu - t)
            if lu - t - u_end < cfg.min_room_m:
                u_end = lu - t
            dw = _door_width(rng, cfg)
            if u_end - u >= dw + 2 * t + 0.2:
                d = float(rng.uniform(u + t + dw / 2 + 0.1, u_end - t - dw / 2 - 0.1))
                v_wall = walls_v[0] if side == 0 else walls_v[1]
                rect_uv(d - dw / 2, v_wall - t / 2 - cv.res, d + dw / 2, v_wall + t / 2 + cv.res, value=False)
                disc_uv(d, v_wall, 0.5 * dw + 2.5 * cfg.inflation_m)
            if u_end < lu - t - 1e-6:
                rect_uv(u_end - t / 2, va, u_end + t / 2, vb)
            u = u_end
    if rng.random() < 0.5 + 0.5 * cfg.difficulty:
        _scatter_clutter(rng, cv, cfg, 0.4 * cfg.difficulty)


def _gen_clutter(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig) -> None:
    cv.outer_walls(cfg.wall_thickness_m)
    _scatter_clutter(rng, cv, cfg, 0.25 + 0.75 * cfg.difficulty)


def _gen_open(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig) -> None:
    """An open hall with a few free-standing wall segments (L and I shapes) and sparse furniture."""
    t = cfg.wall_thickness_m
    cv.outer_walls(t)
    for _ in range(int(rng.integers(1, 4))):
        length = float(rng.uniform(1.5, 0.4 * min(cv.w_m, cv.h_m)))
        x, y = rng.uniform(2.0, cv.w_m - 2.0), rng.uniform(2.0, cv.h_m - 2.0)
        if rng.random() < 0.5:
            cv.rect(x, y - t / 2, min(x + length, cv.w_m - 2.0), y + t / 2)
        else:
            cv.rect(x - t / 2, y, x + t / 2, min(y + length, cv.h_m - 2.0))
        if rng.random() < 0.5:  # an L
            cv.rect(x - t / 2, y - t / 2, x + t / 2, max(y - length / 2, 2.0))
    _scatter_clutter(rng, cv, cfg, 0.2 * (0.25 + 0.75 * cfg.difficulty))


def _gen_mixed(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig) -> None:
    _gen_rooms(rng, cv, cfg, clutter=0.15 + 0.45 * cfg.difficulty)


_GENERATORS = {
    "rooms": lambda rng, cv, cfg: _gen_rooms(rng, cv, cfg, clutter=0.0),
    "corridor": _gen_corridor,
    "doors": _gen_doors,
    "clutter": _gen_clutter,
    "open": _gen_open,
    "mixed": _gen_mixed,
}


# --------------------------------------------------------------------------------------------------------------------
# Start / goal
# --------------------------------------------------------------------------------------------------------------------
def _pick_endpoints(
    rng: np.random.Generator, grid: OccupancyGrid, cfg: WorldConfig
) -> tuple[np.ndarray, np.ndarray] | None:
    """Start anywhere with `endpoint_clearance_m`; goal at geodesic distance in [min, max]_start_goal_m along the
    traversable set (MCP_Geometric = Dijkstra on the 8-connected lattice with diagonal lengths)."""
    clear = clearance_map(grid)
    trav = clear > cfg.inflation_m
    labels, n = ndimage.label(trav)
    if n == 0:
        return None
    ok = clear >= cfg.endpoint_clearance_m
    sizes = np.bincount(labels[ok], minlength=n + 1)
    sizes[0] = 0
    if sizes.max() == 0:
        return None
    # Start drawn in proportion to component size among well-cleared cells, so big regions dominate.
    cand = np.flatnonzero(ok.ravel() & (labels.ravel() > 0))
    start_idx = int(rng.choice(cand))
    sr, sc = divmod(start_idx, grid.shape[1])
    comp = labels[sr, sc]
    # Geodesic search stays on this component's cells; 4-connected labels + 8-connected MCP is fine because the
    # MCP cost is inf off the component, so a diagonal step can only join cells of the same component.
    costs = np.where(labels == comp, 1.0, np.inf)
    mcp = MCP_Geometric(costs)
    dist, _ = mcp.find_costs([(sr, sc)])
    dist = dist * grid.resolution
    goal_ok = ok & (labels == comp) & (dist >= cfg.min_start_goal_m) & (dist <= cfg.max_start_goal_m)
    gcand = np.flatnonzero(goal_ok.ravel())
    if gcand.size == 0:
        return None
    gr, gc = divmod(int(rng.choice(gcand)), grid.shape[1])
    xy = grid.grid_to_world(np.array([[sc + 0.5, sr + 0.5], [gc + 0.5, gr + 0.5]]))
    yaw = rng.uniform(-math.pi, math.pi, size=2)
    return np.array([xy[0, 0], xy[0, 1], yaw[0]]), np.array([xy[1, 0], xy[1, 1], yaw[1]])


def generate_world(seed: int, config: WorldConfig | None = None, kind: str | None = None) -> World:
    """Generate world number `seed` (deterministic). `kind=None` draws the kind from the seed.

    Retries the layout with fresh draws (same seed stream) until a start-goal pair within the geodesic window exists;
    raises `MnemoError` after `max_attempts` (only reachable with extreme configs)."""
    cfg = config or WorldConfig()
    if kind is not None and kind not in KINDS:
        raise InputError(f"generate_world kind: expected one of {KINDS}, got {kind!r}")
    seed = int(seed)
    if seed < 0:
        raise InputError(f"generate_world seed: expected a non-negative integer, got {seed}")
    if kind is None:
        kind = KINDS[int(np.random.default_rng(np.random.SeedSequence([seed, 7919])).integers(len(KINDS)))]
    rng = np.random.default_rng(np.random.SeedSequence([seed, KINDS.index(kind)]))
    for attempt in range(cfg.max_attempts):
        cv = _Canvas(cfg)
        _GENERATORS[kind](rng, cv, cfg)
        cv.outer_walls(cfg.wall_thickness_m)  # whatever a kind did, the world stays closed
        grid = OccupancyGrid(np.where(cv.occ, OCCUPIED, FREE).astype(np.int8), cfg.resolution)
        ends = _pick_endpoints(rng, grid, cfg)
        if ends is not None:
            start, goal = ends
            validate_world(grid, start, goal, cfg.robot_radius_m, cfg.safety_margin_m)
            if attempt:
                log.debug("world %s-%d: layout accepted on attempt %d", kind, seed, attempt + 1)
            return World(grid=grid, start=start, goal=goal, seed=seed, kind=kind, config=cfg)
    raise MnemoError(
        f"generate_world: no start/goal pair {cfg.min_start_goal_m}-{cfg.max_start_goal_m} m apart found for "
        f"kind={kind!r} seed={seed} in {cfg.max_attempts} layouts; loosen WorldConfig (size_m, difficulty)"
    )
