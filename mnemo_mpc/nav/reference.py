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

from mnemo_mpc.planning.global_path import local_reference
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
) -> tuple[np.ndarray, np.ndarray, float]:
    """(sub-goal (x, y, yaw), reference (N+1, 2), new progress) for the MPC at `pose`.

    `progress` is the arc length along `path` returned by the previous call (0 for a new path); the reference points
    are `v_ref * dt` apart along the path (`local_reference`), whatever the path's density.
    """
    path, goal = np.asarray(path, dtype=float), np.asarray(goal, dtype=float)
    if len(path) and np.any(path[-1] != goal[:2]):
        path = np.concatenate([path, goal[None, :2]], axis=0)  # continue a path that stops short of the goal
    ref = local_reference(path, pose, n, dt, v_ref, goal_yaw=float(goal[2]), progress=progress)
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
