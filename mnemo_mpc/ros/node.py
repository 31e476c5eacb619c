"""`ros2 run mnemo_mpc nav_node` / `ros2 launch mnemo_mpc nav.launch.py`: the local planner as a ROS2 node.

The planner's ROS side is `PlannerInterface`, shared with the lifecycle node (`ros2 run mnemo_mpc controller_server`,
`lifecycle_node.py`); this node is configured and running from the start. A thin adapter: parameters come from
`NavParams` (declared with their descriptions), callbacks and the control timer delegate to `NavAdapter`;
/diagnostics reports its state; the footprint, covering discs and plan are drawn on `~/markers`, and with
`moving_prediction: track` the tracked obstacles on `~/tracks` (visualization_msgs/MarkerArray, when that package is
installed); the library's log records (`mnemo_mpc.*`) go to the node's ROS logger. Bad parameters end the process
with one line on stderr and exit status 2; SIGINT and SIGTERM end it with status 0.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rclpy
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import Point, Pose, PoseStamped, Quaternion, Twist, TwistStamped, Vector3
from nav_msgs.msg import MapMetaData, OccupancyGrid, Odometry, Path
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
from rclpy.task import Future
from std_msgs.msg import Header

from mnemo_mpc.errors import MnemoError
from mnemo_mpc.profile import NAV2_NAMES, NODE_NAME, NavParams, ros_name
from mnemo_mpc.ros import follow_path
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.convert import MessageTypes
from mnemo_mpc.ros.follow_path import Outcome, PathFollowing
from mnemo_mpc.ros.markers import MARKERS_TOPIC, planner_markers
from mnemo_mpc.ros.ros_logging import forward_library_logs
from mnemo_mpc.ros.tracks import MarkerTypes, track_markers

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
SCAN_QOS = qos_profile_sensor_data  # best effort: matches a reliable or a best-effort scan publisher
FOLLOW_PATH_ACTION = "follow_path"  # Nav2's controller server's action name, in the node's namespace
TRACKS_TOPIC = "~/tracks"  # the tracked obstacles' markers (moving_prediction 'track'); remap it as any topic
# Markers at most this often (a display needs no more; a MarkerArray of 5 tracks takes ~1.4 ms to build in rclpy)
MARKER_RATE_HZ = 10.0


def marker_types() -> MarkerTypes | None:
    """rclpy's classes for the track markers, or None when visualization_msgs is not installed (it is optional: the
    `[ros]` extra brings it, a ROS install may not have it)."""
    try:
        from sensor_msgs.msg import CompressedImage
        from std_msgs.msg import ColorRGBA
        from visualization_msgs.msg import Marker, MarkerArray, MeshFile
    except ImportError:
        return None
    from builtin_interfaces.msg import Duration

    return MarkerTypes(
        base=RCLPY_TYPES,
        Marker=Marker,
        MarkerArray=MarkerArray,
        ColorRGBA=ColorRGBA,
        Duration=Duration,
        texture=CompressedImage(),
        mesh_file=MeshFile(),
    )


def read_params(node: Node, cls: type, reference: str) -> Any:
    """Declare every field of the parameter dataclass `cls` (`NavParams`, `SimNodeParams`) on `node` with its
    description and read the values back through `cls.from_dict`, which checks names, types and ranges. Dynamic
    typing: `-p control_rate_hz:=50` (an integer) is as valid as 50.0. Overrides that name no parameter (a typo in
    a params file) are warned about, pointing at `reference` for the names."""
    defaults = cls()
    for f in dataclasses.fields(cls):
        if node.has_parameter(ros_name(f)):  # declared by an earlier configure of the same (lifecycle) node
            continue
        desc = ParameterDescriptor(description=f.metadata["description"], dynamic_typing=True)
        node.declare_parameter(ros_name(f), getattr(defaults, f.name), desc)
    values = {f.name: node.get_parameter(ros_name(f)).value for f in dataclasses.fields(cls)}
    overrides = set(getattr(node, "_parameter_overrides", {}))
    aliases = NAV2_NAMES if cls is NavParams else {}
    for nav2, ours in aliases.items():  # Nav2's names, accepted for ours (`profile.NAV2_NAMES`)
        if not node.has_parameter(nav2):
            desc = ParameterDescriptor(description=f"Nav2's name for {ours}", dynamic_typing=True)
            node.declare_parameter(nav2, getattr(defaults, ours), desc)
        if nav2 in overrides:
            values[nav2] = node.get_parameter(nav2).value
            if ours not in overrides:
                del values[ours]  # our name at its default: Nav2's given value is the setting
    params = cls.from_dict(values, source=f"node {node.get_fully_qualified_name()} parameters")
    declared = {ros_name(f) for f in dataclasses.fields(cls)} | set(aliases)
    unknown = sorted(overrides - declared - {"use_sim_time"})
    if unknown:
        node.get_logger().warning(f"ignoring unknown parameter(s) {unknown}; see {reference} for the names")
    return params


def _marker_due(last_s: float, now_s: float) -> bool:
    """A marker array is due: none for 1 / MARKER_RATE_HZ (less a millisecond), or the clock went back."""
    return not 0.0 <= now_s - last_s < 1.0 / MARKER_RATE_HZ - 1e-3


@dataclass
class _Following:
    """The FollowPath goal being driven: its handle, its bookkeeping and the future its execute callback awaits."""

    handle: Any
    task: PathFollowing
    done: Future
    canceling: bool = False


class PlannerInterface:
    """The planner's ROS side, shared by the plain node (`NavNode`: configured and running from the start) and the
    lifecycle node (`ros/lifecycle_node.py`: Nav2's configure / activate / deactivate / cleanup). A mixin on an rclpy
    node: `_configure_planner` reads the parameters, builds and warms up the planner and creates the subscriptions and
    publishers; `_start_control` / `_stop_control` create and destroy the timers; `_release_planner` undoes the
    configuration."""

    def _configure_planner(self) -> None:
        self.params = read_params(self, NavParams, "config/nav.yaml")
        self.adapter = NavAdapter(self.params, RCLPY_TYPES)
        p = self.params
        warm_up_s = self.adapter.warm_up()

        self._subscriptions_made = [
            self.create_subscription(OccupancyGrid, p.grid_topic, self._cb(self.adapter.on_grid), 1),
            self.create_subscription(Odometry, p.odom_topic, self._cb(self.adapter.on_odometry), 10),
            *self._scan_subscription(),
            self.create_subscription(PoseStamped, p.goal_topic, self._cb(self._on_goal), INPUT_QOS),
            self.create_subscription(Path, p.path_topic, self._cb(self.adapter.on_path), INPUT_QOS),
        ]
        self._subscriptions_made += self._tf_subscriptions()
        self.cmd_pub = self.create_publisher(TwistStamped if p.use_stamped_twist else Twist, p.cmd_vel_topic, 10)
        self.plan_pub = self.create_publisher(Path, p.local_plan_topic, 1)
        self.diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 1)
        self._publishers_made = [self.cmd_pub, self.plan_pub, self.diag_pub]
        self.marker_types = marker_types()
        self.marker_pub, self._markers_shown, self._markers_s = None, False, -math.inf
        self.planner_marker_pub, self._planner_markers_s = None, -math.inf
        if self.marker_types is None:
            self.get_logger().info(
                "visualization_msgs is not installed: no markers on "
                f"{MARKERS_TOPIC} or {TRACKS_TOPIC} (install ros-jazzy-visualization-msgs for them)"
            )
        else:
            self.planner_marker_pub = self.create_publisher(self.marker_types.MarkerArray, MARKERS_TOPIC, 1)
            self._publishers_made.append(self.planner_marker_pub)
            if self.adapter.controller.config.tracking is not None:
                self.marker_pub = self.create_publisher(self.marker_types.MarkerArray, TRACKS_TOPIC, 1)
                self._publishers_made.append(self.marker_pub)
        self._timers_made: list[Any] = []
        self._following: _Following | None = None
        self._follow_server = self._make_follow_path_server()
        controller = self.adapter.controller
        model = controller.warm_start_provider
        self.get_logger().info(
            f"mnemo_mpc local planner: N={p.horizon_steps}, dt={p.dt}, {p.sqp_method}, {p.control_rate_hz:g} Hz, "
            f"window {p.window_cells}x{p.window_cells} at {p.grid_resolution} m (ready in {warm_up_s:.1f} s), "
            f"grid '{p.grid_topic}', odom '{p.odom_topic}', goal '{p.goal_topic}' in frame '{p.frame_id}', "
            f"scan {repr(p.scan_topic) if p.scan_topic else 'none'}; "
            f"warm start {controller.config.warm_start}"
            + (f" with {model.info.path} on {model.provider}" if model is not None else "")
        )

    def _start_control(self) -> None:
        p = self.params
        self._timers_made = [
            self.create_timer(p.control_period_s, self._tick),
            self.create_timer(1.0 / p.diagnostics_rate_hz, self._publish_diagnostics),
        ]

    def _stop_control(self) -> None:
        for timer in self._timers_made:
            self.destroy_timer(timer)
        self._timers_made = []

    def _release_planner(self) -> None:
        self._stop_control()
        self._end_following(Outcome("aborted", follow_path.NONE, "the planner was released"))
        if self._follow_server is not None:
            self._follow_server.destroy()
            self._follow_server = None
        for sub in self._subscriptions_made:
            self.destroy_subscription(sub)
        for pub in self._publishers_made:
            self.destroy_publisher(pub)
        self._subscriptions_made, self._publishers_made = [], []
        self.adapter = None

    def _now(self) -> float:
        return self.get_clock().now().nanoseconds * 1e-9

    def _cb(self, handler):
        def callback(msg) -> None:
            handler(msg, self._now())  # the adapter drops and logs bad messages; it never raises

        return callback

    def _on_goal(self, msg, now_s: float) -> None:
        self._end_following(Outcome("aborted", follow_path.NONE, "replaced by a goal on the goal topic"))
        self.adapter.on_goal(msg, now_s)

    def _tick(self) -> None:
        now = self._now()
        following = self._following
        if following is not None and following.handle.is_cancel_requested and not following.canceling:
            # before this tick's command, as Nav2 checks for a cancel before computing one: else it could still speed up
            self.adapter.stop("FollowPath goal cancelled")
            following.canceling = True
        result = self.adapter.tick(now)
        self._publish_tick(result, now)
        if self._following is not None:
            self._follow_tick(result, now)

    def _scan_subscription(self) -> list[Any]:
        """The lidar's returns (`scan_topic`; none when empty), with the sensor data QoS (best effort, as drivers
        publish scans): they place walls finer than the grid's cells."""
        if not self.params.scan_topic:
            return []
        from sensor_msgs.msg import LaserScan

        return [self.create_subscription(LaserScan, self.params.scan_topic, self._cb(self.adapter.on_scan), SCAN_QOS)]

    def _tf_subscriptions(self) -> list[Any]:
        """/tf and /tf_static into the adapter's transform buffer (goal and path in map), when tf2_msgs is installed;
        QoS as tf2_ros's listener: /tf volatile, /tf_static transient local (latched), both reliable, depth 100."""
        try:
            from tf2_msgs.msg import TFMessage
        except ImportError:
            self.get_logger().info(
                f"tf2_msgs is not installed: no /tf, goal and path in '{self.params.frame_id}' only "
                "(`mnemo-mpc ros-interfaces build` makes the package; see docs/ros.md)"
            )
            return []
        adapter = self.adapter
        depth, reliable = 100, ReliabilityPolicy.RELIABLE
        volatile = QoSProfile(depth=depth, durability=DurabilityPolicy.VOLATILE, reliability=reliable)
        latched = QoSProfile(depth=depth, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=reliable)
        return [
            self.create_subscription(TFMessage, "/tf", self._cb(adapter.on_tf), volatile),
            self.create_subscription(
                TFMessage, "/tf_static", self._cb(lambda msg, now: adapter.on_tf(msg, now, static=True)), latched
            ),
        ]

    # --- the FollowPath action (nav2_msgs, when installed; see `follow_path.py` for its semantics) ---------------
    def _accepting_goals(self) -> bool:
        return True

    def _make_follow_path_server(self) -> Any:
        try:
            from nav2_msgs.action import FollowPath
        except ImportError:
            self.get_logger().info(
                "nav2_msgs is not installed: no 'follow_path' action, the topics only (`mnemo-mpc ros-interfaces "
                "build` makes the package; see docs/ros.md)"
            )
            return None
        from rclpy.action import ActionServer, CancelResponse, GoalResponse

        self._follow_path_type = FollowPath

        def accept(request) -> GoalResponse:
            if not self._accepting_goals():
                self.get_logger().warning("FollowPath goal rejected: the node is not active")
                return GoalResponse.REJECT
            return GoalResponse.ACCEPT

        return ActionServer(
            self,
            FollowPath,
            FOLLOW_PATH_ACTION,
            execute_callback=self._execute_follow_path,
            goal_callback=accept,
            handle_accepted_callback=self._follow_path_accepted,
            cancel_callback=lambda handle: CancelResponse.ACCEPT,
        )

    def _follow_path_accepted(self, handle) -> None:
        # Nav2's preemption: the running goal is aborted, the new one taken over without a stop (`follow_path.py`)
        self._end_following(Outcome("aborted", follow_path.NONE, "preempted by a new FollowPath goal"))
        handle.execute()

    async def _execute_follow_path(self, handle):
        result = self._follow_path_type.Result()
        try:
            path = self.adapter.follow_path(handle.request.path, self._now())
        except MnemoError as exc:
            self.get_logger().warning(f"FollowPath goal aborted: invalid path: {exc}")
            return self._finish(handle, result, Outcome("aborted", follow_path.INVALID_PATH, f"invalid path: {exc}"))
        following = _Following(handle, PathFollowing(path, self.params.failure_tolerance), Future())
        self._following = following
        outcome = await following.done
        if self._following is following:
            self._following = None
        return self._finish(handle, result, outcome)

    def _finish(self, handle, result, outcome: Outcome):
        result.error_code = outcome.error_code
        if hasattr(result, "error_msg"):  # Jazzy's FollowPath has it; older definitions do not
            result.error_msg = outcome.message
        {"succeeded": handle.succeed, "canceled": handle.canceled}.get(outcome.state, handle.abort)()
        return result

    def _end_following(self, outcome: Outcome) -> None:
        following, self._following = self._following, None
        if following is not None and not following.done.done():
            if outcome.state == "aborted":
                # a preemption is routine (bt_navigator re-sends its path about once a second): INFO, not WARNING
                log = self.get_logger().info if outcome.error_code == follow_path.NONE else self.get_logger().warning
                log(f"FollowPath goal aborted: {outcome.message}")
            following.done.set_result(outcome)

    def _follow_tick(self, result, now: float) -> None:
        following, adapter = self._following, self.adapter
        if following.canceling:  # (the cancel was taken before the tick: `_tick`)
            if adapter.at_rest:
                self._end_following(Outcome("canceled"))
            return
        outcome = following.task.update(result.status, result.reason, adapter.at_rest, now)
        if outcome is not None:
            if outcome.state == "aborted":
                adapter.stop(outcome.message)
            self._end_following(outcome)
            return
        state, path = adapter.state, adapter.expressed_path()
        if path is not None:  # in frame_id, as the pose: the goal's path may have come in map
            following.task.path = path
        if state is not None:
            feedback = self._follow_path_type.Feedback()
            feedback.distance_to_goal, feedback.speed = following.task.feedback(*state)
            following.handle.publish_feedback(feedback)

    def _publish_tick(self, result, now: float) -> None:
        if result.cmd_vel is not None:
            self.cmd_pub.publish(result.cmd_vel)
        if result.local_plan is not None:
            self.plan_pub.publish(result.local_plan)
        if self.marker_pub is not None:
            self._publish_markers(now)
        if self.planner_marker_pub is not None:
            self._publish_planner_markers(result, now)
        change = self.adapter.status_change(result)
        if change is not None:  # a normal status (planned, rotating_to_path...) at DEBUG; see adapter.STATUS_LEVELS
            level, text = change
            logger = self.get_logger()
            (logger.debug if level <= logging.DEBUG else logger.warning)(text)

    def _publish_markers(self, now_s: float) -> None:
        """The last tick's tracks as markers, stamped with the tick's time in the grid's frame, at most
        `MARKER_RATE_HZ`; built only for a listener, and once more after the last track ended (its DELETEALL clears
        them)."""
        tracks = self.adapter.stats.tracks
        if not (tracks or self._markers_shown) or self.marker_pub.get_subscription_count() == 0:
            return
        if tracks and not _marker_due(self._markers_s, now_s):
            return
        msg = track_markers(self.marker_types, tracks, self.adapter.stats.predicted, now_s, self.params.frame_id)
        self.marker_pub.publish(msg)
        self._markers_shown, self._markers_s = bool(tracks), now_s

    def _publish_planner_markers(self, result, now_s: float) -> None:
        """The footprint, discs and the tick's plan (`markers.planner_markers`) at most `MARKER_RATE_HZ`, built only
        for a listener; a tick without a plan draws the robot alone (the array's DELETEALL clears the old plan)."""
        if self.planner_marker_pub.get_subscription_count() == 0:
            return
        if not _marker_due(self._planner_markers_s, now_s):
            return
        state = self.adapter.state
        out = result.output
        plan = out.plan.states if out is not None and out.plan is not None and out.plan.success else None
        msg = planner_markers(
            self.marker_types,
            None if state is None else state[0],
            plan,
            self.adapter.controller.robot,
            now_s,
            self.params.frame_id,
        )
        self.planner_marker_pub.publish(msg)
        self._planner_markers_s = now_s

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


class NavNode(PlannerInterface, Node):
    """The planner, configured and running from the start (`nav_node`)."""

    def __init__(self) -> None:
        Node.__init__(self, NODE_NAME)
        forward_library_logs(self.get_logger())
        self._configure_planner()
        self._start_control()


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
        # not `if ok(): shutdown()`: a SIGINT between the two shut the context down first (a lifecycle test's crash)
        rclpy.try_shutdown()
    return code


def main(argv: list[str] | None = None) -> int:
    return run_node(NODE_NAME, NavNode, argv)


if __name__ == "__main__":
    sys.exit(main())
