"""The robot's own cells are known free (issue 24 item 2), as Nav2's costmaps clear the footprint.

A lidar never sees the floor the robot stands on, and a limited field of view (the Jackal's 270 degrees) leaves the
sector behind it unknown. With unknown cells counted as obstacles (`unknown_policy: occupied`, the safe default) the
rear covering discs then start "in collision" -- the robot would never move -- and no turn in place is allowed.
`clear_robot_cells` marks free, on the grid the controller plans on:

* every cell whose centre lies inside the footprint at the robot's measured pose (occupied ones too, as Nav2 clears
  its footprint: the body is there, so a return inside it is noise or the robot itself) -- strictly inside, so a wall
  cell the body only comes near keeps its place in the margin; never at a *predicted* pose, which could lie in a wall;
* the *unknown* cells within the robot's turning circle -- the circumscribed radius plus the margin the MPC keeps --
  at the measured and the predicted pose, which the robot sweeps when it turns in place. Cells seen occupied there
  stay occupied.

What is cleared is only ever the robot's immediate surroundings; nothing far is invented.
"""

from __future__ import annotations

import numpy as np

from mnemo_mpc.planning.grid import FREE, UNKNOWN, OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel


def clear_robot_cells(
    grid: OccupancyGrid, robot: RobotModel, pose: np.ndarray, reach_m: float, also_unknown_at: np.ndarray | None = None
) -> OccupancyGrid:
    """`grid` with the footprint's cells at `pose` free and the unknown cells within `reach_m` of `pose` (and of the
    poses `also_unknown_at`, (K, 3)) free (module docstring); the same object when nothing changes."""
    pose = np.asarray(pose, dtype=float).reshape(3)
    poses = [pose] + ([] if also_unknown_at is None else list(np.asarray(also_unknown_at, dtype=float).reshape(-1, 3)))
    data = grid.data
    out = None
    for i, p in enumerate(poses):
        corners = grid.world_to_cell(p[:2] + reach_m * np.array([[-1, -1], [-1, 1], [1, -1], [1, 1]]))
        (r0, c0), (r1, c1) = np.maximum(corners.min(axis=0), 0), corners.max(axis=0) + 1
        r1, c1 = min(int(r1), data.shape[0]), min(int(c1), data.shape[1])
        if r0 >= r1 or c0 >= c1:
            continue
        rows, cols = np.mgrid[r0:r1, c0:c1]
        centres = grid.grid_to_world(np.stack([cols.ravel() + 0.5, rows.ravel() + 0.5], axis=-1))
        block = (out if out is not None else data)[r0:r1, c0:c1].reshape(-1)
        clear = (np.hypot(*(centres - p[:2]).T) <= reach_m) & (block == UNKNOWN)
        if i == 0:  # the measured pose: the body is there
            clear |= robot.shape.world_signed_distance(p, centres) < 0.0
        if not np.any(clear & (block != FREE)):
            continue
        if out is None:
            out = data.copy()
        view = out[r0:r1, c0:c1].reshape(-1)
        view[clear] = FREE
        out[r0:r1, c0:c1] = view.reshape(r1 - r0, c1 - c0)
    if out is None:
        return grid
    return grid.with_data(out)  # thresholds and semantics kept: a costmap stays one
