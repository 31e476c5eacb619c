"""Global path -> the local MPC's sub-goal and reference, checked against what the robot currently sees.

`mnemo_mpc.planning.global_path.local_reference` cuts N+1 reference points from the global path (planned on the known
map). The local grid may not have seen the far end of that cut yet (around a corner, behind a door) and the MPC
refuses a goal in unknown or occupied cells, so the sub-goal is pulled back along the reference to the farthest point
that is known-free, with some room around it, in the local grid.

The path may come from anywhere (a `nav_msgs/Path` of waypoints metres apart, a bare start -> goal pair): the cut is
made by arc length from the robot's projection onto the path's segments, so its density does not matter, and a path
that stops short of the goal is continued by a straight segment to it, so the robot is never left parked at the path's
end outside the goal tolerance.
"""

from __future__ import annotations

import math

import numpy as np

from mnemo_mpc.planning.global_path import LOOKBACK_M, local_reference, path_headings, project_onto_path
from mnemo_mpc.planning.grid import OccupancyGrid


def _free_in_window(grid: OccupancyGrid, xy: np.ndarray, clearance_cells: int, free: np.ndarray) -> bool:
    cell = grid.world_to_cell(xy)
    if not grid.in_bounds(cell):
        return True  # outside the window the MPC does not check the goal; the cost only pulls towards it
    r, c = int(cell[0]), int(cell[1])
    r0, r1 = max(r - clearance_cells, 0), min(r + clearance_cells + 1, grid.shape[0])
    c0, c1 = max(c - clearance_cells, 0), min(c + clearance_cells + 1, grid.shape[1])
    return bool(free[r0:r1, c0:c1].all())


def subgoal_and_reference(
    path: np.ndarray,
    pose: np.ndarray,
    goal: np.ndarray,
    grid: OccupancyGrid,
    n: int,
    dt: float,
    v_ref: float,
    progress: float,
    clearance_m: float = 0.0,
    profile: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """(sub-goal (x, y, yaw), reference (N+1, 2), new progress) for the MPC at `pose`.

    `progress` is the arc length along `path` returned by the previous call (0 for a new path); the reference points
    are `v_ref * dt` apart along the path (`local_reference`), whatever the path's density, or spaced by a speed
    `profile` (`regulated_speed`).
    """
    path, goal = np.asarray(path, dtype=float), np.asarray(goal, dtype=float)
    if len(path) and np.any(path[-1] != goal[:2]):
        path = np.concatenate([path, goal[None, :2]], axis=0)  # continue a path that stops short of the goal
    ref = local_reference(path, pose, n, dt, v_ref, goal_yaw=float(goal[2]), progress=progress, profile=profile)
    points = ref.points.copy()
    points[0] = pose[:2]
    free = grid.free_mask()
    cells = int(math.ceil(clearance_m / grid.resolution))
    if ref.at_end and _free_in_window(grid, goal[:2], 0, free):  # the path ends at the goal (above)
        return np.asarray(goal, dtype=float).copy(), points, ref.progress
    if _free_in_window(grid, ref.goal[:2], cells, free):
        return ref.goal.copy(), points, ref.progress
    for k in range(n, 0, -1):
        if _free_in_window(grid, points[k], cells, free):
            break
    else:
        k = 1  # nothing ahead is known-free: aim one step ahead; the clearance constraint keeps the robot safe
    d = points[min(k + 1, n)] - points[k - 1]
    yaw = math.atan2(d[1], d[0]) if np.any(np.abs(d) > 1e-9) else float(pose[2])
    return np.array([points[k, 0], points[k, 1], yaw]), points, ref.progress


def passage_room(grid: OccupancyGrid, points: np.ndarray, headings: np.ndarray, cap: float) -> np.ndarray:
    """Half the free width across the path (K,) at `points` (K, 2) with path `headings` (K,): the distance to the
    first occupied cell along the path's normal on the left plus that on the right (sampled every half cell, so to a
    quarter cell), each capped at `cap`, halved. Cells the grid has not seen count as free. A point in an occupied
    cell has none (0)."""
    occ = grid.occupied_mask()
    step = 0.5 * grid.resolution
    dist = np.arange(0.0, cap + 1e-9, step)  # (J,)
    normal = np.stack([-np.sin(headings), np.cos(headings)], axis=-1)  # (K, 2), to the left
    width = np.zeros(len(points))
    for side in (1.0, -1.0):
        ray = points[:, None, :] + side * dist[None, :, None] * normal[:, None, :]  # (K, J, 2)
        rc = grid.world_to_cell(ray)
        inside = grid.in_bounds(rc)
        hit = np.zeros(rc.shape[:2], bool)
        hit[inside] = occ[rc[..., 0][inside], rc[..., 1][inside]]
        # The surface lies between the last free sample and the first occupied one: half a step before the latter.
        width += np.where(hit.any(axis=1), np.maximum(dist[hit.argmax(axis=1)] - 0.5 * step, 0.0), dist[-1])
    return 0.5 * width


def regulated_speed(
    path: np.ndarray,
    pose: np.ndarray,
    progress: float,
    grid: OccupancyGrid,
    half_width: float,
    margin: float,
    v_top: float,
    v_slow: float,
    full_room: float,
    decel: float,
    horizon_s: float,
) -> tuple[np.ndarray, np.ndarray] | None:
    """The speed profile (arc lengths s, speeds v) along `path` ahead of `pose`: `v_top`, slowed where the path runs
    through a passage (Nav2's Regulated Pure Pursuit slows near obstacles in the same spirit). None when nothing
    ahead is tight: the constant `v_top`.

    The room at a path point is half the passage's width across the path there (`passage_room`, read from `grid`)
    less what the body needs (`half_width`, the planner's inflation radius, and the safety `margin`); the speed
    allowed there rises linearly from `v_slow` at no room to `v_top` at `full_room`. A backward pass makes the profile
    one the robot can follow braking at `decel` (v_i <= sqrt(v_{i+1}^2 + 2 decel ds)). It covers the path that `v_top`
    would cover in `horizon_s` seconds; points outside the grid keep `v_top`.

    Why: the MPC tracks reference points spaced `v dt` apart. At top speed its horizon reaches metres ahead, and in a
    passage 1.1-1.5x the robot's width points deep in the passage or round its next corner pull the robot into a
    converged stand-still against a block corner (the Jackal's whole dense family stalled so); spaced for the speed
    the passage allows, they lead it through. The width is measured *across* the path, so an obstacle on one side
    only -- a box passed with room on the other side, a moving one above all -- does not slow the robot (slowing
    beside a moving box let it catch the robot: eval with moving obstacles, mixed-1004)."""
    if v_top <= v_slow:
        return None
    path = np.asarray(path, dtype=float)
    seg = np.hypot(*np.diff(path, axis=0).T)
    s = np.concatenate([[0.0], np.cumsum(seg)])
    if s[-1] <= 0.0:
        return None
    s_robot = project_onto_path(path, pose[:2], float(progress) - LOOKBACK_M)
    ahead = np.arange(s_robot, min(s_robot + v_top * horizon_s, s[-1]) + 1e-9, 0.5 * grid.resolution)
    pts = np.stack([np.interp(ahead, s, path[:, 0]), np.interp(ahead, s, path[:, 1])], axis=-1)
    headings = path_headings(pts) if len(pts) > 1 else np.array([float(pose[2])])
    # Each side capped at the whole width that allows v_top: one open side alone then makes it so.
    room = passage_room(grid, pts, headings, 2.0 * (half_width + margin + full_room)) - half_width - margin
    room[~grid.in_bounds(grid.world_to_cell(pts))] = np.inf
    v = v_slow + (v_top - v_slow) * np.clip(room / full_room, 0.0, 1.0)
    if np.all(v >= v_top):
        return None
    ds = np.diff(ahead)
    for i in range(len(v) - 2, -1, -1):
        v[i] = min(v[i], math.sqrt(v[i + 1] ** 2 + 2.0 * decel * ds[i]))
    return ahead, v


def visible_subgoal(grid: OccupancyGrid, pose: np.ndarray, goal: np.ndarray, clearance_m: float = 0.0) -> np.ndarray:
    """With no global path: the goal itself, unless it lies in the grid in a cell not known to be free (unknown: not
    seen yet, or beyond a smaller costmap fitted into the planning window). Then the sub-goal is the known-free point
    (with `clearance_m` around it) on the straight line pose -> goal closest to the goal, heading along the line; the
    MPC would refuse a goal in unknown space, and the point moves on as the grid fills in. An occupied goal is left
    as it is, for the MPC to refuse with its reason."""
    goal = np.asarray(goal, dtype=float)
    cell = grid.world_to_cell(goal[:2])
    if not grid.in_bounds(cell):
        return goal.copy()
    free = grid.free_mask()
    if free[cell[0], cell[1]] or grid.data[cell[0], cell[1]] >= grid.occupied_thresh:
        return goal.copy()
    cells = int(math.ceil(clearance_m / grid.resolution))
    d = goal[:2] - np.asarray(pose[:2], dtype=float)
    length = float(np.hypot(*d))
    for s in np.arange(length, 0.0, -0.5 * grid.resolution):  # from the goal back towards the robot
        xy = pose[:2] + d * (s / length)
        if grid.in_bounds(grid.world_to_cell(xy)) and _free_in_window(grid, xy, cells, free):
            return np.array([xy[0], xy[1], math.atan2(d[1], d[0])])
    return goal.copy()
