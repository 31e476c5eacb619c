"""Seeded procedural generator of indoor navigation worlds (seed 002 §5.2: "2787 different environments").

The paper collects its SQP dataset by driving an MPC agent through thousands of indoor layouts "with narrow corridors
and doors"; it does not publish the layouts, so this module generates them: rooms split by walls with doors, a
corridor maze, an office (rooms off a corridor), clutter fields, open halls, and rooms with clutter ("mixed"). Named
only, never drawn by a seed: "dense", blocks separated by passages 1.1-1.5x the robot's width (issue 10 item 5).
Opt-in moving obstacles (`WorldConfig.moving_obstacles`): constant-speed boxes and cylinders going back and forth on
free segments, part of the `World` so that a seed fixes their motion too. `WorldConfig.moving_kind` picks the family:
"patrol" (those, the default), or the people-and-carts family of issue 28 laid against the start -> goal path --
"crossing" pedestrians (0.5-1.4 m/s across it), "head_on" and "overtaking" carts (along it, towards and ahead of the
robot), "stop_go" (across it, stopping and starting), "mixed" (each obstacle one of those four) -- each timed to meet
the path where a robot at `timing_speed_m_s` would be.

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
# Families generated only when named (`generate_world(kind=...)`, `eval --world-kinds`): a seed draws its kind from
# KINDS alone, so adding a family here leaves every seed's world -- and every figure measured on seeds -- unchanged.
EXTRA_KINDS: tuple[str, ...] = ("dense",)
ALL_KINDS: tuple[str, ...] = KINDS + EXTRA_KINDS
# Moving-obstacle families (`WorldConfig.moving_kind`, module docstring); "patrol" is the original one.
MOVING_KINDS: tuple[str, ...] = ("patrol", "crossing", "head_on", "overtaking", "stop_go", "mixed")
# Passages of the dense family, as multiples of the robot's width (issue 10 item 5).
DENSE_PASSAGE_FACTORS: tuple[float, float] = (1.1, 1.5)


@dataclass(frozen=True)
class WorldConfig:
    """Generator knobs. Lengths in metres. `difficulty` in [0, 1] narrows doors and corridors, adds clutter and
    rooms; the defaults give ~12 m square worlds whose start-goal paths take ~150-200 MPC steps at 10 Hz, the
    episode length the paper reports (seed 002 §5.2: "180 steps on average")."""

    size_m: tuple[float, float] = (12.0, 12.0)  # (x extent, y extent) including the outer walls
    resolution: float = 0.05
    difficulty: float = 0.5
    # The planner's inflation radius, one source of truth: a disc's radius, half a polygon footprint's width across
    # its direction of travel (`for_robot` sets it, the width and the margin from a robot profile).
    robot_radius_m: float = RobotModel.radius
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
    # Robot width across its direction of travel, which the dense family's passages are measured against; None: the
    # disc footprint's diameter 2 * robot_radius_m.
    robot_width_m: float | None = None
    # Dense family: lattice blocks between passages (side in metres, smaller with difficulty).
    dense_block_m: tuple[float, float] = (0.4, 1.2)
    # Moving obstacles (opt-in): count per world, their speed and size (cylinder radius or box half-side).
    moving_obstacles: int = 0
    moving_speed_m_s: tuple[float, float] = (0.2, 0.5)
    moving_size_m: tuple[float, float] = (0.15, 0.3)
    moving_path_m: tuple[float, float] = (1.5, 5.0)  # length of the back-and-forth segment
    # The family (module docstring): "patrol" keeps every seed's obstacles as they were before the others existed
    moving_kind: str = "patrol"
    crossing_speed_m_s: tuple[float, float] = (0.5, 1.4)  # people walking (issue 28)
    cart_speed_m_s: tuple[float, float] = (0.2, 0.8)  # head-on and overtaking carts; stop-go obstacles
    stop_go_s: tuple[float, float] = (0.5, 2.0)  # a stop-go obstacle's moving and standing spells, each drawn here
    timing_speed_m_s: float = 0.5  # the robot's speed along its path assumed when timing the meeting

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

        if self.robot_width_m is not None and not (math.isfinite(self.robot_width_m) and self.robot_width_m > 0):
            raise InputError(f"WorldConfig.robot_width_m: expected > 0 m or None, got {self.robot_width_m}")
        if isinstance(self.moving_obstacles, bool) or not isinstance(self.moving_obstacles, int):
            raise InputError(
                f"WorldConfig.moving_obstacles: expected a count (int >= 0), got {self.moving_obstacles!r}"
            )
        if self.moving_obstacles < 0:
            raise InputError(f"WorldConfig.moving_obstacles: expected >= 0, got {self.moving_obstacles}")
        if self.moving_kind not in MOVING_KINDS:
            raise InputError(f"WorldConfig.moving_kind: expected one of {MOVING_KINDS}, got {self.moving_kind!r}")
        if not (math.isfinite(self.timing_speed_m_s) and self.timing_speed_m_s > 0):
            raise InputError(f"WorldConfig.timing_speed_m_s: expected > 0 m/s, got {self.timing_speed_m_s}")
        ranges = ("crossing_speed_m_s", "cart_speed_m_s", "stop_go_s")
        for name in ("dense_block_m", "moving_speed_m_s", "moving_size_m", "moving_path_m", *ranges):
            lo, hi = getattr(self, name)
            if not (math.isfinite(lo) and math.isfinite(hi) and 0 < lo <= hi):
                raise InputError(f"WorldConfig.{name}: expected (lo, hi) with 0 < lo <= hi, got {(lo, hi)}")

    @classmethod
    def for_robot(cls, robot: RobotModel, **overrides: object) -> WorldConfig:
        """The generator configured for `robot`; `overrides` set any other field (and win over these).

        * `robot_radius_m`: the planner's inflation radius, `global_path.inflation_radius` -- the disc's radius, or
          half a polygon footprint's width across its direction of travel (its circumscribed disc would wall off
          gaps the body passes lengthwise); `robot_width_m`: that width (None for a disc: its diameter);
          `safety_margin_m`: the robot's.
        * `endpoint_clearance_m`: at least the circumscribed radius + margin + two cells, so the robot can turn in
          place at its start and goal.
        * `corridor_width_m`: corridors at least as wide as the robot's narrowest door (the default range for the
          default robot, shifted up for a wider one).
        The default robot gets `WorldConfig()` exactly."""
        from mnemo_mpc.planning.global_path import inflation_radius, robot_width

        circle = robot.shape.is_circle
        fields: dict[str, object] = {
            "robot_radius_m": inflation_radius(robot),
            "safety_margin_m": float(robot.safety_margin),
            "robot_width_m": None if circle else robot_width(robot),
        }
        fields.update(overrides)
        resolution = float(fields.get("resolution", cls.resolution))  # type: ignore[arg-type]
        turn = float(robot.radius) + float(fields["safety_margin_m"]) + 2 * resolution  # type: ignore[arg-type]
        fields.setdefault("endpoint_clearance_m", max(cls.endpoint_clearance_m, turn))
        if "corridor_width_m" not in overrides:
            lo, hi = cls.corridor_width_m
            extra = float(fields.get("door_extra_min_m", cls.door_extra_min_m))  # type: ignore[arg-type]
            door = 2.0 * (float(fields["robot_radius_m"]) + float(fields["safety_margin_m"])) + extra  # type: ignore[arg-type]
            fields["corridor_width_m"] = (max(lo, door), max(hi, door + hi - lo))
        return cls(**fields)  # type: ignore[arg-type]

    @property
    def width_m(self) -> float:
        """The robot's width: `robot_width_m`, else the disc footprint's diameter."""
        return 2.0 * self.robot_radius_m if self.robot_width_m is None else float(self.robot_width_m)

    @property
    def dense_passage_m(self) -> tuple[float, float]:
        """(lo, hi) passage widths of the dense family: 1.1-1.5x the robot's width, and never so narrow that the
        footprint plus margin on both sides cannot pass (clearance > inflation needs a gap of 2 * inflation plus one
        cell at this resolution). Where that floor is above 1.5x the width (a small robot with a wide margin: the
        TurtleBot3 Burger's 0.178 m needs 0.288 m at 0.05 m cells), the passages are the floor to the next cell --
        the narrowest this grid can make passable -- and `dense_passage_factors` says what they are."""
        f_lo, f_hi = DENSE_PASSAGE_FACTORS
        lo = max(f_lo * self.width_m, 2.0 * self.inflation_m + self.resolution)
        hi = max(f_hi * self.width_m, lo + self.resolution)
        return lo, hi

    @property
    def dense_passage_factors(self) -> tuple[float, float]:
        """The dense family's passage widths as multiples of the robot's width (1.1-1.5 unless the floor binds)."""
        lo, hi = self.dense_passage_m
        return lo / self.width_m, hi / self.width_m

    @property
    def inflation_m(self) -> float:
        """Clearance the robot centre needs: footprint radius plus safety margin."""
        return self.robot_radius_m + self.safety_margin_m

    @property
    def door_width_min_m(self) -> float:
        return 2.0 * self.inflation_m + self.door_extra_min_m


@dataclass(frozen=True)
class MovingObstacle:
    """An obstacle going back and forth at constant `speed` (m/s) on the segment `a` -> `b` (map frame): a triangle
    wave in time that starts `phase` (a fraction of one round trip) along it. `shape` "cylinder" has radius
    `size[0]`; "box" has half extents `size` and a fixed heading `yaw`. The motion is a pure function of time, so a
    world (and its seed) fixes it: every run of a world sees the same obstacle at the same place."""

    shape: str
    size: tuple[float, float]
    a: tuple[float, float]
    b: tuple[float, float]
    speed: float
    phase: float = 0.0
    yaw: float = 0.0
    # Stop and go: it moves `go_s` seconds, stands `stop_s`, and so on (stop_s 0: it never stops)
    go_s: float = 0.0
    stop_s: float = 0.0
    kind: str = "patrol"  # the family it was placed for (`MOVING_KINDS`)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.go_s) and math.isfinite(self.stop_s) and self.stop_s >= 0):
            raise InputError(f"MovingObstacle go_s/stop_s: expected finite, stop_s >= 0, got {self.go_s}/{self.stop_s}")
        if self.stop_s > 0 and not self.go_s > 0:
            raise InputError(f"MovingObstacle.go_s: expected > 0 s with stop_s > 0, got {self.go_s}")
        if self.shape not in ("cylinder", "box"):
            raise InputError(f"MovingObstacle.shape: expected 'cylinder' or 'box', got {self.shape!r}")
        if len(self.size) != 2 or not all(math.isfinite(v) and v > 0 for v in self.size):
            raise InputError(f"MovingObstacle.size: expected two positive half extents in metres, got {self.size}")
        if not (math.isfinite(self.speed) and self.speed >= 0):
            raise InputError(f"MovingObstacle.speed: expected >= 0 m/s, got {self.speed}")
        if not np.all(np.isfinite(np.r_[self.a, self.b, self.phase, self.yaw])):
            raise InputError(f"MovingObstacle a/b/phase/yaw: expected finite numbers, got {self}")

    @property
    def length_m(self) -> float:
        return float(math.hypot(self.b[0] - self.a[0], self.b[1] - self.a[1]))

    @property
    def bounding_radius_m(self) -> float:
        """Radius of the disc around the centre that holds the whole obstacle."""
        return float(self.size[0] if self.shape == "cylinder" else math.hypot(*self.size))

    def _fraction(self, t: float) -> tuple[float, float]:
        """(fraction of the way from a to b, direction +1 towards b / -1 back to a) at time t."""
        if self.length_m == 0 or self.speed == 0:
            return 0.0, 0.0
        if self.stop_s > 0:  # the clock of its motion runs only in the moving spells
            n, r = divmod(t, self.go_s + self.stop_s)
            f, sign = self._fraction_moving(n * self.go_s + min(r, self.go_s))
            return f, sign if r < self.go_s else 0.0
        return self._fraction_moving(t)

    def _fraction_moving(self, t: float) -> tuple[float, float]:
        period = 2.0 * self.length_m / self.speed
        s = (t / period + self.phase) % 1.0
        return (2.0 * s, 1.0) if s < 0.5 else (2.0 - 2.0 * s, -1.0)

    def position(self, t: float) -> np.ndarray:
        """Centre (x, y) at time t seconds."""
        f, _ = self._fraction(float(t))
        a, b = np.asarray(self.a, dtype=float), np.asarray(self.b, dtype=float)
        return a + f * (b - a)

    def velocity(self, t: float) -> np.ndarray:
        """Velocity (vx, vy) in m/s at time t (one-sided at the turning points; 0 while a stop-go one stands)."""
        _, sign = self._fraction(float(t))
        if sign == 0.0:
            return np.zeros(2)
        d = (np.asarray(self.b, dtype=float) - np.asarray(self.a, dtype=float)) / self.length_m
        return sign * self.speed * d


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
    moving: tuple[MovingObstacle, ...] = ()  # obstacles that move (the grid holds only the static ones)

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


def validate_world(
    grid: OccupancyGrid,
    start: np.ndarray,
    goal: np.ndarray,
    robot_radius_m: float = 0.2,
    safety_margin_m: float = 0.05,
) -> None:
    """Raise `InfeasibleProblemError` unless start and goal are in bounds, clear of obstacles by the footprint plus
    margin, and joined by a traversable path (same 4-connected component of the inflated free space).

    `robot_radius_m` is the planner's inflation radius: a disc robot's radius, or for a polygon footprint half its
    width across its direction of travel (`WorldConfig.for_robot`, `global_path.inflation_radius`) -- the
    circumscribed disc would call gaps impassable that the body passes lengthwise; the global path checks the
    oriented body itself."""
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


def passage_bottleneck_m(grid: OccupancyGrid, start: np.ndarray, goal: np.ndarray) -> float:
    """Width of the narrowest passage on the widest start-goal route: twice the largest clearance c such that start
    and goal are joined (4-connected) through cells of clearance >= c. Every route passes a gap no wider than this,
    and one route passes none narrower. From cell-centre clearances, so it is exact for gaps an odd number of cells
    wide and one cell low for even ones. 0 when start and goal are not joined at all."""
    clear = clearance_map(grid)
    (sr, sc), (gr, gc) = (
        tuple(int(v) for v in grid.world_to_cell(np.asarray(p, dtype=float)[:2])) for p in (start, goal)
    )
    levels = np.unique(clear[clear > 0])
    top = min(clear[sr, sc], clear[gr, gc])

    def joined(c: float) -> bool:
        labels, _ = ndimage.label(clear >= c)
        return labels[sr, sc] != 0 and labels[sr, sc] == labels[gr, gc]

    levels = levels[levels <= top]
    if levels.size == 0 or not joined(levels[0]):
        return 0.0
    lo, hi = 0, levels.size - 1  # invariant: joined(levels[lo]); find the largest such index
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if joined(levels[mid]):
            lo = mid
        else:
            hi = mid - 1
    return float(2.0 * levels[lo])


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


def _lattice_tree(rng: np.random.Generator, nx: int, ny: int) -> tuple[np.ndarray, set[tuple[int, int]]]:
    """The 4-neighbour edges (a, b) of an nx x ny lattice of cells (index row * nx + col) and the edges of a random
    spanning tree of it (minimum spanning tree under uniform random weights): open the tree's edges and every cell is
    reachable; open more for loops."""
    idx = np.arange(nx * ny).reshape(ny, nx)
    edges = np.concatenate(
        [np.stack([idx[:, :-1].ravel(), idx[:, 1:].ravel()], 1), np.stack([idx[:-1, :].ravel(), idx[1:, :].ravel()], 1)]
    )
    wts = rng.uniform(1.0, 2.0, size=len(edges))
    tree = minimum_spanning_tree(coo_matrix((wts, (edges[:, 0], edges[:, 1])), shape=(nx * ny, nx * ny))).tocoo()
    return edges, {(min(a, b), max(a, b)) for a, b in zip(tree.row, tree.col, strict=True)}


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
    edges, keep = _lattice_tree(rng, nx, ny)
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


def _lattice(rng: np.random.Generator, n: int, wall: int, lane: int, block: tuple[int, int]) -> list[int]:
    """Centre cells of lanes across an axis of `n` cells: lanes of up to `lane` cells separated by blocks drawn in
    `block` cells, starting after a random block from the wall."""
    centres = []
    c = wall + int(rng.integers(0, block[1] + 1)) + lane // 2
    while c + (lane + 1) // 2 <= n - wall:
        centres.append(c)
        c += lane + int(rng.integers(block[0], block[1] + 1))
    return centres


def _gen_dense(rng: np.random.Generator, cv: _Canvas, cfg: WorldConfig) -> None:
    """Dense clutter: solid blocks on a jittered lattice separated by passages 1.1-1.5x the robot's width.

    Lanes run along both axes; each lane segment between two crossings gets its own width, drawn in whole cells
    within `cfg.dense_passage_m`, so every gap between two blocks is a passage in that range. A random spanning tree
    of the crossings keeps every segment it uses open and closes the others with a probability growing with
    difficulty (closed segments merge blocks into L/T/U shapes). A few clearings around crossings hold the start
    and the goal. Carving only ever removes occupancy, so no gap can end up narrower than the lane carved into it;
    `generate_world` then measures the start-goal bottleneck (`passage_bottleneck_m`) and redraws the layout if it
    is out of range."""
    res = cv.res
    lo, hi = cfg.dense_passage_m
    n_lo, n_hi = int(math.ceil(lo / res - 1e-9)), int(math.floor(hi / res + 1e-9))
    b_lo_m, b_hi_m = cfg.dense_block_m
    b_hi_m = max(b_lo_m, _lerp(b_hi_m, b_lo_m, 0.6 * cfg.difficulty))
    block = (max(1, round(b_lo_m / res)), max(1, round(b_hi_m / res)))
    h, w = cv.occ.shape
    wall = int(round(cfg.wall_thickness_m / res))
    xs = _lattice(rng, w, wall, n_hi, block)
    ys = _lattice(rng, h, wall, n_hi, block)
    if len(xs) < 2 or len(ys) < 2:
        return  # the world is too small for a lattice: _pick_endpoints finds nothing and the layout is redrawn
    cv.occ[:] = True
    nx, ny = len(xs), len(ys)
    edges, keep = _lattice_tree(rng, nx, ny)
    p_open = _lerp(0.85, 0.5, cfg.difficulty)
    for a, b in edges:
        if (a, b) not in keep and rng.random() >= p_open:
            continue
        (ra, ca), (rb, cb) = divmod(int(a), nx), divmod(int(b), nx)
        k = int(rng.integers(n_lo, n_hi + 1))
        if ra == rb:  # horizontal segment: rows across the lane, columns from crossing to crossing
            r0 = ys[ra] - k // 2
            cv.occ[r0 : r0 + k, xs[ca] - n_hi // 2 : xs[cb] + (n_hi + 1) // 2] = False
        else:
            c0 = xs[ca] - k // 2
            cv.occ[ys[ra] - n_hi // 2 : ys[rb] + (n_hi + 1) // 2, c0 : c0 + k] = False
    # Clearings: a square around a few crossings, wide enough for a start or goal pose with its endpoint clearance.
    side = int(math.ceil((2.0 * cfg.endpoint_clearance_m + 0.3) / res))
    for node in rng.choice(nx * ny, size=min(nx * ny, 3 + int(rng.integers(0, 3))), replace=False):
        r, c = divmod(int(node), nx)
        cy, cx = ys[r], xs[c]
        cv.occ[max(0, cy - side // 2) : cy + (side + 1) // 2, max(0, cx - side // 2) : cx + (side + 1) // 2] = False


_GENERATORS = {
    "rooms": lambda rng, cv, cfg: _gen_rooms(rng, cv, cfg, clutter=0.0),
    "corridor": _gen_corridor,
    "doors": _gen_doors,
    "clutter": _gen_clutter,
    "open": _gen_open,
    "mixed": _gen_mixed,
    "dense": _gen_dense,
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


def _place_moving(
    rng: np.random.Generator, grid: OccupancyGrid, start: np.ndarray, goal: np.ndarray, cfg: WorldConfig
) -> tuple[MovingObstacle, ...]:
    """`cfg.moving_obstacles` back-and-forth obstacles on straight free segments: the obstacle clears every static
    obstacle by one cell along its whole segment, and stays `inflation + 0.3 m` clear of the start and the goal so
    that the robot is neither hit at rest at the start nor barred from the goal for good."""
    clear = clearance_map(grid)
    res = grid.resolution
    ends = np.stack([np.asarray(start, dtype=float)[:2], np.asarray(goal, dtype=float)[:2]])
    out: list[MovingObstacle] = []
    for _ in range(60 * cfg.moving_obstacles):
        if len(out) == cfg.moving_obstacles:
            break
        shape = "cylinder" if rng.random() < 0.5 else "box"
        size = rng.uniform(*cfg.moving_size_m, size=2)
        size = (float(size[0]), float(size[0])) if shape == "cylinder" else (float(size[0]), float(size[1]))
        reach = size[0] if shape == "cylinder" else math.hypot(*size)
        keep_off = reach + cfg.inflation_m + 0.3
        cand = np.flatnonzero((clear > reach + res).ravel())
        if cand.size == 0:
            continue
        r, c = divmod(int(rng.choice(cand)), grid.shape[1])
        a = grid.grid_to_world(np.array([[c + 0.5, r + 0.5]]))[0]
        # Half the obstacles move along a grid axis, the direction of walls, lanes and corridors.
        heading = float(rng.integers(4) * 0.5 * math.pi if rng.random() < 0.5 else rng.uniform(-math.pi, math.pi))
        d = np.array([math.cos(heading), math.sin(heading)])
        target = float(rng.uniform(*cfg.moving_path_m))
        length = 0.0
        for s in np.arange(0.0, target + 1e-9, 0.5 * res):
            p = a + s * d
            rc = grid.world_to_cell(p)
            if not grid.in_bounds(rc) or clear[rc[0], rc[1]] <= reach + res:
                break
            if np.min(np.hypot(*(ends - p).T)) <= keep_off:
                break
            length = s
        if length < cfg.moving_path_m[0] or np.min(np.hypot(*(ends - a).T)) <= keep_off:
            continue
        b = a + length * d
        out.append(
            MovingObstacle(
                shape=shape,
                size=size,
                a=(float(a[0]), float(a[1])),
                b=(float(b[0]), float(b[1])),
                speed=float(rng.uniform(*cfg.moving_speed_m_s)),
                phase=float(rng.random()),
                yaw=float(rng.uniform(0, math.pi)) if shape == "box" else 0.0,
            )
        )
    if len(out) < cfg.moving_obstacles:
        log.debug("moving obstacles: placed %d of %d", len(out), cfg.moving_obstacles)
    return tuple(out)


def _start_goal_path(grid: OccupancyGrid, start: np.ndarray, goal: np.ndarray, cfg: WorldConfig) -> np.ndarray:
    """The geodesic start -> goal path (map frame, (M, 2)) through the traversable cells: where the robot will drive,
    near enough for timing and placing the path-bound obstacles (the planner's own path is not needed here)."""
    trav = clearance_map(grid) > cfg.inflation_m
    (sr, sc), (gr, gc) = grid.world_to_cell(np.asarray(start[:2])), grid.world_to_cell(np.asarray(goal[:2]))
    mcp = MCP_Geometric(np.where(trav, 1.0, np.inf))
    mcp.find_costs([(int(sr), int(sc))], [(int(gr), int(gc))])
    cells = np.asarray(mcp.traceback((int(gr), int(gc))), dtype=float)
    return grid.grid_to_world(cells[:, ::-1] + 0.5)


def _place_path_moving(
    rng: np.random.Generator, grid: OccupancyGrid, start: np.ndarray, goal: np.ndarray, cfg: WorldConfig
) -> tuple[MovingObstacle, ...]:
    """`cfg.moving_obstacles` obstacles of the people-and-carts family (module docstring) laid against the start ->
    goal path: a crossing or stop-go obstacle goes back and forth across it through a path point, a head-on or
    overtaking cart along a straight stretch of it; each is phased so that it is on the path (crossing), at the
    stretch's far end coming back (head-on) or leaving its near end (overtaking) when a robot driving the path at
    `timing_speed_m_s` gets there. Clearances as `_place_moving`: one cell from every static obstacle, and the start
    and goal kept clear."""
    clear = clearance_map(grid)
    res = grid.resolution
    path = _start_goal_path(grid, start, goal, cfg)
    arc = np.r_[0.0, np.cumsum(np.hypot(*np.diff(path, axis=0).T))]
    ends = np.stack([np.asarray(start, dtype=float)[:2], np.asarray(goal, dtype=float)[:2]])
    kinds = ("crossing", "head_on", "overtaking", "stop_go")
    out: list[MovingObstacle] = []

    def fits(p: np.ndarray, reach: float, keep_off: float) -> bool:
        rc = grid.world_to_cell(p)
        if not grid.in_bounds(rc) or clear[rc[0], rc[1]] <= reach + res:
            return False
        return bool(np.min(np.hypot(*(ends - p).T)) > keep_off)

    def at(s: float) -> np.ndarray:
        return np.array([np.interp(s, arc, path[:, 0]), np.interp(s, arc, path[:, 1])])

    for _ in range(60 * cfg.moving_obstacles):
        if len(out) == cfg.moving_obstacles or arc[-1] < 2.0:
            break
        kind = cfg.moving_kind if cfg.moving_kind != "mixed" else kinds[int(rng.integers(len(kinds)))]
        person = kind in ("crossing", "stop_go")
        shape = "cylinder" if person else "box"
        size = rng.uniform(*cfg.moving_size_m, size=2)
        size = (float(size[0]), float(size[0])) if person else (float(size[0]), float(size[1]))
        reach = size[0] if person else math.hypot(*size)
        keep_off = reach + cfg.inflation_m + 0.3
        lo, hi = cfg.crossing_speed_m_s if kind == "crossing" else cfg.cart_speed_m_s
        speed = float(rng.uniform(lo, hi))
        s_mid = float(rng.uniform(0.25, 0.75)) * arc[-1]
        if person:
            # Across the path at s_mid: out each side as far as the obstacle fits, up to half the segment's length
            p = at(s_mid)
            tangent = at(min(s_mid + 0.25, arc[-1])) - at(max(s_mid - 0.25, 0.0))
            if not np.hypot(*tangent) > 0 or not fits(p, reach, keep_off):
                continue
            normal = np.array([-tangent[1], tangent[0]]) / np.hypot(*tangent)
            half = float(rng.uniform(*cfg.moving_path_m)) / 2
            reach_out = []
            for sign in (1.0, -1.0):
                length = 0.0
                for d in np.arange(0.0, half + 1e-9, 0.5 * res):
                    if not fits(p + sign * d * normal, reach, keep_off):
                        break
                    length = d
                reach_out.append(length)
            if min(reach_out) < 0.5 + reach:  # it must clear the robot's lane on both sides
                continue
            a, b = p - reach_out[1] * normal, p + reach_out[0] * normal
            meet_s, f_meet = s_mid / cfg.timing_speed_m_s, reach_out[1] / (reach_out[0] + reach_out[1])
        else:
            # Along a straight stretch of the path: the chord from s0 to s1 must be clear for the obstacle
            length = float(rng.uniform(*cfg.moving_path_m))
            s0 = max(s_mid - length / 2, 0.0)
            s1 = min(s0 + length, arc[-1])
            a, b = at(s0), at(s1)
            chord = np.hypot(*(b - a))
            if chord < cfg.moving_path_m[0] or not all(
                fits(a + u * (b - a), reach, keep_off) for u in np.linspace(0.0, 1.0, int(chord / (0.5 * res)) + 2)
            ):
                continue
            if kind == "head_on":  # from the far end towards the robot as it reaches the near end
                a, b = b, a
                meet_s = s0 / cfg.timing_speed_m_s
            else:  # leaving the near end with the robot 1.5 m behind it
                meet_s = max(s0 - 1.5, 0.0) / cfg.timing_speed_m_s
            f_meet = 0.0
        period = 2.0 * float(np.hypot(*(b - a))) / speed
        go = stop = 0.0
        if kind == "stop_go":
            go, stop = (float(v) for v in rng.uniform(*cfg.stop_go_s, size=2))
            meet_s = (meet_s // (go + stop)) * go + min(meet_s % (go + stop), go)  # the clock of its motion
        out.append(
            MovingObstacle(
                shape=shape,
                size=size,
                a=(float(a[0]), float(a[1])),
                b=(float(b[0]), float(b[1])),
                speed=speed,
                # at the meeting time it is a fraction f_meet of the way a -> b, moving towards b
                phase=float((f_meet / 2.0 - meet_s / period) % 1.0),
                yaw=float(math.atan2(b[1] - a[1], b[0] - a[0])) if shape == "box" else 0.0,
                go_s=go,
                stop_s=stop,
                kind=kind,
            )
        )
    if len(out) < cfg.moving_obstacles:
        log.debug("moving obstacles (%s): placed %d of %d", cfg.moving_kind, len(out), cfg.moving_obstacles)
    return tuple(out)


def generate_world(seed: int, config: WorldConfig | None = None, kind: str | None = None) -> World:
    """Generate world number `seed` (deterministic). `kind=None` draws the kind from the seed among `KINDS`; the
    `EXTRA_KINDS` ("dense") are generated only when named.

    Retries the layout with fresh draws (same seed stream) until a start-goal pair within the geodesic window exists
    (and, for "dense", the start-goal bottleneck is a passage in `WorldConfig.dense_passage_m`); raises `MnemoError`
    after `max_attempts` (only reachable with extreme configs). Moving obstacles (`WorldConfig.moving_obstacles`)
    come from their own stream of the seed, so asking for them leaves the static world unchanged."""
    cfg = config or WorldConfig()
    if kind is not None and kind not in ALL_KINDS:
        raise InputError(f"generate_world kind: expected one of {ALL_KINDS}, got {kind!r}")
    seed = int(seed)
    if seed < 0:
        raise InputError(f"generate_world seed: expected a non-negative integer, got {seed}")
    if kind is None:
        kind = KINDS[int(np.random.default_rng(np.random.SeedSequence([seed, 7919])).integers(len(KINDS)))]
    passage = cfg.dense_passage_m if kind == "dense" else None
    rng = np.random.default_rng(np.random.SeedSequence([seed, ALL_KINDS.index(kind)]))
    for attempt in range(cfg.max_attempts):
        cv = _Canvas(cfg)
        _GENERATORS[kind](rng, cv, cfg)
        cv.outer_walls(cfg.wall_thickness_m)  # whatever a kind did, the world stays closed
        grid = OccupancyGrid(np.where(cv.occ, OCCUPIED, FREE).astype(np.int8), cfg.resolution)
        ends = _pick_endpoints(rng, grid, cfg)
        if ends is not None:
            start, goal = ends
            validate_world(grid, start, goal, cfg.robot_radius_m, cfg.safety_margin_m)
            if passage is not None:
                width = passage_bottleneck_m(grid, start, goal)
                if not passage[0] - cfg.resolution - 1e-9 <= width <= passage[1] + 1e-9:
                    log.debug("world %s-%d: bottleneck %.3f m outside %s, redrawn", kind, seed, width, passage)
                    continue
            if attempt:
                log.debug("world %s-%d: layout accepted on attempt %d", kind, seed, attempt + 1)
            moving: tuple[MovingObstacle, ...] = ()
            if cfg.moving_obstacles:
                mrng = np.random.default_rng(np.random.SeedSequence([seed, ALL_KINDS.index(kind), 104729]))
                place = _place_moving if cfg.moving_kind == "patrol" else _place_path_moving
                moving = place(mrng, grid, start, goal, cfg)
            return World(grid=grid, start=start, goal=goal, seed=seed, kind=kind, config=cfg, moving=moving)
    raise MnemoError(
        f"generate_world: no start/goal pair {cfg.min_start_goal_m}-{cfg.max_start_goal_m} m apart found for "
        f"kind={kind!r} seed={seed} in {cfg.max_attempts} layouts; loosen WorldConfig (size_m, difficulty)"
    )
