"""The lifecycle planner (`controller_server`, `mnemo_mpc/ros/lifecycle_node.py`) under real rclpy, driven through
Nav2's transitions by a lifecycle client in this test, with the same kinematic robot as the plain node's live tests:
nothing moves before activation, goals sent while inactive are dropped, an active node drives to a goal, a deactivate
brings the robot to rest within the acceleration limits and then publishes nothing, cleanup releases the
subscriptions, configure runs again, and shutdown ends cleanly.
"""

from __future__ import annotations

import signal
import time

import pytest

rclpy = pytest.importorskip("rclpy", reason="ROS 2 Jazzy rclpy wheels: pip install 'ros-jazzy-rclpy[fastrtps]'")
pytest.importorskip("lifecycle_msgs", reason="ROS 2 Jazzy lifecycle_msgs (comes with the rclpy wheel)")

from test_ros_node_live import STARTUP_S, LiveNode, assert_within_limits  # noqa: E402
from test_ros_node_live import ros_env as ros_env  # noqa: E402  (the fixture, shared)

from mnemo_mpc.profile import NODE_NAME  # noqa: E402


class Lifecycle:
    """A lifecycle client of the planner node: `change(transition)` and `state()` over its services."""

    def __init__(self, live: LiveNode) -> None:
        from lifecycle_msgs.srv import ChangeState, GetState

        self.live = live
        self.change_client = live.node.create_client(ChangeState, f"/{NODE_NAME}/change_state")
        self.state_client = live.node.create_client(GetState, f"/{NODE_NAME}/get_state")

    def _call(self, client, request, timeout_s: float):
        assert self.live.spin(30.0, until=client.service_is_ready), self.live.text()[-3000:]
        future = client.call_async(request)
        assert self.live.spin(timeout_s, until=future.done), f"no answer; node log:\n{self.live.text()[-3000:]}"
        return future.result()

    def change(self, label: str, timeout_s: float = 30.0) -> bool:
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        request = ChangeState.Request()
        request.transition.id = getattr(Transition, f"TRANSITION_{label.upper()}")
        return self._call(self.change_client, request, timeout_s).success

    def state(self) -> str:
        from lifecycle_msgs.srv import GetState

        return self._call(self.state_client, GetState.Request(), 10.0).current_state.label


def test_lifecycle_transitions_gate_and_stop_the_planner(ros_env, tmp_path):  # noqa: F811
    live = LiveNode(ros_env, tmp_path, module="mnemo_mpc.ros.lifecycle_node")
    try:
        lc = Lifecycle(live)
        assert lc.state() == "unconfigured"
        assert live.odom_pub.get_subscription_count() == 0  # nothing subscribed before configure

        assert lc.change("configure", timeout_s=STARTUP_S)  # the planner is built and warmed up here
        assert lc.state() == "inactive"
        assert live.spin(10.0, until=lambda: live.odom_pub.get_subscription_count() > 0)
        goal_pub = live.goal_publisher(latched=False)
        assert live.spin(10.0, until=lambda: goal_pub.get_subscription_count() > 0)
        goal_pub.publish(live.goal_msg(3.0, 0.0))
        live.spin(1.5)
        assert not live.commands, "an inactive node published commands"
        assert "goal dropped: the node is not active" in live.text()

        assert lc.change("activate")
        assert lc.state() == "active"
        goal_pub.publish(live.goal_msg(3.0, 0.0))
        assert live.spin(20.0, until=lambda: live.command[0] > 0.3), live.text()[-3000:]

        assert lc.change("deactivate")
        deactivated = time.monotonic()
        live.spin(1.0)  # the ramp's last messages are in flight when the transition answers
        assert lc.state() == "inactive"
        assert live.command[0] == 0.0 and live.command[1] == 0.0, live.commands[-5:]
        assert_within_limits(live.commands_since(0.0), 10.0)  # the ramp too: every step within a_max T
        late = [c for c in live.commands if c[0] > deactivated + 0.5]
        assert not late, f"commands after the deactivate: {late}"

        assert lc.change("cleanup")
        assert lc.state() == "unconfigured"
        assert live.spin(10.0, until=lambda: live.odom_pub.get_subscription_count() == 0)
        assert lc.change("configure", timeout_s=STARTUP_S)  # parameters declared once; configure runs again
        assert lc.state() == "inactive"
        assert lc.change("inactive_shutdown")
        assert lc.state() == "finalized"
    finally:
        rc = live.stop(signal.SIGINT)
    text = live.text()
    assert rc == 0, text[-3000:]
    assert "Traceback" not in text and " failed: " not in text, text[-3000:]
