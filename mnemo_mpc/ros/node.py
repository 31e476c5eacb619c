"""`ros2 run mnemo_mpc nav_node` / `ros2 launch mnemo_mpc nav.launch.py`: the local planner as a ROS2 node.

A thin adapter: parameters come from `NavParams` (declared with their descriptions), callbacks and the control
timer delegate to `NavAdapter`. The only module of the package that imports rclpy.
"""

from __future__ import annotations

import dataclasses
import sys

import rclpy
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion, Twist, TwistStamped, Vector3
from nav_msgs.msg import MapMetaData, OccupancyGrid, Odometry, Path
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Header

from mnemo_mpc.errors import MnemoError
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.convert import MessageTypes
from mnemo_mpc.ros.params import NODE_NAME, NavParams

RCLPY_TYPES = MessageTypes(
    Time=Time,
    Header=Header,
    Vector3=Vector3,
    Twist=Twist,
    TwistStamped=TwistStamped,
    Point=Point,
    Quaternion=Quaternion,
    Pose=Pose,
    PoseStamped=PoseStamped,
    Path=Path,
    MapMetaData=MapMetaData,
    OccupancyGrid=OccupancyGrid,
)


class NavNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        defaults = NavParams()
        for f in dataclasses.fields(NavParams):
            self.declare_parameter(
                f.name, getattr(defaults, f.name), ParameterDescriptor(description=f.metadata["description"])
            )
        values = {f.name: self.get_parameter(f.name).value for f in dataclasses.fields(NavParams)}
        self.params = NavParams.from_dict(values, source=f"node {self.get_name()} parameters")
        self.adapter = NavAdapter(self.params, RCLPY_TYPES)
        p = self.params

        latched = QoSProfile(
            depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
        )
        self.create_subscription(OccupancyGrid, p.grid_topic, self._cb(self.adapter.on_grid), 1)
        self.create_subscription(Odometry, p.odom_topic, self._cb(self.adapter.on_odometry), 10)
        self.create_subscription(PoseStamped, p.goal_topic, self._cb(self.adapter.on_goal), latched)
        self.create_subscription(Path, p.path_topic, self._cb(self.adapter.on_path), latched)
        self.cmd_pub = self.create_publisher(TwistStamped if p.use_stamped_twist else Twist, p.cmd_vel_topic, 10)
        self.plan_pub = self.create_publisher(Path, p.local_plan_topic, 1)
        self.create_timer(1.0 / p.control_rate_hz, self._tick)
        controller = self.adapter.controller
        model = controller.warm_start_provider
        self.get_logger().info(
            f"mnemo_mpc local planner: N={p.horizon_steps}, dt={p.dt}, {p.sqp_method}, {p.control_rate_hz} Hz, "
            f"grid '{p.grid_topic}', odom '{p.odom_topic}', goal '{p.goal_topic}' in frame '{p.frame_id}'; "
            f"warm start {controller.config.warm_start}"
            + (f" with {model.info.path} on {model.provider}" if model is not None else "")
        )

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _cb(self, handler):
        def callback(msg) -> None:
            try:
                handler(msg, self._now())
            except MnemoError as exc:  # a malformed message is reported and dropped, never fatal
                self.get_logger().warning(f"dropped {type(msg).__name__}: {exc}")

        return callback

    def _tick(self) -> None:
        result = self.adapter.tick(self._now())
        if result.cmd_vel is not None:
            self.cmd_pub.publish(result.cmd_vel)
        if result.local_plan is not None:
            self.plan_pub.publish(result.local_plan)
        if result.status not in ("idle", "planned"):
            self.get_logger().info(f"control status: {result.status}", throttle_duration_sec=1.0)


def main(argv: list[str] | None = None) -> int:
    rclpy.init(args=argv if argv is not None else sys.argv)
    node = NavNode()
    try:
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):  # Ctrl-C, or SIGTERM from launch / a supervisor
        pass
    finally:
        node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
