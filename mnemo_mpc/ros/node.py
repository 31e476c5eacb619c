"""`ros2 run mnemo_mpc nav_node` / `ros2 launch mnemo_mpc nav.launch.py`: the local planner as a ROS2 node.

A thin adapter: parameters come from `NavParams` (declared with their descriptions), callbacks and the control
timer delegate to `NavAdapter`; /diagnostics reports its state; the library's log records (`mnemo_mpc.*`) go to the
node's ROS logger. Bad parameters end the process with one line on stderr and exit status 2; SIGINT and SIGTERM end
it with status 0.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from collections.abc import Callable
from typing import Any

import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion, Twist, TwistStamped, Vector3
from nav_msgs.msg import MapMetaData, OccupancyGrid, Odometry, Path
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from std_msgs.msg import Header

from mnemo_mpc.errors import MnemoError
from mnemo_mpc.profile import NODE_NAME, NavParams, ros_name
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.convert import MessageTypes
from mnemo_mpc.ros.ros_logging import forward_library_logs

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

# Goal and path subscriptions are volatile and reliable, as Nav2's: a volatile subscription matches volatile publishers
# (`ros2 topic pub`, RViz) and transient-local (latched) ones alike. (A transient-local subscription refused volatile
# publishers; subscribing with both made every volatile publisher warn about the incompatible twin.)
INPUT_QOS = QoSProfile(depth=1, durability=DurabilityPolicy.VOLATILE, reliability=ReliabilityPolicy.RELIABLE)


def read_params(node: Node, cls: type, reference: str) -> Any:
    """Declare every field of the parameter dataclass `cls` (`NavParams`, `SimNodeParams`) on `node` with its
    description and read the values back through `cls.from_dict`, which checks names, types and ranges. Dynamic
    typing: `-p control_rate_hz:=50` (an integer) is as valid as 50.0. Overrides that name no parameter (a typo in
    a params file) are warned about, pointing at `reference` for the names."""
    defaults = cls()
    for f in dataclasses.fields(cls):
        desc = ParameterDescriptor(description=f.metadata["description"], dynamic_typing=True)
        node.declare_parameter(ros_name(f), getattr(defaults, f.name), desc)
    values = {f.name: node.get_parameter(ros_name(f)).value for f in dataclasses.fields(cls)}
    params = cls.from_dict(values, source=f"node {node.get_fully_qualified_name()} parameters")
    declared = {ros_name(f) for f in dataclasses.fields(cls)}
    unknown = sorted(set(getattr(node, "_parameter_overrides", {})) - declared - {"use_sim_time"})
    if unknown:
        node.get_logger().warning(f"ignoring unknown parameter(s) {unknown}; see {reference} for the names")
    return params


class NavNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        forward_library_logs(self.get_logger())
        self.params = read_params(self, NavParams, "config/nav.yaml")
        self.adapter = NavAdapter(self.params, RCLPY_TYPES)
        p = self.params
        warm_up_s = self.adapter.warm_up()

        self.create_subscription(OccupancyGrid, p.grid_topic, self._cb(self.adapter.on_grid), 1)
        self.create_subscription(Odometry, p.odom_topic, self._cb(self.adapter.on_odometry), 10)
        self.create_subscription(PoseStamped, p.goal_topic, self._cb(self.adapter.on_goal), INPUT_QOS)
        self.create_subscription(Path, p.path_topic, self._cb(self.adapter.on_path), INPUT_QOS)
        self.cmd_pub = self.create_publisher(TwistStamped if p.use_stamped_twist else Twist, p.cmd_vel_topic, 10)
        self.plan_pub = self.create_publisher(Path, p.local_plan_topic, 1)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 1)
        self.create_timer(p.control_period_s, self._tick)
        self.create_timer(1.0 / p.diagnostics_rate_hz, self._publish_diagnostics)
        controller = self.adapter.controller
        model = controller.warm_start_provider
        self.get_logger().info(
            f"mnemo_mpc local planner: N={p.horizon_steps}, dt={p.dt}, {p.sqp_method}, {p.control_rate_hz:g} Hz, "
            f"window {p.window_cells}x{p.window_cells} at {p.grid_resolution} m (ready in {warm_up_s:.1f} s), "
            f"grid '{p.grid_topic}', odom '{p.odom_topic}', goal '{p.goal_topic}' in frame '{p.frame_id}'; "
            f"warm start {controller.config.warm_start}"
            + (f" with {model.info.path} on {model.provider}" if model is not None else "")
        )

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _cb(self, handler):
        def callback(msg) -> None:
            handler(msg, self._now())  # the adapter drops and logs bad messages; it never raises

        return callback

    def _tick(self) -> None:
        result = self.adapter.tick(self._now())
        if result.cmd_vel is not None:
            self.cmd_pub.publish(result.cmd_vel)
        if result.local_plan is not None:
            self.plan_pub.publish(result.local_plan)
        change = self.adapter.status_change(result)
        if change is not None:  # a normal status (planned, rotating_to_path...) at DEBUG; see adapter.STATUS_LEVELS
            level, text = change
            logger = self.get_logger()
            (logger.debug if level <= logging.DEBUG else logger.warning)(text)

    def _publish_diagnostics(self) -> None:
        level, message, values = self.adapter.diagnostics()
        status = DiagnosticStatus(
            level=bytes([level]),
            name=f"{self.get_fully_qualified_name()}: local planner",
            message=message[:256],
            hardware_id=self.params.base_frame_id,
            values=[KeyValue(key=k, value=v) for k, v in values.items()],
        )
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diag_pub.publish(array)


def run_node(name: str, make_node: Callable[[], Node], argv: list[str] | None = None) -> int:
    """Run a node process: 0 on SIGINT / SIGTERM (rclpy's handlers turn both into a shutdown) or when the node asks
    to stop (an `exit_code` attribute it sets), 2 with one line on stderr for bad parameters or arguments. The node's
    `destroy_node` runs on every way out."""
    from rclpy.impl.implementation_singleton import rclpy_implementation

    node, started, code = None, False, 0
    try:
        rclpy.init(args=argv if argv is not None else sys.argv)
        started = True
        node = make_node()
        executor = SingleThreadedExecutor()
        executor.add_node(node)
        while rclpy.ok() and getattr(node, "exit_code", None) is None:
            executor.spin_once(timeout_sec=0.1)
        code = getattr(node, "exit_code", None) or 0
    except (KeyboardInterrupt, ExternalShutdownException):  # Ctrl-C, or SIGTERM from launch / a supervisor
        code = 0
    except (MnemoError, rclpy_implementation.RCLError) as exc:
        if not started or rclpy.ok():  # after a signal during start-up the context is gone: that is no error
            sys.stderr.write(f"{name}: error: {exc}\n")
            code = 2
    finally:
        if node is not None:
            node.destroy_node()
        if rclpy.ok():
            rclpy.shutdown()
    return code


def main(argv: list[str] | None = None) -> int:
    return run_node(NODE_NAME, NavNode, argv)


if __name__ == "__main__":
    sys.exit(main())
