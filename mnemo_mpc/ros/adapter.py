"""What the ROS node does each callback, without rclpy: messages in (by field name), messages out.

The node (`node.py`) only wires subscriptions, publishers, parameters and timers to a `NavAdapter`; `replay` drives
the same adapter from a rosbag2. Policy, in one place:

* **Callbacks never raise.** A message that cannot be used (wrong frame, non-finite or out-of-range fields, a grid
  with too many cells, a stamp older than the last accepted one) is dropped, counted and logged with the reason
  (`last_rejection`); the previous good input stays.
* **Ticks never raise and are bounded.** Every costmap is fitted to one robot-centred planning window
  (`grid_window_m` at `grid_resolution`; a finer one is max-pooled once on arrival), so one NLP serves every input,
  built before the first tick (`warm_up`); the SQP starts no iteration after 0.4 of a period. A failed solve falls
  back to the previous plan or a stop; the optional IPOPT fallback (`fallback_solver`) is capped at 0.3 of a period.
* **No goal** -> nothing is published (the robot is not ours to drive).
* **Stale input** -> odometry or grid missing, received longer than `stale_timeout_s` ago, or stamped outside
  +-`stale_timeout_s` of now (and a clock that went backwards makes everything stale), or a goal or path in another
  frame (map) with no transform into `frame_id` within `transform_tolerance` of now: the command ramps to zero.
* **Frames** -> odometry and grid in `frame_id` (odom); goal and path in any frame /tf and /tf_static connect to it
  (`on_tf`, `mnemo_mpc.ros.transforms`), held there and expressed in `frame_id` at first and again whenever the
  transform moves (a localiser's correction), as Nav2's controllers transform the global plan.
* **Every published command** is finite, inside the velocity limits, and within a_max*T, alpha_max*T of the previous
  published command, T = 1 / control_rate_hz (the control period, not the MPC step): the controller's command,
  the stale-input stop and the goal-reached stop all pass through this one limiter. Ramping from the last *published*
  command, not from odometry, is what makes a stop reach zero even when odometry has frozen.
* **Goal reached** -> ramp to zero, then the goal is cleared.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControlOutput, same_goal
from mnemo_mpc.nav.tracking import Track
from mnemo_mpc.planning.footprint import to_world
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import PredictedObstacles
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.follow_path import NO_TRANSFORM
from mnemo_mpc.ros.tracks import EXTRA_LISTED, nearest_first, track_values
from mnemo_mpc.ros.transforms import MAX_FRAME_CHARS, Transform2D, TransformBuffer, TransformError

log = logging.getLogger(__name__)

MIN_GRID_CELLS = 4  # per side: smaller costmaps cannot hold the robot and are rejected as malformed
REJECTION_LOG_PERIOD_S = 1.0  # at most one log line per input kind per second (a flood of bad input is counted)

# The severity of each control status in /diagnostics: 0 OK, 1 WARN, 2 ERROR (a status not listed: ERROR). The node
# logs a change to an OK status at DEBUG and any other change at WARN (`NavAdapter.status_change`). Normal operation --
# planning, turning in place onto the path (the rotation shim, "rotating_to_path"), arriving -- is OK: the node used to
# say WARN each time the status flipped between planning and turning (every 0.5 s or so on a winding path).
STATUS_LEVELS: dict[str, int] = {
    "idle": 0,
    "planned": 0,
    "goal_reached": 0,
    "rotating_to_path": 0,
    "aligning_to_goal": 0,  # at the goal's position, turning in place to its yaw (yaw_goal_tolerance)
    "stopping": 0,  # a cancelled goal or a deactivated node ramping the command to zero (`NavAdapter.stop`)
    "stale_input": 1,
    "fallback_previous_plan": 1,
    "fallback_unconverged": 1,
    "fallback_escape": 1,  # driving the escape from a predicted moving obstacle (a failed solve)
    # Getting unstuck (mnemo_mpc.nav.recovery) is a warning.
    "recovery_maneuver": 1,
    "recovery_rotate": 1,
    "recovery_back_off": 1,
    "recovery_replan": 1,
    "goal_yaw_blocked": 1,  # at the goal's position, but turning to its yaw would not keep the footprint's margin
    # not listed, so ERROR: "failed" (recoveries exhausted), "error" (a tick that raised), the fallback stops
}


def status_level(status: str) -> int:
    """0 OK / 1 WARN / 2 ERROR for a control status (`STATUS_LEVELS`)."""
    return STATUS_LEVELS.get(status, 2)


@dataclass
class TickResult:
    """What to publish this control period (None: publish nothing)."""

    cmd_vel: Any | None
    local_plan: Any | None
    status: str  # "idle" | "stale_input" | "error" | "goal_reached" | a ControlOutput.status (incl. "failed")
    command: np.ndarray | None = None
    output: ControlOutput | None = None
    reason: str = ""  # why a status other than "planned" / "idle" (stale input, solver message, flags)


@dataclass
class _Framed:
    """A goal (and for FollowPath its path) or a topic's global path held in the frame it came in (not frame_id),
    with the transform it was last expressed through (None: not yet)."""

    frame: str
    goal: np.ndarray
    goal_stamp_s: float | None
    path: np.ndarray | None
    restart_same: bool
    sets_path: bool = True
    applied: Transform2D | None = None


# A held goal or path is expressed again once its transform has moved by this much (a localiser's correction)
REEXPRESS_M, REEXPRESS_RAD = 0.01, 0.01


def _moved(a: Transform2D, b: Transform2D) -> bool:
    return (
        math.hypot(a.x - b.x, a.y - b.y) > REEXPRESS_M or abs(math.remainder(a.yaw - b.yaw, math.tau)) > REEXPRESS_RAD
    )


@dataclass
class _Stamped:
    value: Any
    received_s: float  # node clock when it arrived
    stamp_s: float | None  # header stamp (None: unset, only the arrival time counts)


@dataclass
class AdapterStats:
    """Counters and recent timings for /diagnostics."""

    statuses: Counter = field(default_factory=Counter)
    rejected: Counter = field(default_factory=Counter)
    # Messages dropped because parsing raised something other than InputError: still dropped (the node must run on),
    # but that is a bug the message exposed, not a malformed message; counted apart so a fuzz can see it (issue 26).
    unexpected: Counter = field(default_factory=Counter)
    warm_starts: Counter = field(default_factory=Counter)
    tick_ms: deque = field(default_factory=lambda: deque(maxlen=500))
    solve_ms: deque = field(default_factory=lambda: deque(maxlen=500))
    iterations: deque = field(default_factory=lambda: deque(maxlen=500))
    last_status: str = "idle"
    last_reason: str = ""
    last_rejection: str = ""
    # The last tick's confirmed tracks, nearest the robot first, and what the MPC met of them (moving_prediction
    # 'track'); a tick that did not plan (idle, stale input, error) has none.
    tracks: tuple[Track, ...] = ()
    predicted: PredictedObstacles | None = None


class NavAdapter:
    def __init__(self, params: NavParams, types: convert.MessageTypes, controller: Controller | None = None) -> None:
        self.params = params
        self.types = types
        self.controller = controller or params.controller()
        self.period_s = params.control_period_s
        self.window_shape = (params.window_cells, params.window_cells)
        self.stats = AdapterStats()
        self._grid: _Stamped | None = None
        self._odom: _Stamped | None = None
        self._scan: _Stamped | None = None
        self._returns: np.ndarray | None = None  # the last scan's returns in frame_id, for the next tick only
        self._goal: np.ndarray | None = None
        self._goal_stamp: float | None = None
        # /tf and /tf_static (`on_tf`), and a goal or path held in another frame until expressed in frame_id
        self.tf = TransformBuffer()
        self._tf_clock_s = -math.inf
        self._framed: _Framed | None = None
        self._path_framed: _Framed | None = None
        self._path: np.ndarray | None = None
        self._last_command = np.zeros(2)
        self._last_log: dict[str, float] = {}
        self._reported_status = ("idle", "")
        self._stopping = ""  # why the command is ramping to zero with no goal (`stop`); empty: not stopping

    @property
    def goal(self) -> np.ndarray | None:
        return self._goal

    @property
    def global_path(self) -> np.ndarray | None:
        """The global path the controller follows (None: it plans its own path to the goal)."""
        return self._path

    @property
    def last_rejection(self) -> str:
        return self.stats.last_rejection

    def warm_up(self) -> float:
        """Build (or load) the NLP for the planning window, the fallback solver and the warm-start model, and run
        one solve, so that the first real tick is as fast as any other. Returns the seconds it took."""
        return self.controller.warm_up(self.window_shape, self.params.grid_resolution)

    # --- inputs ---------------------------------------------------------------------------------------------------
    def on_grid(self, msg: Any, now_s: float) -> None:
        got = self._receive("grid", msg, now_s, self._grid, self._parse_grid)
        if got is not None:
            self._grid = got

    def on_odometry(self, msg: Any, now_s: float) -> None:
        got = self._receive("odometry", msg, now_s, self._odom, convert.state_from_odometry)
        if got is not None:
            self._odom = got

    def on_scan(self, msg: Any, now_s: float) -> None:
        """A sensor_msgs/LaserScan: its returns, expressed in frame_id (`_scan_returns`), go to the controller with
        the next tick (walls finer than a cell, `planning.surfaces`); checked and dropped as any sensor message."""
        got = self._receive("scan", msg, now_s, self._scan, self._scan_returns, framed=True)
        if got is not None:
            self._scan, self._returns = got, got.value

    def _scan_returns(self, msg: Any) -> np.ndarray:
        """A scan's returns in frame_id: as they are in frame_id, placed by the last odometry in base_frame_id,
        through /tf from any other frame."""
        frame = self._frame_of(msg)
        points = convert.returns_from_scan(msg)
        if frame is None:
            return points
        if frame == self.params.base_frame_id.lstrip("/"):
            if self._odom is None:
                raise InputError(f"header.frame_id {frame!r}: no odometry yet to place it in frame_id")
            return to_world(points, self._odom.value[0])
        try:
            t = self.tf.lookup(self.params.frame_id.lstrip("/"), frame)
        except TransformError as exc:
            raise InputError(f"header.frame_id {frame!r}: no transform to frame_id ({exc})") from exc
        return t.apply_path(points)[:, :2]

    def on_tf(self, msg: Any, now_s: float, static: bool = False) -> None:
        """A tf2_msgs/TFMessage from /tf (or /tf_static with `static`) into the transform buffer; refused transforms
        are counted and logged as any dropped input. A clock that went back (a restarted simulator, a looped bag)
        clears the buffer first, as tf2_ros's Buffer does."""
        if now_s < self._tf_clock_s:
            self.tf.clear()
        self._tf_clock_s = now_s
        for reason in self.tf.add_message(msg, static=static):
            self._reject("tf_static" if static else "tf", reason)

    def on_goal(self, msg: Any, now_s: float) -> None:
        got = self._receive("goal", msg, now_s, None, convert.goal_from_pose_stamped, stamped=False, framed=True)
        if got is None:
            return
        frame = self._frame_of(msg)
        if frame is not None:  # in another frame (map): held there, transformed into frame_id every tick
            if self._framed is not None and self._framed.goal_stamp_s == got.stamp_s:
                if np.array_equal(self._framed.goal, got.value) and self._framed.frame == frame:
                    return  # the same message again
            self._framed = _Framed(frame, got.value, got.stamp_s, None, restart_same=True, sets_path=False)
            self._resolve_frames(now_s)
            return
        self._framed = None
        if self._goal is not None and got.stamp_s == self._goal_stamp and np.array_equal(got.value, self._goal):
            return  # the same message again (a republished latched goal): keep the plan going
        self._set_goal(got.value, got.stamp_s, restart_same=True)

    def follow_path(self, msg: Any, now_s: float) -> np.ndarray:
        """A FollowPath action's goal (nav_msgs/Path): its last pose becomes the goal and the path the global path.
        Returns the path (K, 2); raises InputError naming what is wrong with it (the action's INVALID_PATH). A path
        ending at the goal being driven to (bt_navigator re-sends each re-planned path) keeps the plan going."""
        frame = self._frame_of(msg, "path header.frame_id")
        if not 1 <= len(msg.poses) <= self.params.max_path_poses:
            raise InputError(
                f"path: expected 1..max_path_poses = {self.params.max_path_poses} poses, got {len(msg.poses)}"
            )
        path = convert.path_from_msg(msg)
        goal = convert.goal_from_pose_stamped(msg.poses[-1])
        self._stopping = ""
        stamp = convert.stamp_seconds(msg.header.stamp)
        if frame is not None:
            self._framed = _Framed(frame, goal, stamp, path if len(path) >= 2 else None, restart_same=False)
            self._path_framed = None  # the action's path supersedes the topic's
            self._resolve_frames(now_s)
            return path
        self._framed, self._path_framed = None, None
        self._path = path if len(path) >= 2 else None
        self._set_goal(goal, stamp, restart_same=False)
        return path

    def _frame_of(self, msg: Any, field: str = "header.frame_id") -> str | None:
        """None for a message in frame_id (a leading slash ignored, as tf2 does), else its frame, which must be a
        non-empty name of at most MAX_FRAME_CHARS characters; InputError otherwise."""
        frame = msg.header.frame_id
        if not isinstance(frame, str) or not frame.strip("/") or len(frame) > MAX_FRAME_CHARS:
            raise InputError(
                f"{field} {str(frame)[:80]!r}: expected a frame name of 1..{MAX_FRAME_CHARS} characters "
                f"({self.params.frame_id!r}, parameter frame_id, or one /tf connects to it)"
            )
        frame = frame.lstrip("/")
        return None if frame == self.params.frame_id.lstrip("/") else frame

    def _resolve_frames(self, now_s: float) -> str | None:
        """Goal and path held in another frame, expressed in frame_id through the latest transform, if it is no older
        than transform_tolerance at `now_s`: at first, and again whenever that transform has moved (a localiser's
        correction), as Nav2's controllers transform the global plan each cycle. Returns why they cannot be (no
        transform, a stale one), which the tick reports as stale input; None when resolved or nothing held."""
        target = self.params.frame_id.lstrip("/")
        for held in (self._path_framed, self._framed):
            if held is None:
                continue
            # The latest transform, if no older than transform_tolerance (Nav2's rule): a localiser post-dates map ->
            # odom (AMCL by its own transform_tolerance), and the goal is a place, not a measurement of now.
            try:
                t = self.tf.lookup(target, held.frame)
            except (TransformError, InputError) as exc:
                return f"{NO_TRANSFORM}{held.frame} -> {target}: {exc}"
            age = 0.0 if t.stamp_s is None else now_s - t.stamp_s
            if age > self.params.transform_tolerance:
                return (
                    f"{NO_TRANSFORM}{held.frame} -> {target}: the latest is {age:.3f} s old at {now_s:.3f} s "
                    f"(transform_tolerance {self.params.transform_tolerance})"
                )
            if held.applied is not None and not _moved(held.applied, t):
                continue
            first, held.applied = held.applied is None, t
            if held.sets_path:
                self._path = None if held.path is None else t.apply_path(held.path)[:, :2]
            if held is self._framed:
                self._set_goal(t.apply_pose(held.goal), held.goal_stamp_s, restart_same=held.restart_same and first)
        return None

    def _set_goal(self, goal: np.ndarray, stamp_s: float | None, restart_same: bool) -> None:
        """Take `goal`. One within `same_goal` of the current goal is that goal re-expressed (moved by a localiser's
        correction, or a re-planned path's end): followed, the plan going on. The very same goal again restarts the
        plan when `restart_same` (a topic goal re-sent, e.g. after "failed"), else it too goes on."""
        if self._goal is not None and same_goal(
            goal, self._goal, self.params.goal_tolerance_m, None if self._odom is None else self._odom.value[0]
        ):
            if not (restart_same and np.array_equal(goal, self._goal)):
                self._goal, self._goal_stamp = goal, stamp_s
                return
        self._goal, self._goal_stamp = goal, stamp_s
        self.controller.reset()
        log.info("new goal (%.3f, %.3f, %.3f)", *self._goal)

    def on_path(self, msg: Any, now_s: float) -> None:
        got = self._receive("global path", msg, now_s, None, self._parse_path, stamped=False, framed=True)
        if got is None:
            return
        path = got.value if len(got.value) >= 2 else None  # an empty path clears it: plan straight to the goal
        frame = self._frame_of(msg)
        if frame is not None and path is not None:  # held in its frame, re-expressed in frame_id (_resolve_frames)
            self._path_framed = _Framed(frame, np.zeros(3), None, path, restart_same=False)
            self._resolve_frames(now_s)
            return
        self._path_framed = None
        if path is None or self._path is None or not np.array_equal(path, self._path):
            self._path = path

    def _parse_grid(self, msg: Any) -> OccupancyGrid:
        width, height = int(msg.info.width), int(msg.info.height)
        if min(width, height) < MIN_GRID_CELLS or width * height > self.params.max_grid_cells:
            raise InputError(
                f"info.width x info.height = {width} x {height}: expected >= {MIN_GRID_CELLS} x {MIN_GRID_CELLS} "
                f"and at most max_grid_cells = {self.params.max_grid_cells} cells"
            )
        grid = convert.grid_from_msg(msg, self.params.costmap_semantics)
        target = self.params.grid_resolution
        if grid.resolution < target * (1 - 1e-6):  # pool a finer costmap once here, not in every tick
            grid = grid.coarsened(int(np.ceil(target / grid.resolution - 1e-6)))
        return grid

    def _parse_path(self, msg: Any) -> np.ndarray:
        if len(msg.poses) > self.params.max_path_poses:
            raise InputError(f"{len(msg.poses)} poses: expected at most max_path_poses = {self.params.max_path_poses}")
        return convert.path_from_msg(msg)

    def _receive(
        self,
        kind: str,
        msg: Any,
        now_s: float,
        previous: _Stamped | None,
        parse: Any,
        stamped: bool = True,
        framed: bool = False,
    ) -> _Stamped | None:
        """Frame and stamp checks, then `parse(msg)`; None (and the reason logged) when the message is dropped.

        For sensor data (`stamped`) a set stamp must lie within stale_timeout_s of now (an old one would be stale at
        once; a future one would block every later message as out of order) and must not be older than the last
        accepted one, unless the clock went backwards since (a restarted simulator)."""
        try:
            if framed:  # goal and path: any frame /tf connects to frame_id
                self._frame_of(msg)
            else:
                frame = str(msg.header.frame_id)
                if frame.lstrip("/") != self.params.frame_id.lstrip("/"):  # tf2 ignores a leading slash too
                    raise InputError(
                        f"header.frame_id {frame!r}: expected {self.params.frame_id!r} (parameter frame_id)"
                    )
            stamp = convert.stamp_seconds(msg.header.stamp)
            if stamped and stamp is not None:
                timeout = self.params.stale_timeout_s
                if abs(now_s - stamp) > timeout:
                    when = "behind" if stamp < now_s else "ahead of"
                    raise InputError(
                        f"header.stamp {stamp:.3f} s is {abs(now_s - stamp):.3f} s {when} the clock "
                        f"({now_s:.3f} s; stale_timeout_s {timeout})"
                    )
                if previous is not None and previous.stamp_s is not None:
                    if stamp < previous.stamp_s and now_s >= previous.received_s:
                        raise InputError(
                            f"header.stamp {stamp:.3f} s: older than the last accepted {previous.stamp_s:.3f} s"
                        )
            return _Stamped(parse(msg), float(now_s), stamp)
        except Exception as exc:  # any malformed message is dropped and reported; it must never stop the node
            text = str(exc) if isinstance(exc, InputError) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, InputError):
                self.stats.unexpected[kind] += 1
            self._reject(kind, text)
            return None

    def _reject(self, kind: str, reason: str) -> None:
        self.stats.rejected[kind] += 1
        self.stats.last_rejection = f"{kind}: {reason}"
        now = time.monotonic()
        if now - self._last_log.get(kind, -np.inf) >= REJECTION_LOG_PERIOD_S:
            self._last_log[kind] = now
            log.warning("dropped %s message (%d so far): %s", kind, self.stats.rejected[kind], reason)

    # --- control period -------------------------------------------------------------------------------------------
    def tick(self, now_s: float) -> TickResult:
        t0 = time.perf_counter()
        try:
            result = self._tick(float(now_s))
        except Exception as exc:  # a bug or an unforeseen input: stop safely and say why, never crash the timer
            log.error("control tick failed (%s: %s); stopping", type(exc).__name__, exc, exc_info=True)
            result = self._publish(np.zeros(2), float(now_s), "error", None, f"{type(exc).__name__}: {exc}")
        self._record(result, time.perf_counter() - t0)
        return result

    def stop(self, reason: str) -> None:
        """Drop the goal and bring the robot to rest: the following ticks publish the limited ramp to zero (status
        "stopping", `reason` as its reason) and then nothing, as with no goal. For a cancelled goal and a deactivated
        node: clearing the goal alone would leave the base driving on the last command it got."""
        self._goal, self._goal_stamp, self._framed = None, None, None
        self._stopping = reason or "stop requested"

    @property
    def state(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The last odometry's (pose, velocity), or None before any."""
        return None if self._odom is None else self._odom.value

    def expressed_path(self) -> np.ndarray | None:
        """The path being followed in frame_id (K, 2), or the goal's position alone without one; None without a goal
        (or one not yet expressed: no transform). For the FollowPath feedback, whatever frame the path came in."""
        if self._goal is None:
            return None
        return self._path if self._path is not None else self._goal[None, :2]

    @property
    def at_rest(self) -> bool:
        """True once the last published command is zero."""
        return not np.any(self._last_command)

    def _tick(self, now_s: float) -> TickResult:
        unresolved = self._resolve_frames(now_s)
        if self._goal is None and self._framed is None:
            if self._stopping and not self.at_rest:
                return self._publish(np.zeros(2), now_s, "stopping", None, self._stopping)
            self._stopping = ""
            return TickResult(None, None, "idle")
        self._stopping = ""
        stale = unresolved or self._staleness(now_s)
        if stale is not None:
            return self._publish(np.zeros(2), now_s, "stale_input", None, stale)
        pose, velocity = self._odom.value
        grid = self._grid.value.fit_window(pose[:2], self.window_shape, self.params.grid_resolution)
        # The odometry's age (its stamp, else its arrival) is part of the delay the controller predicts over.
        odom_s = self._odom.stamp_s if self._odom.stamp_s is not None else self._odom.received_s
        age = min(max(now_s - odom_s, 0.0), self.params.stale_timeout_s)
        grid_s = self._grid.stamp_s if self._grid.stamp_s is not None else self._grid.received_s
        grid_age = min(max(now_s - grid_s, 0.0), self.params.stale_timeout_s)  # the tracker's time for the cells
        out = self.controller.step(
            grid,
            pose,
            velocity,
            self._goal,
            global_path=self._path,
            now_s=now_s,
            observation_age_s=age,
            grid_age_s=grid_age,
            returns=self._returns,
        )
        self._returns = None  # each scan's returns count once
        target = np.zeros(2) if out.status == "goal_reached" else out.command
        reason = out.solve_error or ", ".join(out.flags)
        if out.plan is not None and not out.plan.success and not out.solve_error:
            reason = f"solver: {out.plan.status}" + (f"; {reason}" if reason else "")
        result = self._publish(target, now_s, out.status, out, reason)
        if out.status == "goal_reached" and not np.any(result.command):
            check = self.controller.last_goal_check
            log.info("goal (%.3f, %.3f) reached (%s)", *self._goal[:2], check.describe() if check else "")
            self._goal, self._framed = None, None
        return result

    def _staleness(self, now_s: float) -> str | None:
        """Why the inputs cannot be planned on now, or None when both are fresh."""
        timeout = self.params.stale_timeout_s
        for name, s in (("odometry", self._odom), ("grid", self._grid)):
            if s is None:
                return f"no {name} received"
            received_ago = now_s - s.received_s
            if received_ago < 0:
                return f"the clock went back {-received_ago:.3f} s since the last {name} arrived"
            if received_ago > timeout:
                return f"{name} last received {received_ago:.3f} s ago (stale_timeout_s {timeout})"
            if s.stamp_s is not None and abs(now_s - s.stamp_s) > timeout:
                when = "ago" if now_s >= s.stamp_s else "in the future"
                return f"{name} stamped {abs(now_s - s.stamp_s):.3f} s {when} (stale_timeout_s {timeout})"
        return None

    def command_step(self) -> np.ndarray:
        """(2,) the most a published command may change in one control period (`limit`)."""
        step = self.controller.robot.accel_limits * self.period_s
        actuation = self.controller.config.actuation
        return step if actuation is None else step * actuation.lead(self.period_s)

    def command_range(self) -> np.ndarray:
        """(2,) the largest |v|, |w| a published command can have."""
        robot = self.controller.robot
        return np.maximum(np.abs(robot.control_lower), np.abs(robot.control_upper))

    def limit(self, target: np.ndarray) -> np.ndarray:
        """The command to send for `target`: finite, inside the velocity limits and within one control period's
        acceleration of the previous command -- for a drive with lag (`ControllerConfig.actuation`), within the
        command step that moves its velocity by one period's acceleration (a_max T / (1 - exp(-T / lag)) / slip)."""
        robot = self.controller.robot
        target = np.asarray(target, dtype=float).reshape(-1)
        if target.shape != (2,) or not np.all(np.isfinite(target)):
            target = np.zeros(2)
        step = self.command_step()
        last = self._last_command
        return robot.clip_control(np.clip(robot.clip_control(target), last - step, last + step))

    def _publish(
        self, target: np.ndarray, now_s: float, status: str, out: ControlOutput | None, reason: str = ""
    ) -> TickResult:
        command = self.limit(target)
        v, w = (float(c) for c in command)
        if self.params.use_stamped_twist:
            cmd = convert.make_twist_stamped(self.types, v, w, now_s, self.params.base_frame_id)
        else:
            cmd = convert.make_twist(self.types, v, w)
        plan = None
        if out is not None and out.plan is not None and out.plan.success:
            plan = convert.make_path(self.types, out.plan.states, now_s, self.params.frame_id)
        self._last_command = command
        return TickResult(cmd, plan, status, command, out, reason)

    def _record(self, result: TickResult, seconds: float) -> None:
        s = self.stats
        s.statuses[result.status] += 1
        s.last_status, s.last_reason = result.status, result.reason
        out = result.output
        s.tracks = () if out is None else tuple(nearest_first(out.tracks, out.start_state))
        s.predicted = None if out is None else out.predicted
        if result.status == "idle":
            return
        s.tick_ms.append(seconds * 1e3)
        if out is not None and out.plan is not None:
            s.solve_ms.append(out.plan.time_s * 1e3)
            s.iterations.append(out.plan.iterations)
            s.warm_starts[out.warm_start_source] += 1

    def status_change(self, result: TickResult) -> tuple[int, str] | None:
        """(logging level, line) for the node's log when the control status or its reason changed since the last call,
        else None: DEBUG for a normal status (`STATUS_LEVELS` 0: planned, rotating_to_path...), WARNING otherwise."""
        status = (result.status, result.reason)
        if status == self._reported_status:
            return None
        self._reported_status = status
        text = f"control status: {result.status}" + (f" ({result.reason})" if result.reason else "")
        return (logging.DEBUG if status_level(result.status) == 0 else logging.WARNING), text

    def diagnostics(self) -> tuple[int, str, dict[str, str]]:
        """(level 0 OK / 1 WARN / 2 ERROR, message, key -> value) for a diagnostic_msgs/DiagnosticStatus; with tracking
        on, the last tick's tracks too (`mnemo_mpc.ros.tracks.track_values`)."""
        s = self.stats

        def pct(values: deque, q: float) -> str:
            return f"{np.percentile(np.asarray(values), q):.3f}" if values else "n/a"

        values = {
            "status": s.last_status,
            "reason": s.last_reason,
            "tick_ms_p50": pct(s.tick_ms, 50),
            "tick_ms_p99": pct(s.tick_ms, 99),
            "tick_ms_max": f"{max(s.tick_ms):.3f}" if s.tick_ms else "n/a",
            "control_period_ms": f"{self.period_s * 1e3:.1f}",
            "solve_ms_p50": pct(s.solve_ms, 50),
            "sqp_iterations_mean": f"{np.mean(s.iterations):.2f}" if s.iterations else "n/a",
            "warm_start": self.controller.config.warm_start,
            "warm_start_sources": ", ".join(f"{k}={v}" for k, v in sorted(s.warm_starts.items())),
            "fallbacks": str(sum(n for status, n in s.statuses.items() if status.startswith("fallback"))),
            "stale_ticks": str(s.statuses["stale_input"]),
            "errors": str(s.statuses["error"]),
            "unexpected_drops": str(sum(s.unexpected.values())),
            "rejected_messages": ", ".join(f"{k}={v}" for k, v in sorted(s.rejected.items())) or "0",
            "last_rejection": s.last_rejection,
        }
        check = self.controller.last_goal_check
        values["goal_xy_error_m"] = f"{check.xy_error_m:.3f}" if check is not None else "n/a"
        values["goal_yaw_error_rad"] = f"{check.yaw_error_rad:+.3f}" if check is not None else "n/a"
        tracking = self.controller.config.tracking
        if tracking is not None:  # moving_prediction 'track': the last tick's tracks, in the grid's frame
            values.update(track_values(s.tracks, self.params.frame_id, tracking.slots + EXTRA_LISTED))
        message = s.last_status + (f": {s.last_reason}" if s.last_reason else "")
        return status_level(s.last_status), message, values
