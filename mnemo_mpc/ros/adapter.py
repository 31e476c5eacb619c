"""What the ROS node does each callback, without rclpy: messages in (by field name), messages out.

The node (`node.py`) only wires subscriptions, publishers, parameters and the timer to a `NavAdapter`; `replay`
drives the same adapter from a rosbag2. Policy, in one place:

* every input must be in `frame_id` (REP-105 `odom`); a message in another frame is dropped with a warning;
* no goal -> nothing is published (the robot is not ours to drive);
* goal active but odometry or grid missing / older than `stale_timeout_s` -> a stop command that decelerates within
  the acceleration limits (never a jump to zero, never a stale plan);
* otherwise the controller's checked command (finite and within limits by construction, re-checked here);
* goal reached -> braking commands within the acceleration limits until the command is zero, then the goal is
  cleared (a jump to zero from speed would break the limits).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.nav.controller import Controller, ControlOutput
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.params import NavParams

log = logging.getLogger(__name__)


@dataclass
class TickResult:
    """What to publish this control period (None: publish nothing)."""

    cmd_vel: Any | None
    local_plan: Any | None
    status: str  # "idle" | "stale_input" | "goal_reached" | a ControlOutput.status
    command: np.ndarray | None = None
    output: ControlOutput | None = None


@dataclass
class _Stamped:
    value: Any
    received_s: float


class NavAdapter:
    def __init__(self, params: NavParams, types: convert.MessageTypes, controller: Controller | None = None) -> None:
        self.params = params
        self.types = types
        self.controller = controller or params.controller()
        self._grid: _Stamped | None = None
        self._odom: _Stamped | None = None
        self._goal: np.ndarray | None = None
        self._path: np.ndarray | None = None
        self._last_command = np.zeros(2)

    # --- inputs ---------------------------------------------------------------------------------------------------
    def _in_frame(self, msg: Any, what: str) -> bool:
        frame = msg.header.frame_id
        if frame != self.params.frame_id:
            log.warning("%s in frame %r dropped: expected frame_id %r", what, frame, self.params.frame_id)
            return False
        return True

    def on_grid(self, msg: Any, now_s: float) -> None:
        if self._in_frame(msg, "grid"):
            self._grid = _Stamped(convert.grid_from_msg(msg), now_s)

    def on_odometry(self, msg: Any, now_s: float) -> None:
        if self._in_frame(msg, "odometry"):
            self._odom = _Stamped(convert.state_from_odometry(msg), now_s)

    def on_goal(self, msg: Any, now_s: float) -> None:
        if self._in_frame(msg, "goal"):
            self._goal = convert.goal_from_pose_stamped(msg)
            self.controller.reset()
            log.info("new goal %s", np.round(self._goal, 3).tolist())

    def on_path(self, msg: Any, now_s: float) -> None:
        if self._in_frame(msg, "global path"):
            path = convert.path_from_msg(msg)
            self._path = path if len(path) >= 2 else None

    @property
    def goal(self) -> np.ndarray | None:
        return self._goal

    # --- control period -------------------------------------------------------------------------------------------
    def tick(self, now_s: float) -> TickResult:
        p = self.params
        if self._goal is None:
            return TickResult(None, None, "idle")
        fresh = [s is not None and now_s - s.received_s <= p.stale_timeout_s for s in (self._grid, self._odom)]
        if not all(fresh):
            velocity = self._odom.value[1] if self._odom is not None else self._last_command
            command = self.controller.stop_command(velocity)
            return self._publish(command, now_s, "stale_input", None)
        grid: OccupancyGrid = self._grid.value
        pose, velocity = self._odom.value
        out = self.controller.step(grid, pose, velocity, self._goal, global_path=self._path)
        if out.status == "goal_reached" and not np.any(out.command):
            self._goal = None
        return self._publish(out.command, now_s, out.status, out)

    def _publish(self, command: np.ndarray, now_s: float, status: str, out: ControlOutput | None) -> TickResult:
        # The controller already guarantees finite, in-limit commands; make_twist refuses NaN as a last line.
        v, w = (float(c) for c in command)
        if self.params.use_stamped_twist:
            cmd = convert.make_twist_stamped(self.types, v, w, now_s, self.params.base_frame_id)
        else:
            cmd = convert.make_twist(self.types, v, w)
        plan = None
        if out is not None and out.plan is not None and out.plan.success:
            plan = convert.make_path(self.types, out.plan.states, now_s, self.params.frame_id)
        self._last_command = np.array([v, w])
        return TickResult(cmd, plan, status, np.array([v, w]), out)
