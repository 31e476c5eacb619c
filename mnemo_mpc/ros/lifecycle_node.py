"""`ros2 run mnemo_mpc controller_server`: the local planner as a Nav2-style lifecycle (managed) node.

Nav2's controller server is a lifecycle node that its lifecycle manager configures and activates; this one follows the
same transitions (REP-2006 / `rclpy.lifecycle`), so a Nav2 bringup can manage it in place of Nav2's:

* **configure**: parameters read and checked, the planner built and warmed up (the NLP built or loaded, one solve
  run), subscriptions and publishers created. A bad parameter fails the transition with the reason logged; the node
  stays unconfigured.
* **activate**: the control and diagnostics timers start.
* **deactivate**: the robot is brought to rest first -- the command ramps to zero within the acceleration limits
  every published command keeps (`NavAdapter.stop`, `NavAdapter.limit`), one control period apart -- then the timers
  stop. Goals received while inactive are dropped with a log line: nothing drives the robot until it is activated.
* **cleanup**: subscriptions, publishers and the planner released; configure may run again.
* **shutdown**: as deactivate and cleanup, from any state.

`autostart:=true` configures and activates at start-up, for use without a lifecycle manager. The topic interface is
the plain node's (`nav_node`, `mnemo_mpc/ros/node.py`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import numpy as np
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from mnemo_mpc.errors import MnemoError
from mnemo_mpc.profile import NODE_NAME
from mnemo_mpc.ros import follow_path
from mnemo_mpc.ros.follow_path import Outcome
from mnemo_mpc.ros.node import PlannerInterface, run_node
from mnemo_mpc.ros.ros_logging import forward_library_logs

SUCCESS, FAILURE = TransitionCallbackReturn.SUCCESS, TransitionCallbackReturn.FAILURE


def _transition(name: str) -> Callable:
    """A transition callback that logs what went wrong: rclpy turns an exception into ERROR without a word."""

    def wrap(method: Callable) -> Callable:
        def callback(self: NavLifecycleNode, state: LifecycleState) -> TransitionCallbackReturn:
            try:
                result = method(self, state)
            except MnemoError as exc:
                self.get_logger().error(f"{name} failed: {exc}")
                return FAILURE
            except Exception as exc:
                self.get_logger().error(f"{name} failed: {type(exc).__name__}: {exc}")
                raise
            self.get_logger().info(f"{name}: done")
            return result

        return callback

    return wrap


class NavLifecycleNode(PlannerInterface, LifecycleNode):
    def __init__(self) -> None:
        LifecycleNode.__init__(self, NODE_NAME)
        forward_library_logs(self.get_logger())
        self.adapter = None
        self._active = False
        desc = ParameterDescriptor(description="configure and activate at start-up (no lifecycle manager needed)")
        self.declare_parameter("autostart", False, desc)
        if self.get_parameter("autostart").value:
            if self.trigger_configure() == SUCCESS:
                self.trigger_activate()

    @_transition("configure")
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._configure_planner()
        return SUCCESS

    @_transition("activate")
    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._start_control()
        self._active = True
        return super().on_activate(state)

    @_transition("deactivate")
    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._come_to_rest("deactivated")
        self._stop_control()
        self._active = False
        return super().on_deactivate(state)

    @_transition("cleanup")
    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._release_planner()
        return SUCCESS

    @_transition("shutdown")
    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        if self.adapter is not None:
            if self._active:
                self._come_to_rest("shutting down")
                self._active = False
            self._release_planner()
        return SUCCESS

    def _accepting_goals(self) -> bool:
        return self._active

    def _on_goal(self, msg, now_s: float) -> None:
        if not self._active:
            self.get_logger().warning("goal dropped: the node is not active (activate it to drive)")
            return
        super()._on_goal(msg, now_s)

    def _come_to_rest(self, reason: str) -> None:
        """Publish the ramp to zero here and now, one control period apart: after this transition no timer runs, and
        a base keeps driving on the last command it got. Bounded: a full-speed command reaches zero in
        max(v_max / (a_max T), w_max / (alpha_max T)) periods."""
        adapter = self.adapter
        self._end_following(Outcome("aborted", follow_path.NONE, reason))
        adapter.stop(reason)
        periods = float(np.max(np.abs(adapter.command_range()) / adapter.command_step()))
        for _ in range(int(np.ceil(periods)) + 2):
            if adapter.at_rest:
                break
            now = self._now()
            self._publish_tick(adapter.tick(now), now)
            time.sleep(adapter.period_s)
        if not adapter.at_rest:  # the limiter's arithmetic makes this unreachable; say so if it ever is not
            self.get_logger().error(f"{reason}: the command did not reach zero in {periods:.0f} periods")


def main(argv: list[str] | None = None) -> int:
    return run_node(NODE_NAME, NavLifecycleNode, argv)


if __name__ == "__main__":
    sys.exit(main())
