"""The controller's own global path when no global planner feeds it one (issue 10 item 4).

A local window alone leaves the robot stuck in front of a wall whose door lies outside the window. So the controller
remembers what it has seen (`SeenMap`: the latest value of every map cell that any local grid has shown, on the
local grids' own lattice) and plans on that memory with `plan_global_path`, re-planning as the grid changes
(`OwnPath.needs_replan`: no path yet, the path ahead now blocked, or `replan_period_s` passed). While nothing seen lies
on the straight line to the goal (`SeenMap.segment_clear`), no path is planned: the MPC heads for the goal as it
always did, avoiding what it meets on the way, and the planning time is saved.

Unseen cells: with `planner_unknown_policy="free"` (the free-space assumption of exploration planners) the path may
cross space not seen yet and is re-planned when the local grid reveals a wall there; the MPC itself still treats
unknown cells as its `unknown_policy` says, and the sub-goal is pulled back to known-free space
(`nav.reference.subgoal_and_reference`). With `"occupied"` the path stays in known-free space and ends at the
known-free point closest to the goal on the line to it (`visible_subgoal`) when the goal has not been seen free.

Off the control step (`background=True`, every real-time profile): a plan on a 12 m memory takes 30-90 ms on this
CPU, longer than a Jackal's 44 ms period, so it runs in a worker process (one per Python process, shared, started
with `forkserver` so no thread of the node is forked) while the controller keeps the path it has -- or, before the
first, heads for the goal as it does with nothing seen in the way -- and adopts the new one when it is done
(`OwnPath.poll`). A broken worker falls back to planning on the step, with one log line.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import numpy as np

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.nav.reference import visible_subgoal
from mnemo_mpc.planning.costmap import OCCUPANCY
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.global_path import inflation_radius, plan_global_path
from mnemo_mpc.planning.grid import UNKNOWN, OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)


class SeenMap:
    """The latest value of every map-frame cell seen in the local grids, on their lattice (cell (i, j) spans
    [i res, (i+1) res) x [j res, (j+1) res)). Bounded to `max_size_m` on a side: past that it starts again from the
    current window (the memory serves getting out of local traps, not mapping)."""

    def __init__(self, max_size_m: float = 40.0) -> None:
        self.max_size_m = float(max_size_m)
        self.clear()

    def clear(self) -> None:
        self.data: np.ndarray | None = None  # (rows = y, cols = x) int8, UNKNOWN where not seen
        self.offset = np.zeros(2, dtype=np.int64)  # (col i0, row j0) lattice index of data[0, 0]
        self.resolution: float | None = None
        self.thresholds = (65, 25)
        self.semantics = OCCUPANCY  # of the grids written in (`planning.costmap`)

    def update(self, grid: OccupancyGrid) -> None:
        """Write the known cells of `grid` into the memory (cells it shows as unknown keep what was seen before)."""
        res = float(grid.resolution)
        if self.resolution is None or abs(res - self.resolution) > 1e-9 * res:
            self.clear()
            self.resolution = res
        self.thresholds = (grid.occupied_thresh, grid.free_thresh)
        self.semantics = grid.semantics
        xs, ys = grid.cell_centers()
        known = ~grid.unknown_mask()
        ci = np.floor(xs[known] / res).astype(np.int64)
        rj = np.floor(ys[known] / res).astype(np.int64)
        if ci.size == 0:
            return
        self._cover(np.array([ci.min(), rj.min()]), np.array([ci.max(), rj.max()]))
        self.data[rj - self.offset[1], ci - self.offset[0]] = grid.data[known]

    def segment_clear(self, a: np.ndarray, b: np.ndarray, radius: float) -> bool:
        """No cell remembered as occupied within `radius` of the segment a -> b (unseen cells do not count)."""
        if self.data is None:
            return True
        res = self.resolution
        a, b = np.asarray(a[:2], dtype=float), np.asarray(b[:2], dtype=float)
        # Only the part inside the memory (grown by the radius) can meet a remembered cell: clip the segment to it, so
        # the work is bounded by the memory's size, not the goal's distance (a goal 1e5 m away, issue 26).
        lo = self.offset * res - radius - res
        hi = (self.offset + np.array(self.data.shape[::-1])) * res + radius + res
        clipped = _clip_segment(a, b, lo, hi)
        if clipped is None:
            return True
        a, b = clipped
        n = max(int(math.ceil(float(np.hypot(*(b - a))) / (0.5 * res))), 1)
        pts = a + (b - a) * np.linspace(0.0, 1.0, n + 1)[:, None]
        k = int(math.ceil(radius / res))
        di, dj = np.mgrid[-k : k + 1, -k : k + 1]
        disk = np.hypot(di, dj) * res <= radius + 0.5 * res  # cells whose centre may lie within `radius`
        ci = np.floor(pts[:, 0] / res).astype(np.int64)[:, None] + di[disk][None] - self.offset[0]
        rj = np.floor(pts[:, 1] / res).astype(np.int64)[:, None] + dj[disk][None] - self.offset[1]
        inside = (ci >= 0) & (ci < self.data.shape[1]) & (rj >= 0) & (rj < self.data.shape[0])
        return not bool(np.any(self.data[rj[inside], ci[inside]] >= self.thresholds[0]))

    def grid(self, include: list[np.ndarray], pad_m: float = 1.0) -> OccupancyGrid:
        """The memory as an OccupancyGrid, grown (unknown) by `pad_m` beyond what was seen and the points of
        `include`: a path may then run round the end of a wall seen so far, through space not seen yet."""
        res = self.resolution or 0.05
        pad = int(math.ceil(pad_m / res))
        pts = np.asarray(include, dtype=float).reshape(-1, 2)
        lo = np.floor(pts.min(axis=0) / res).astype(np.int64)
        hi = np.floor(pts.max(axis=0) / res).astype(np.int64)
        if self.data is None:
            data, offset = np.full((1, 1), UNKNOWN, np.int8), lo
        else:
            data, offset = self.data, self.offset
        top = offset + np.array([data.shape[1] - 1, data.shape[0] - 1])
        before = offset - np.minimum(lo, offset) + pad  # (cols, rows) added before
        after = np.maximum(hi, top) - top + pad
        data = np.pad(data, ((int(before[1]), int(after[1])), (int(before[0]), int(after[0]))), constant_values=UNKNOWN)
        offset = offset - before
        occ, free = self.thresholds
        origin = (float(offset[0] * res), float(offset[1] * res), 0.0)
        return OccupancyGrid(data, res, origin, occupied_thresh=occ, free_thresh=free, semantics=self.semantics)

    def _cover(self, lo: np.ndarray, hi: np.ndarray) -> None:
        """Grow the array to hold lattice indices lo..hi (col, row), starting afresh past `max_size_m`."""
        if self.data is None:
            self.offset = lo.copy()
            self.data = np.full((int(hi[1] - lo[1] + 1), int(hi[0] - lo[0] + 1)), UNKNOWN, np.int8)
            return
        h, w = self.data.shape
        new_lo = np.minimum(lo, self.offset)
        new_hi = np.maximum(hi, self.offset + np.array([w - 1, h - 1]))
        if np.any((new_hi - new_lo + 1) * self.resolution > self.max_size_m):
            self.data = None
            self._cover(lo, hi)
            return
        if np.all(new_lo == self.offset) and np.all(new_hi == self.offset + np.array([w - 1, h - 1])):
            return
        before = self.offset - new_lo
        after = new_hi - (self.offset + np.array([w - 1, h - 1]))
        self.data = np.pad(
            self.data, ((int(before[1]), int(after[1])), (int(before[0]), int(after[0]))), constant_values=UNKNOWN
        )
        self.offset = new_lo


def _clip_segment(a: np.ndarray, b: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The part of segment a -> b inside the box [lo, hi] (Liang-Barsky), or None when it misses the box."""
    t0, t1 = 0.0, 1.0
    d = b - a
    for k in range(2):
        if abs(d[k]) < 1e-15:
            if a[k] < lo[k] or a[k] > hi[k]:
                return None
            continue
        ta, tb = (lo[k] - a[k]) / d[k], (hi[k] - a[k]) / d[k]
        t0, t1 = max(t0, min(ta, tb)), min(t1, max(ta, tb))
        if t0 > t1:
            return None
    return a + t0 * d, a + t1 * d


_EXECUTOR: ProcessPoolExecutor | None = None
_EXECUTOR_PID = 0
# Why a worker may not start: a broken pool, no processes left (OSError), a timeout, or -- AssertionError, which is how
# multiprocessing refuses -- a daemonic process (a multiprocessing.Pool worker) may not have children.
_NO_WORKER = (BrokenProcessPool, OSError, RuntimeError, TimeoutError, AssertionError)


def _executor() -> ProcessPoolExecutor:
    """The process's one planning worker, started (and waited for: ~0.3 s, the imports) on first use -- by an
    `OwnPath(background=True)`, so that no control step pays for it."""
    global _EXECUTOR, _EXECUTOR_PID
    if _EXECUTOR is None or _EXECUTOR_PID != os.getpid():  # a forked child inherits its parent's, which is not its own
        _EXECUTOR = None
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["mnemo_mpc.planning.global_path"])
        executor = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
        executor.submit(math.sqrt, 1.0).result(timeout=120.0)
        _EXECUTOR, _EXECUTOR_PID = executor, os.getpid()
    return _EXECUTOR


# What a path that leaves the robot backwards costs more where it cannot turn in place (`plan_global_path`): about the
# lane a Jackal backs out of to a junction to turn, and the recoveries' seconds that takes at their 0.1-0.2 m/s.
TURN_BACK_COST_M = 3.0


def _plan(
    grid: OccupancyGrid,
    start: np.ndarray,
    target: np.ndarray,
    robot: RobotModel,
    unknown_policy: str,
    start_yaw: float | None = None,
) -> tuple:
    """(path or None, the planner's message, wall seconds): the search, in whichever process runs it. The memory's
    whole cells read a wall face anywhere in a cell at the cell's near face -- up to a cell nearer than it is where
    the odometry frame's lattice is not the world's, which it never is -- so the search asks a cell less than the
    safety margin: with the full margin a 0.55 m lane read 0.50 m was a wall to it, and a Jackal mapless in the dense
    worlds was sent round the block (the MPC, on the returns' surface points, passes it: `planning.surfaces`).
    `start_yaw` (a robot that cannot turn in place where it stands): leaving backwards costs TURN_BACK_COST_M more."""
    t0 = time.perf_counter()
    try:
        margin = max(robot.safety_margin - grid.resolution, 0.0)
        path = plan_global_path(
            grid,
            start,
            target,
            robot,
            unknown_policy=unknown_policy,
            margin=margin,
            start_yaw=start_yaw,
            turn_back_cost_m=TURN_BACK_COST_M,
        )
        return path, "", time.perf_counter() - t0
    except (InfeasibleProblemError, InputError) as exc:
        return None, str(exc), time.perf_counter() - t0


# A periodic re-plan replaces a path still clear only when it is this much shorter than the rest of that path.
SWITCH_GAIN = 0.1


def remaining_length(path: np.ndarray | None, pose: np.ndarray) -> float:
    """The length from `pose` along `path`: to its nearest vertex, then along it to the end (inf without a path)."""
    if path is None or len(path) == 0:
        return math.inf
    near = int(np.argmin(np.hypot(path[:, 0] - pose[0], path[:, 1] - pose[1])))
    rest = np.asarray(path[near:, :2], dtype=float)
    return float(np.hypot(*(rest[0] - np.asarray(pose[:2], dtype=float))) + np.sum(np.hypot(*np.diff(rest, axis=0).T)))


class OwnPath:
    """The self-planned path: planned on the `SeenMap`, kept while valid, re-planned when `needs_replan` says;
    with `background`, planned in the worker process and adopted by `poll`."""

    def __init__(
        self,
        robot: RobotModel,
        unknown_policy: str,
        replan_period_s: float,
        max_size_m: float,
        background: bool = False,
    ) -> None:
        self.robot = robot
        self.unknown_policy = unknown_policy
        self.replan_period_s = float(replan_period_s)
        self.background = bool(background)
        self.seen = SeenMap(max_size_m)
        self.path: np.ndarray | None = None
        self.planned_at = -math.inf
        self.plan_time_s = 0.0  # wall time of the last planning (memory grid, ESDF, search), wherever it ran
        self.failures = 0
        self._pending: Future | None = None
        self._keep_below: float | None = None  # a periodic re-plan: the new path's length that replaces the kept one
        if self.background:
            try:
                _executor()
            except _NO_WORKER as exc:
                # an exception is always truthy: its message may still be empty (multiprocessing's AssertionError)
                log.warning(
                    "own path: no planning worker (%s); planning on the control step", str(exc) or type(exc).__name__
                )
                self.background = False

    def reset(self) -> None:
        self.seen.clear()
        self.clear_path()

    def clear_path(self) -> None:
        self.path = None
        self.planned_at = -math.inf
        self._pending = None  # a plan still running was asked for the old situation: its answer is dropped

    @property
    def pending(self) -> bool:
        """A plan is running in the worker."""
        return self._pending is not None

    def needs_replan(self, grid: OccupancyGrid, progress_m: float, now_s: float) -> str | None:
        """Why the path must be planned again now (None: keep it): no path, its period is over, or the part ahead of
        the robot (from `progress_m` of arc length on) passes closer than the planner's inflation radius (half the
        robot's width, `global_path.inflation_radius`) to an obstacle the current local grid shows (its unknown cells
        and edge do not block: the path may run beyond them). Not the circumscribed radius: a long body's path
        through a passage the planner let it take is that close to the walls all along, and was re-planned at every
        step there (a Jackal in the dense worlds' lanes: step times p50 32 ms, 4,123 overruns in 100 worlds). Never
        while a plan is running."""
        if self._pending is not None:
            return None
        if self.path is None:
            return "no path"
        if now_s - self.planned_at >= self.replan_period_s - 1e-9:
            return "period"
        s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(self.path, axis=0).T))])
        ahead = self.path[s >= progress_m]
        ahead = ahead[grid.in_bounds(grid.world_to_cell(ahead))] if len(ahead) else ahead  # the field holds its
        # border value beyond the edge, which says nothing about what lies there
        if len(ahead) and (d := DistanceField(grid, "free").min_clearance(ahead)) < inflation_radius(self.robot):
            log.debug("own path blocked: %.3f m from an obstacle", d)
            return "blocked"
        return None

    def plan(
        self,
        pose: np.ndarray,
        goal: np.ndarray,
        subgoal_clearance_m: float,
        now_s: float,
        reason: str = "no path",
        turns_in_place: bool = True,
    ) -> bool:
        """Plan from `pose` to `goal` on the memory (`reason`: `needs_replan`'s); True when `path` changed now. A robot
        that cannot turn in place where it stands (`turns_in_place` False) pays TURN_BACK_COST_M for a path that
        leaves it backwards (`_plan`). With `background`, start the plan in the worker and keep the path meanwhile
        (`poll` adopts the new one). A periodic re-plan replaces a path that is still clear only when it is shorter
        than the rest of it by SWITCH_GAIN: with unseen space taken as free, two routes round a block cost nearly the
        same and their order flips as cells are seen; following each flip in turn, a Jackal in the dense worlds' lanes
        turned back and forth at a junction until it timed out."""
        t0 = time.perf_counter()
        self.planned_at = now_s
        self._keep_below = remaining_length(self.path, pose) * (1.0 - SWITCH_GAIN) if reason == "period" else None
        target = np.asarray(goal, dtype=float)
        reach = 0.5 * self.seen.max_size_m
        d = float(np.hypot(*(target[:2] - pose[:2])))
        if d > reach:
            # A goal beyond what the memory can hold: plan towards it on the line, `reach` away, so the planning grid
            # (and the work) is bounded by the memory's size, not the goal's distance; the controller continues the
            # path to the goal by a straight segment.
            target = np.concatenate([pose[:2] + (target[:2] - pose[:2]) * (reach / d), target[2:]])
        grid = self.seen.grid([pose[:2], target[:2]], pad_m=1.0 if self.unknown_policy == "occupied" else 2.0)
        if self.unknown_policy == "occupied":
            target = visible_subgoal(grid, pose, target, subgoal_clearance_m)
        args = (grid, np.asarray(pose[:2], dtype=float), np.asarray(target[:2], dtype=float), self.robot)
        yaw = None if turns_in_place else float(pose[2])
        if self.background:
            try:
                self._pending = _executor().submit(_plan, *args, self.unknown_policy, yaw)
                return False
            except _NO_WORKER as exc:  # _executor() starts a worker afresh in a forked child
                why = str(exc) or type(exc).__name__
                log.warning("own path: planning worker unavailable (%s); planning on the control step from now on", why)
                self.background = False
        changed = self._adopt(*_plan(*args, self.unknown_policy, yaw))
        self.plan_time_s = time.perf_counter() - t0
        return changed

    def poll(self) -> bool:
        """Adopt the worker's plan when it is done (never waits); True when a new plan (or none found) was adopted."""
        if self._pending is None or not self._pending.done():
            return False
        future, self._pending = self._pending, None
        try:
            result = future.result()
        except (BrokenProcessPool, OSError, RuntimeError) as exc:
            log.warning("own path: planning worker failed (%s); planning on the control step from now on", exc)
            self.background = False
            self.planned_at = -math.inf  # plan again at the next step
            return False
        return self._adopt(*result)

    def _adopt(self, path: np.ndarray | None, message: str, seconds: float) -> bool:
        """Take the planner's answer (see `plan` for when a clear path is kept); True when `path` changed."""
        self.plan_time_s = seconds
        if path is None:
            self.failures += 1
            if self.failures == 1 or self.failures % 50 == 0:
                log.info("own path: no path on the seen map (%d so far): %s", self.failures, message)
            if self._keep_below is not None:
                return False  # a periodic re-plan found nothing: the path kept is still clear
        elif self._keep_below is not None and remaining_length(path, path[0]) > self._keep_below:
            return False
        self.path = path
        return True
