"""`python -m mnemo_mpc.ros.follow_path_client`: drive the planner through Nav2's `FollowPath` action, as
bt_navigator does, from the simulator's latched goal and global path.

Takes the global path (`plan_topic`) and the goal (`goal_topic`), sends the path, ending at the goal with its heading,
to the `follow_path` action, and re-sends it whenever either is published again (the simulator re-expresses both in
the drifting odom frame after a localiser fix; bt_navigator likewise re-sends each re-planned path), which the
planner takes as a preemption without a stop. Logs the result and exits 0 when the goal succeeded, 1 otherwise.
Used by `mnemo-mpc dds-loop --interface action` and the live tests; needs nav2_msgs (`mnemo-mpc ros-interfaces`).
"""

from __future__ import annotations

import sys
import time

from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from rclpy.action import ActionClient
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from mnemo_mpc.errors import InputError
from mnemo_mpc.ros.node import FOLLOW_PATH_ACTION, run_node

CLIENT_NODE_NAME = "mnemo_mpc_follow_path_client"
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
STATES = {4: "succeeded", 5: "canceled", 6: "aborted"}  # action_msgs/GoalStatus


def path_to_goal(plan: Path | None, goal: PoseStamped) -> Path:
    """The global path with the goal pose as its last pose (its heading is the goal's), in the goal's frame."""
    path = Path()
    path.header = goal.header
    path.poses = [
        p for p in (plan.poses if plan is not None else []) if p.header.frame_id in ("", goal.header.frame_id)
    ]
    path.poses.append(goal)
    return path


class FollowPathClient(Node):
    def __init__(self) -> None:
        super().__init__(CLIENT_NODE_NAME)
        try:
            from nav2_msgs.action import FollowPath
        except ImportError as exc:
            raise InputError(
                "nav2_msgs is not installed: build it with `mnemo-mpc ros-interfaces build` (docs/ros.md)"
            ) from exc
        self.declare_parameter("plan_topic", "plan")
        self.declare_parameter("goal_topic", "goal_pose")
        self.declare_parameter("action", FOLLOW_PATH_ACTION)
        self.exit_code: int | None = None
        self._type = FollowPath
        self._client = ActionClient(self, FollowPath, self.get_parameter("action").value)
        self._plan: Path | None = None
        self._goal: PoseStamped | None = None
        self._sent_s: float | None = None
        self._sends = 0
        self.create_subscription(Path, self.get_parameter("plan_topic").value, self._on_plan, LATCHED)
        self.create_subscription(PoseStamped, self.get_parameter("goal_topic").value, self._on_goal, LATCHED)
        self.create_timer(0.2, self._send_when_ready)
        self._pending = False

    def _on_plan(self, msg: Path) -> None:
        self._plan, self._pending = msg, True

    def _on_goal(self, msg: PoseStamped) -> None:
        self._goal, self._pending = msg, True

    def _send_when_ready(self) -> None:
        if not self._pending or self._goal is None or self.exit_code is not None:
            return
        if not self._client.server_is_ready():
            return
        self._pending = False
        goal = self._type.Goal(path=path_to_goal(self._plan, self._goal), controller_id="FollowPath")
        self._sends += 1
        if self._sent_s is None:
            self._sent_s = time.monotonic()
            self.get_logger().info(f"FollowPath: sending a path of {len(goal.path.poses)} poses")
        else:
            self.get_logger().info(f"FollowPath: path re-sent (#{self._sends}: goal or path published again)")
        self._client.send_goal_async(goal).add_done_callback(lambda f, n=self._sends: self._on_accepted(f, n))

    def _on_accepted(self, future, send: int) -> None:
        handle = future.result()
        if not handle.accepted:
            self.get_logger().error("FollowPath: goal rejected")
            self.exit_code = 1
            return
        handle.get_result_async().add_done_callback(lambda f: self._on_result(f, send))

    def _on_result(self, future, send: int) -> None:
        if send != self._sends:  # a preempted goal's result: the goal re-sent since carries on
            return
        response = future.result()
        state = STATES.get(response.status, f"status {response.status}")
        result = response.result
        message = getattr(result, "error_msg", "")
        wall = time.monotonic() - self._sent_s
        self.get_logger().info(
            f"FollowPath result: {state} (error_code {result.error_code}{', ' + message if message else ''}) "
            f"after {wall:.2f} s wall, {self._sends} send(s)"
        )
        self.exit_code = 0 if state == "succeeded" else 1


def main(argv: list[str] | None = None) -> int:
    return run_node(CLIENT_NODE_NAME, FollowPathClient, argv)


if __name__ == "__main__":
    sys.exit(main())
