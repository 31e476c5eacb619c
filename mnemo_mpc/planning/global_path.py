"""Global path on the inflated grid and the local MPC reference taken from it.

Seed 002 §5.2 drives a local SQP MPC through layouts "with narrow corridors and doors". A local optimiser alone stalls
behind walls and in dead ends, so it tracks a reference cut from a global shortest path. The search is
`skimage.graph.MCP_Geometric` (minimum-cost path, 8-connected, diagonal steps cost sqrt(2)) over cells whose
clearance exceeds radius + margin; a soft cost near obstacles keeps the path towards corridor centres, where the MPC
has room.

A polygon footprint (issue 10 item 2) is not inflated by its circumscribed radius: that disc blocks gaps the body
passes lengthwise (a 0.508 x 0.430 m base has a 0.666 m circumscribed circle). The grid search inflates by half the
body's width across its direction of travel (`inflation_radius`; the radius for a disc) + margin, and the path found
is then checked with the footprint oriented along it (`footprint_path_clearance`: the covering discs at every path
point, heading = path tangent). Where the body does not fit, the cells there are
blocked and the search repeated (`MAX_FOOTPRINT_REPLANS` times); a path that still does not fit is returned with a
warning naming where (the local MPC may still turn the body through), never silently. A disc robot skips the check:
its search is the one it always was.

`local_reference` cuts the MPC's reference from a path by arc length, starting at the robot's projection onto the
path's segments, so any sampling of the same polyline (this planner's 5 cm points, a `nav_msgs/Path` of waypoints
metres apart, a bare start -> goal pair) gives the same reference.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from mnemo_mpc.errors import InfeasibleProblemError, InputError, is_real
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)

# Re-plans after blocking where the oriented footprint does not fit (module docstring).
MAX_FOOTPRINT_REPLANS = 3
# How far behind the last projection the robot is searched for on the path (`local_reference`).
LOOKBACK_M = 1.0


@dataclass(frozen=True)
class PathConfig:
    preferred_clearance: float = 0.6  # metres; closer than this costs extra
    proximity_weight: float = 4.0  # extra cost per cell at zero clearance (linear ramp up to preferred_clearance)
    smoothing_sigma: float = 2.0  # Gaussian smoothing of the resampled path, in samples (0 = off)
    spacing: float = 0.05  # metres between resampled path points


def robot_width(robot: RobotModel) -> float:
    """The footprint's width across its direction of travel (its y extent; a disc's diameter) [m]: what a gap must
    exceed for the robot to drive through it."""
    _, _, y0, y1 = robot.shape.bounds
    return 2.0 * float(robot.radius) if robot.shape.is_circle else float(y1 - y0)


def inflation_radius(robot: RobotModel) -> float:
    """Half the robot's width across its direction of travel [m] (`robot_width`; the radius for a disc): the
    clearance the centre of a symmetric body needs driving through a gap. The grid search inflates obstacles by this
    plus the safety margin (module docstring). Not the footprint's narrowest width: for a base wider than long (the
    TurtleBot3s) that is its length, and a differential drive cannot pass a gap sideways."""
    return 0.5 * robot_width(robot)


def plan_global_path(
    grid_or_field: OccupancyGrid | DistanceField,
    start_xy: np.ndarray,
    goal_xy: np.ndarray,
    robot: RobotModel,
    config: PathConfig | None = None,
    unknown_policy: str = "occupied",
    margin: float | None = None,
    start_yaw: float | None = None,
    turn_back_cost_m: float = 0.0,
) -> np.ndarray:
    """Shortest collision-free path (K, 2) in map coordinates from `start_xy` to `goal_xy`, K >= 2.

    Cells closer than `inflation_radius(robot)` + `margin` (default: the robot's safety margin) to an obstacle are
    impassable, except within that distance of the start and goal themselves (a robot already inside its margin band
    must be able to leave it). A polygon footprint's path is then checked and re-planned where the body, oriented
    along it, does not fit (module docstring). With `start_yaw`, a path that leaves the start backwards (more than 90
    degrees off that heading) costs as much more as `turn_back_cost_m` metres more of its surroundings
    (`_turn_back_surcharge`). Raises `InfeasibleProblemError` when start or goal is outside the map, in an obstacle or
    unknown space, or no path joins them.
    """
    cfg = config or PathConfig()
    field = grid_or_field if isinstance(grid_or_field, DistanceField) else DistanceField(grid_or_field, unknown_policy)
    grid = field.grid
    start_xy = _finite_xy(start_xy, "start_xy")
    goal_xy = _finite_xy(goal_xy, "goal_xy")
    # In collision for sure: the centre nearer an obstacle than the footprint reaches at any heading.
    inner = float(robot.radius) if robot.shape.is_circle else robot.shape.inscribed_radius
    margin = robot.safety_margin if margin is None else margin
    if not (is_real(margin) and margin >= 0):
        raise InputError(f"plan_global_path.margin: expected metres >= 0, got {margin!r}")
    if start_yaw is not None and not is_real(start_yaw):
        raise InputError(f"plan_global_path.start_yaw: expected a finite angle in radians or None, got {start_yaw!r}")
    if not (is_real(turn_back_cost_m) and turn_back_cost_m >= 0):
        raise InputError(f"plan_global_path.turn_back_cost_m: expected metres >= 0, got {turn_back_cost_m!r}")
    inflation = inflation_radius(robot) + float(margin)
    cells = []
    for name, xy in (("start", start_xy), ("goal", goal_xy)):
        rc = grid.world_to_cell(xy)
        if not grid.in_bounds(rc):
            raise InfeasibleProblemError(f"{name} ({xy[0]:.3f}, {xy[1]:.3f}) lies outside the map")
        r, c = int(rc[0]), int(rc[1])
        if grid.occupied_mask()[r, c]:
            raise InfeasibleProblemError(f"{name} ({xy[0]:.3f}, {xy[1]:.3f}) lies in an occupied cell ({r}, {c})")
        if field.obstacles[r, c]:
            raise InfeasibleProblemError(f"{name} ({xy[0]:.3f}, {xy[1]:.3f}) lies in unknown space, cell ({r}, {c})")
        if field.values[r, c] < inner:
            raise InfeasibleProblemError(
                f"{name} ({xy[0]:.3f}, {xy[1]:.3f}) is in collision: clearance {field.values[r, c]:.3f} m < robot "
                f"{'radius' if robot.shape.is_circle else 'footprint inscribed radius'} {inner:.3f} m"
            )
        cells.append((r, c))

    clear = field.values
    passable = clear > inflation
    xs, ys = grid.cell_centers()
    for xy in (start_xy, goal_xy):
        near = np.hypot(xs - xy[0], ys - xy[1]) <= inflation + grid.resolution
        passable |= near & (clear >= inner)
    ramp = np.clip((cfg.preferred_clearance - clear) / max(cfg.preferred_clearance, 1e-9), 0.0, 1.0)
    costs = np.where(passable, 1.0 + cfg.proximity_weight * ramp, np.inf)
    if start_yaw is not None and turn_back_cost_m > 0:
        depth = 2.0 * inflation_radius(robot)
        costs = costs * (1.0 + _turn_back_surcharge(xs, ys, start_xy, float(start_yaw), turn_back_cost_m, depth))

    path = _search(grid, costs, cells, start_xy, goal_xy, cfg)
    if path is None:
        size = f"{robot.radius:.2f} m" if robot.shape.is_circle else f"{2 * inflation_radius(robot):.2f} m wide"
        raise InfeasibleProblemError(
            f"no collision-free path for a {size} robot (+{margin:.2f} m margin) from "
            f"({start_xy[0]:.2f}, {start_xy[1]:.2f}) to ({goal_xy[0]:.2f}, {goal_xy[1]:.2f})"
        )
    if robot.shape.is_circle:
        return path
    return _fit_footprint(field, path, costs, cells, start_xy, goal_xy, robot, cfg)


def _turn_back_surcharge(
    xs: np.ndarray, ys: np.ndarray, start_xy: np.ndarray, start_yaw: float, cost_m: float, depth_m: float
) -> np.ndarray:
    """The factor less 1 on each cell's cost that makes leaving `start_xy` backwards cost as much as `cost_m` metres
    more of the cells about it: the cells within `depth_m` of the start and more than 90 degrees off `start_yaw` as seen
    from it cost 1 + cost_m / depth_m times as much (the search's cost is a cell's cost times the length crossed, so
    crossing `depth_m` of them adds cost_m metres at their cost: in a lane, where the clearance cost triples a metre's,
    the same metres of lane).
    Why: a body that cannot turn in place where it stands (a Jackal in a 0.6 m lane) turns back only by backing out to
    a junction, 5-15 s of recoveries; a re-plan that sent it back for a route a little shorter than the one ahead
    stood it in the lane turning, and the next re-plan often sent it on again (dense-1013, 1041 mapless)."""
    dx, dy = xs - start_xy[0], ys - start_xy[1]
    behind = (dx * math.cos(start_yaw) + dy * math.sin(start_yaw) < 0) & (np.hypot(dx, dy) <= depth_m)
    return np.where(behind, cost_m / depth_m, 0.0)


def _search(
    grid: OccupancyGrid,
    costs: np.ndarray,
    cells: list[tuple[int, int]],
    start_xy: np.ndarray,
    goal_xy: np.ndarray,
    cfg: PathConfig,
) -> np.ndarray | None:
    """The minimum-cost 8-connected route over `costs`, resampled; None when start and goal are not joined."""
    from skimage.graph import MCP_Geometric

    mcp = MCP_Geometric(costs, fully_connected=True)
    cumulative, _ = mcp.find_costs([cells[0]], [cells[1]])
    if not np.isfinite(cumulative[cells[1]]):
        return None
    route = np.asarray(mcp.traceback(cells[1]), dtype=float)  # (K, 2) rows, cols
    pts = grid.grid_to_world(np.stack([route[:, 1] + 0.5, route[:, 0] + 0.5], axis=-1))
    pts = (
        np.concatenate([start_xy[None], pts[1:-1], goal_xy[None]], axis=0)
        if len(pts) > 2
        else np.stack([start_xy, goal_xy])
    )
    return _resample(pts, cfg.spacing, cfg.smoothing_sigma)


def path_headings(path: np.ndarray) -> np.ndarray:
    """Heading (K,) of the path's tangent at each point (central differences; one-sided at the ends)."""
    path = np.asarray(path, dtype=float)
    if len(path) < 2:
        return np.zeros(len(path))
    d = np.gradient(path, axis=0)
    return np.arctan2(d[:, 1], d[:, 0])


def footprint_path_clearance(field: DistanceField, path: np.ndarray, robot: RobotModel) -> np.ndarray:
    """Clearance (K,) of the footprint oriented along `path` (heading = path tangent) at each path point: the least
    esdf(disc centre) - disc radius over the robot's covering discs. Negative where the body would overlap an
    obstacle (within the cover's stated excess, `RobotModel.footprint_tolerance`, and the grid's resolution)."""
    path = np.asarray(path, dtype=float)
    yaw = path_headings(path)
    discs = robot.discs
    c, s = np.cos(yaw)[:, None], np.sin(yaw)[:, None]
    cx = path[:, 0:1] + c * discs[None, :, 0] - s * discs[None, :, 1]
    cy = path[:, 1:2] + s * discs[None, :, 0] + c * discs[None, :, 1]
    d = field.distance(np.stack([cx, cy], axis=-1))  # (K, D)
    return np.min(d - discs[None, :, 2], axis=1)


def _fit_footprint(
    field: DistanceField,
    path: np.ndarray,
    costs: np.ndarray,
    cells: list[tuple[int, int]],
    start_xy: np.ndarray,
    goal_xy: np.ndarray,
    robot: RobotModel,
    cfg: PathConfig,
) -> np.ndarray:
    """`path`, or a re-planned one where the oriented footprint does not fit (module docstring). Points within the
    circumscribed radius of the start and goal are not checked: the robot turns there to its own heading."""
    grid = field.grid
    xs, ys = grid.cell_centers()
    original, costs = costs, costs.copy()
    best, best_bad = path, None
    for attempt in range(MAX_FOOTPRINT_REPLANS + 1):
        near_ends = (
            np.minimum(np.hypot(*(path - start_xy).T), np.hypot(*(path - goal_xy).T)) <= robot.radius + grid.resolution
        )
        fit = footprint_path_clearance(field, path, robot)
        bad = np.flatnonzero((fit < 0.0) & ~near_ends)
        if best_bad is None or len(bad) < len(best_bad):
            best, best_bad = path, bad
        if len(bad) == 0:
            return path
        if attempt == MAX_FOOTPRINT_REPLANS:
            break
        # Block the route's cells where the body does not fit, keeping the start and goal cells open.
        for x, y in path[bad]:
            costs[np.hypot(xs - x, ys - y) <= 1.5 * grid.resolution] = np.inf
        for r, c in cells:
            costs[r, c] = original[r, c]
        path = _search(grid, costs, cells, start_xy, goal_xy, cfg)
        if path is None:
            break
    worst = footprint_path_clearance(field, best, robot)[best_bad]
    i = int(best_bad[int(np.argmin(worst))])
    log.warning(
        "global path: the footprint oriented along the path overlaps obstacles at %d of %d points (worst %.3f m at "
        "(%.2f, %.2f)); the local planner must turn the body through there",
        len(best_bad),
        len(best),
        float(worst.min()),
        best[i, 0],
        best[i, 1],
    )
    return best


@dataclass(frozen=True)
class LocalReference:
    points: np.ndarray  # (N+1, 2) reference positions for knots 0..N
    goal: np.ndarray  # (3,) sub-goal pose: the last reference point, heading along the path (final goal at the end)
    progress: float  # arc length (m) along the path of the robot's projection onto it
    at_end: bool  # the horizon reaches the end of the path


def project_onto_path(path: np.ndarray, xy: np.ndarray, s_min: float = 0.0) -> float:
    """Arc length along the polyline `path` (K, 2) of its point closest to `xy`, among the points at arc length
    >= `s_min`.

    The robot is projected onto the segments path[j] -> path[j+1], not onto the vertices, so the result does not
    depend on how densely the path is sampled: waypoints 2 m apart give what the same path sampled every 5 cm gives.
    Ties go to the earlier point.
    """
    path, xy = np.asarray(path, dtype=float), np.asarray(xy, dtype=float)
    seg_vec = np.diff(path, axis=0)
    seg_len = np.hypot(*seg_vec.T)
    s = np.concatenate([[0.0], np.cumsum(seg_len)])
    if s[-1] <= 0.0:
        return 0.0
    s_min = min(max(float(s_min), 0.0), float(s[-1]))
    first = min(max(int(np.searchsorted(s, s_min, side="right")) - 1, 0), len(seg_len) - 1)
    a, d, length = path[first:-1], seg_vec[first:], seg_len[first:]
    len2 = length**2
    # Zero-length segments (repeated waypoints) project onto their vertex.
    t = np.einsum("ij,ij->i", xy - a, d) / np.where(len2 > 0, len2, 1.0)
    t_min = np.zeros_like(t)
    if length[0] > 0:
        t_min[0] = (s_min - s[first]) / length[0]  # the first segment only counts from s_min on
    t = np.clip(t, t_min, 1.0)
    dist = np.hypot(*(a + t[:, None] * d - xy).T)
    k = int(np.argmin(dist))
    return float(s[first + k] + t[k] * length[k])


def local_reference(
    path: np.ndarray,
    state: np.ndarray,
    horizon: int,
    dt: float,
    speed: float,
    goal_yaw: float | None = None,
    progress: float = 0.0,
    lookback_m: float = LOOKBACK_M,
    profile: tuple[np.ndarray, np.ndarray] | None = None,
) -> LocalReference:
    """The MPC reference: `horizon`+1 points spaced `speed * dt` of arc length along `path`, from the robot's
    projection onto it. With a speed `profile` (arc lengths, speeds; `nav.reference.regulated_speed`) the spacing
    follows it instead: s_{k+1} = s_k + v(s_k) dt, `speed` beyond its end.

    Any sampling of the same polyline gives the same reference: the robot is projected onto the path's segments
    (`project_onto_path`) and the points are interpolated by arc length, so a sparse path (waypoints metres apart, a
    bare start -> goal pair) is tracked like a dense one. `progress` is the previous call's (0 for a new path); the
    projection is searched from `lookback_m` behind it onward, so the reference never jumps back to an earlier pass of
    a path that loops near itself.
    """
    path = np.asarray(path, dtype=float)
    if path.ndim != 2 or path.shape[1] != 2 or len(path) < 1 or not np.all(np.isfinite(path)):
        raise InputError(f"local_reference.path: expected finite (K, 2) points, got shape {path.shape}")
    state = np.asarray(state, dtype=float)
    if state.shape != (3,) or not np.all(np.isfinite(state)):
        raise InputError(f"local_reference.state: expected finite (x, y, yaw), got {state.tolist()}")
    if not math.isfinite(float(progress)):
        raise InputError(f"local_reference.progress: expected a finite arc length in metres, got {progress}")
    seg = np.hypot(*np.diff(path, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    s_robot = project_onto_path(path, state[:2], float(progress) - lookback_m)
    if profile is None:
        targets = s_robot + speed * dt * np.arange(horizon + 1)
    else:
        prof_s, prof_v = (np.asarray(a, dtype=float) for a in profile)
        targets = np.empty(horizon + 1)
        targets[0] = s_robot
        for k in range(horizon):
            targets[k + 1] = targets[k] + float(np.interp(targets[k], prof_s, prof_v, right=speed)) * dt
    at_end = bool(targets[-1] >= s[-1])
    targets = np.minimum(targets, s[-1])
    points = np.stack([np.interp(targets, s, path[:, 0]), np.interp(targets, s, path[:, 1])], axis=-1)
    if at_end and goal_yaw is not None:
        yaw = float(goal_yaw)
    else:
        d = _direction_at(path, s, seg, targets[-1])
        yaw = math.atan2(d[1], d[0]) if np.any(d) else float(state[2])
    return LocalReference(points, np.array([points[-1, 0], points[-1, 1], yaw]), s_robot, at_end)


def _direction_at(path: np.ndarray, s: np.ndarray, seg: np.ndarray, target: float) -> np.ndarray:
    """Direction of the segment holding arc length `target` (zero vector for a path of one point or one place)."""
    nonzero = np.flatnonzero(seg > 0)
    if len(nonzero) == 0:
        return np.zeros(2)
    j = min(max(int(np.searchsorted(s, target, side="left")) - 1, 0), len(seg) - 1)
    # A repeated waypoint has no direction: take the next real segment (the previous one at the end of the path).
    j = int(nonzero[min(int(np.searchsorted(nonzero, j)), len(nonzero) - 1)])
    return path[j + 1] - path[j]


def _resample(pts: np.ndarray, spacing: float, sigma: float) -> np.ndarray:
    seg = np.hypot(*np.diff(pts, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    if s[-1] <= 0:
        return np.stack([pts[0], pts[-1]])
    k = max(int(math.ceil(s[-1] / spacing)), 1)
    t = np.linspace(0.0, s[-1], k + 1)
    out = np.stack([np.interp(t, s, pts[:, 0]), np.interp(t, s, pts[:, 1])], axis=-1)
    if sigma > 0 and len(out) > 4:
        # Smoothing removes the 8-connected staircase; the ends are pinned to the true start and goal.
        sm = ndimage.gaussian_filter1d(out, sigma, axis=0, mode="nearest")
        sm[0], sm[-1] = out[0], out[-1]
        out = _resample(sm, spacing, 0.0)  # pinning the ends left uneven steps there
    return out


def _finite_xy(value: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=float).reshape(-1)
    if arr.size < 2:
        raise InputError(f"{name}: expected (x, y), got {np.asarray(value).tolist()}")
    arr = arr[:2]
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name}: contains NaN or inf: {arr.tolist()}")
    return arr
