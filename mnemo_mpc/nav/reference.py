"""Global path -> the local MPC's sub-goal and reference, checked against what the robot currently sees.

`mnemo_mpc.planning.global_path.local_reference` cuts N+1 reference points from the global path (planned on the known
map). The local grid may not have seen the far end of that cut yet (around a corner, behind a door) and the MPC
refuses a goal in unknown or occupied cells, so the sub-goal is pulled back along the reference to the farthest point
that is known-free, with some room around it, in the local grid.
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
    progress: int,
    clearance_m: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(sub-goal (x, y, yaw), reference (N+1, 2), new progress index) for the MPC at `pose`."""
    ref = local_reference(path, pose, n, dt, v_ref, goal_yaw=float(goal[2]), progress=progress)
    points = ref.points.copy()
    points[0] = pose[:2]
    end_is_goal = ref.at_end and np.linalg.norm(points[-1] - goal[:2]) < 0.05
    free = grid.free_mask()
    cells = int(math.ceil(clearance_m / grid.resolution))
    if end_is_goal and _free_in_window(grid, goal[:2], 0, free):
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
