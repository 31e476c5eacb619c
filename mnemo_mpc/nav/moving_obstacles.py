"""Moving obstacles seen in the local grids, and the room the MPC leaves them (issue 10: 0 collisions caused by the
robot among moving obstacles).

The MPC plans on one grid as if the world stood still, so it keeps its margin (0.05 m) from where a moving box *is*:
a box at 0.5 m/s covers that margin in 0.1 s, one control period, and a robot braking from its converged plan is
still moving when it arrives (eval with moving obstacles: open-1017 and doors-1010, both robot-caused).

Detection, from the grids alone (so the node does it as the simulator does): a cell is *moving evidence* when it is
occupied now after the grid has shown it free for at least `free_before_s` -- static structure is either never free
or flickers at its surface for single cells (measured on static worlds: at most 1 such cell per step, never 2
adjacent), while the leading face of a moving body turns a row of long-free cells occupied. Evidence of the last
`window_s` seconds is clustered (8-connected); clusters of at least `min_cells` cells are moving obstacles.

Prediction, without a velocity estimate: a detected face may move at up to `speed_m_s` (the fastest obstacle the
robot should expect; people walk at ~1.4 m/s, the generated worlds' boxes at 0.2-0.5 m/s), so the cells it can reach
before the robot stops -- `speed_m_s` times the robot's stopping time from its top speed plus one period -- are marked
occupied in the grid the MPC plans on (a reachable set, the conservative form of constant-velocity prediction). The
robot then keeps out of the way a moving body can come, or stops where it stands when the body comes for it; it is not
then the one that drives into it. Detections are forgotten after `hold_s` without new evidence.

Cells are tracked on the first grid's lattice: a rolling window (`sim.local_grid`, a ROS rolling costmap) moves by
whole cells, so two windows differ by an integer shift; a grid off that lattice (other resolution, a shift by a
fraction of a cell, a rotated window) starts the history afresh.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from mnemo_mpc.errors import InputError, check_integers, is_real
from mnemo_mpc.planning.grid import OCCUPIED, OccupancyGrid


@dataclass(frozen=True)
class MovingObstacleConfig:
    speed_m_s: float = 0.5  # the fastest obstacle expected
    free_before_s: float = 0.5  # a cell must have been free this long before it counts as moving evidence
    window_s: float = 0.3  # evidence of this long is clustered together
    min_cells: int = 4  # a cluster this large, with evidence from two steps or more, is a moving obstacle
    hold_s: float = 0.5  # a detection is kept this long after its last evidence
    # "Free" for the detector: an occupancy value (0-100) at most this -- free beyond doubt (the local grid's log-odds
    # floor reads 3 after a few misses), not a cell one grazing beam cleared once (20)
    free_value: int = 5
    # A free run counts when it ended this recently: a cell going from free to occupied passes through unsure values
    # (the local grid's log-odds take two hits from 3 to occupied)
    grace_s: float = 0.3

    def __post_init__(self) -> None:
        for name in ("speed_m_s", "free_before_s", "window_s", "hold_s", "grace_s"):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"MovingObstacleConfig.{name}: expected a finite number > 0, got {value!r}")
        check_integers(self, (("min_cells", 1, None), ("free_value", 0, 100)))


class FreeRuns:
    """Per cell of a rolling window, the start and end time of its latest run of "free" readings, kept on the first
    grid's lattice (module docstring): the history the detector and the tracker (`nav.tracking`) judge an occupied
    cell by -- a cell free for a while that reads occupied now was entered by something.

    `update(grid, now)` returns the runs as they stood before `grid` (what its occupied cells were before), moved onto
    its window, and records `grid`'s free cells. A grid off the first one's lattice restarts the history (`restarted`
    is then True for that update); a rotated window returns None (its cells are not the map's rows and columns)."""

    def __init__(self, free_value: int) -> None:
        self.free_value = int(free_value)
        self.reset()

    def reset(self) -> None:
        self._frame: tuple[float, float, float] | None = None  # first grid's (resolution, x, y)
        self._corner: tuple[int, int] | None = None  # (row, col) of the window's cell (0, 0) on the first's lattice
        # Per window cell: start and end time of its latest run of "free" updates (end == the last update's time:
        # free then, the run goes on)
        self._runs: np.ndarray | None = None  # (2, H, W): start, end
        self._last_update = math.nan  # time of the last update (none yet: every free cell starts a run)
        self.restarted = True

    def update(self, grid: OccupancyGrid, now: float) -> tuple[np.ndarray, np.ndarray, tuple[int, int]] | None:
        """(start, end) of each cell's free run before `grid`, and the window's corner (row, col) on the lattice;
        None for a rotated window (the history is dropped)."""
        res = grid.resolution
        ox, oy, yaw = grid.origin
        if yaw != 0.0:
            self.reset()
            return None
        self.restarted = self._frame is None
        col0 = row0 = 0.0
        if self._frame is not None:
            col0, row0 = (ox - self._frame[1]) / res, (oy - self._frame[2]) / res
            if res != self._frame[0] or abs(col0 - round(col0)) > 1e-6 or abs(row0 - round(row0)) > 1e-6:
                self.reset()
                col0 = row0 = 0.0
        if self._frame is None:
            self._frame = (res, ox, oy)
        corner = (int(round(row0)), int(round(col0)))
        # "Free beyond doubt": a value at most free_value. On a Nav2 costmap (`planning.costmap`) that is a free cell
        # with no obstacle within ~0.4 m (its inflation is above 5 nearer): the cells beside a wall flicker between
        # inflation and lethal with the lidar's noise, and counting every non-obstacle cell as free saw them as
        # entered -- false moving obstacles closed dense passages (eval --costmap inflated, 100 worlds: success 0.97,
        # 59 recoveries, against 1.00 and none with this reading; docs/costmap.md).
        free = (grid.data >= 0) & (grid.data <= self.free_value)
        before, ended = self._shifted_runs(corner, grid.shape)
        # A run starts where the last update did not read free (its run ended before then)
        start = np.where(free & (ended != self._last_update), now, before)
        end = np.where(free, now, ended)
        self._runs, self._corner, self._last_update = np.stack([start, end]), corner, now
        return before, ended, corner

    def _shifted_runs(self, corner: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
        """The previous window's free runs (start, end), moved onto this window; cells new to it have none (start
        +inf, end -inf: a run of no length, ended long ago)."""
        runs = np.stack([np.full(shape, np.inf), np.full(shape, -np.inf)])
        if self._runs is None or self._corner is None:
            return runs
        dr, dc = corner[0] - self._corner[0], corner[1] - self._corner[1]
        ph, pw = self._runs.shape[1:]
        r0, r1 = max(0, -dr), min(shape[0], ph - dr)
        c0, c1 = max(0, -dc), min(shape[1], pw - dc)
        if r0 < r1 and c0 < c1:
            runs[:, r0:r1, c0:c1] = self._runs[:, r0 + dr : r1 + dr, c0 + dc : c1 + dc]
        return runs


class MovingObstacles:
    """Per-step detector and reachable-set inflation (module docstring). `update` takes each step's grid with the
    time and returns the grid to plan on."""

    def __init__(self, config: MovingObstacleConfig, reach_m: float) -> None:
        if not (is_real(reach_m) and reach_m >= 0):
            raise InputError(f"MovingObstacles.reach_m: expected metres >= 0, got {reach_m!r}")
        self.config = config
        self.reach_m = float(reach_m)
        self._runs = FreeRuns(config.free_value)
        self.reset()

    def reset(self) -> None:
        self._runs.reset()
        self._evidence: list[tuple[float, np.ndarray]] = []  # (time, global (row, col) cells)
        self._detected: list[tuple[float, np.ndarray]] = []  # (time of last evidence, global cells of the cluster)
        self.last_detections = 0

    def update(self, grid: OccupancyGrid, now: float, ignore: np.ndarray | None = None) -> OccupancyGrid:
        """The grid to plan on at time `now` [s]: `grid` with the reachable set of the moving obstacles seen so far
        marked occupied (`grid` itself when there are none). `ignore` (bool, the grid's shape): cells left to someone
        else -- a tracked obstacle's, which the MPC meets as predicted (`nav.prediction`): no evidence is taken there,
        and a detection touching them is dropped."""
        cfg = self.config
        runs = self._runs.update(grid, now)
        if runs is None or self._runs.restarted:  # a new lattice: what was seen on the old one is dropped
            self._evidence, self._detected, self.last_detections = [], [], 0
        if runs is None:
            return grid
        start, end, corner = runs
        evidence = grid.occupied_mask() & (now - end <= cfg.grace_s + 1e-9) & (end - start >= cfg.free_before_s - 1e-9)
        if ignore is not None:
            evidence &= ~ignore
        if np.any(evidence):
            self._evidence.append((now, np.argwhere(evidence) + np.asarray(corner)))
        self._evidence = [(t, c) for t, c in self._evidence if now - t <= cfg.window_s + 1e-9]
        self._detect(now)
        self._detected = [(t, c) for t, c in self._detected if now - t <= cfg.hold_s + 1e-9]
        if ignore is not None and self._detected:
            self._detected = [(t, c) for t, c in self._detected if not _touches(ignore, c - np.asarray(corner))]
        self.last_detections = len(self._detected)
        if not self._detected:
            return grid
        return self._inflate(grid, corner)

    def detected_points(self) -> np.ndarray:
        """(P, 2) centres, in the grids' frame, of the cells of the moving obstacles detected now."""
        frame = self._runs._frame
        if not self._detected or frame is None:
            return np.zeros((0, 2))
        res, ox, oy = frame
        cells = np.concatenate([c for _, c in self._detected])
        return np.column_stack([ox + (cells[:, 1] + 0.5) * res, oy + (cells[:, 0] + 0.5) * res])

    def _detect(self, now: float) -> None:
        if not self._evidence:
            return
        cells = np.concatenate([c for _, c in self._evidence])
        steps = np.concatenate([np.full(len(c), i) for i, (_, c) in enumerate(self._evidence)])
        lo = cells.min(axis=0)
        mask = np.zeros(tuple(cells.max(axis=0) - lo + 1), bool)
        mask[tuple((cells - lo).T)] = True
        labels, n = ndimage.label(mask, structure=np.ones((3, 3), bool))
        of_cell = labels[tuple((cells - lo).T)]
        for k in range(1, n + 1):
            member = np.argwhere(labels == k)
            # A moving face advances: its evidence comes in more than one step (a surface first seen up close turns
            # a patch occupied in one step).
            if len(member) >= self.config.min_cells and len(np.unique(steps[of_cell == k])) >= 2:
                self._detected.append((now, member + lo))

    def _inflate(self, grid: OccupancyGrid, corner: tuple[int, int]) -> OccupancyGrid:
        seeds = np.zeros(grid.shape, bool)
        for _, cells in self._detected:
            local = cells - np.asarray(corner)
            seeds[tuple(local[grid.in_bounds(local)].T)] = True
        if not seeds.any():
            return grid
        reach = ndimage.distance_transform_edt(~seeds) * grid.resolution <= self.reach_m
        data = grid.data.copy()
        data[reach] = OCCUPIED
        return grid.with_data(data)


def _touches(mask: np.ndarray, cells: np.ndarray) -> bool:
    inside = cells[
        (cells[:, 0] >= 0) & (cells[:, 0] < mask.shape[0]) & (cells[:, 1] >= 0) & (cells[:, 1] < mask.shape[1])
    ]
    return bool(inside.size and mask[tuple(inside.T)].any())


def stopping_reach(speed_m_s: float, v_max: float, a_max: float, dt: float) -> float:
    """How far an obstacle at `speed_m_s` comes while the robot stops from `v_max` at `a_max`, plus one period `dt`."""
    return float(speed_m_s) * (float(v_max) / float(a_max) + float(dt)) if a_max > 0 else math.inf
