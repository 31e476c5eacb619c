"""The path a peer follows this step: the Controller's path, pruned ahead of the robot as Nav2's controllers get it.

Nav2's controllers receive the global plan transformed into the local costmap and pruned to `prune_distance` ahead
of the robot's nearest point on it (MPPI's `PathHandler`: 1.5 m by default, 1.7 m in its example for 0.5 m/s over a
2.8 s horizon); their path critics count in path *points* (`offset_from_furthest`), which assumes a planner's
spacing of about one costmap cell. Here the plan is the one the Controller tracks this step (`Controller._route`: the
given global path, or the own path planned on what the grids have shown, or the straight line to the goal when
nothing seen is in the way), cut from the robot's projection on it (`planning.global_path.project_onto_path`, from
the progress the Controller keeps) for `prune_distance` and resampled one grid cell apart, so that those counts mean
what they mean in Nav2. A path that stops short of the goal is continued to it, as `nav.reference` does.
"""

from __future__ import annotations

import numpy as np

from mnemo_mpc.planning.global_path import LOOKBACK_M, project_onto_path


def pruned_path(
    path: np.ndarray | None,
    pose: np.ndarray,
    goal: np.ndarray,
    progress: float,
    prune_distance: float,
    spacing: float,
) -> np.ndarray:
    """Points (M, 2), M >= 2, `spacing` metres apart by arc length, along `path` (K, 2) (None: the segment from the
    robot to the goal) from the robot's projection on it (searched from `progress` - LOOKBACK_M) for
    `prune_distance` metres or to the goal."""
    if not (spacing > 0 and prune_distance > 0):
        raise ValueError(f"pruned_path: expected spacing and prune_distance > 0, got {spacing!r}, {prune_distance!r}")
    xy, end = np.asarray(pose, dtype=float)[:2], np.asarray(goal, dtype=float)[:2]
    if path is None or len(path) < 1:
        pts = np.stack([xy, end])
        s0 = 0.0
    else:
        pts = np.asarray(path, dtype=float)[:, :2]
        if np.hypot(*(pts[-1] - end)) > 1e-9:
            pts = np.concatenate([pts, end[None]])
        s0 = project_onto_path(pts, xy, float(progress) - LOOKBACK_M) if len(pts) > 1 else 0.0
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(pts, axis=0).T))])
    s1 = min(s0 + prune_distance, s[-1])
    if s1 - s0 <= 1e-9:
        point = np.array([np.interp(s0, s, pts[:, 0]), np.interp(s0, s, pts[:, 1])])
        return np.stack([point, end])
    at = np.append(np.arange(s0, s1, spacing), s1)
    return np.stack([np.interp(at, s, pts[:, 0]), np.interp(at, s, pts[:, 1])], axis=-1)
