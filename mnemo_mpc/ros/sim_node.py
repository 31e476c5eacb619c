"""`ros2 run mnemo_mpc sim_node` / `python -m mnemo_mpc.ros.sim_node`: the PyBullet simulator as a ROS2 node.

Publishes `/clock` (rosgraph_msgs/Clock), `odom` (nav_msgs/Odometry, `odom` -> `base_link`), the lidar-fused local
grid on `local_costmap/costmap` (nav_msgs/OccupancyGrid, the simulator's 120 x 120 rolling window) and `scan`
(sensor_msgs/LaserScan), all stamped with simulated time; once, latched, the world's goal on `goal_pose` and its
global path on `plan`. Holds the last `cmd_vel` (Twist, or TwistStamped with `use_stamped_twist`) until
`cmd_timeout_s`. The world is a generated one (`world_seed`, `world_kind`: the world `mnemo-mpc demo --seed` drives)
or a map_server map (`map_yaml`, `start`, `goal`).

Simulated time: each step advances physics by 1 / `sim_rate_hz` and publishes /clock; steps are paced on the
steady wall clock at `real_time_factor`, so the node never waits on its own /clock. Simulated time is held at 0 until
a `cmd_vel` publisher is matched (the planner is up), so start-up does not count as driving time. The logic lives in
the ROS-free `SimAdapter`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from geometry_msgs.msg import (
    PoseStamped,
    PoseWithCovariance,
    Twist,
    TwistStamped,
    TwistWithCovariance,
)
from nav_msgs.msg import OccupancyGrid, Odometry, Path
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock as ClockMsg
from sensor_msgs.msg import LaserScan

from mnemo_mpc.atomic import atomic_write_json
from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.ros.node import RCLPY_TYPES, read_params, run_node
from mnemo_mpc.ros.ros_logging import forward_library_logs
from mnemo_mpc.ros.sim_adapter import SimAdapter, SimOutputs
from mnemo_mpc.ros.sim_convert import SimMessageTypes, make_tf_message
from mnemo_mpc.ros.sim_params import SIM_NODE_NAME, SimNodeParams

RCLPY_SIM_TYPES = SimMessageTypes(
    base=RCLPY_TYPES,
    Odometry=Odometry,
    PoseWithCovariance=PoseWithCovariance,
    TwistWithCovariance=TwistWithCovariance,
    LaserScan=LaserScan,
    Clock=ClockMsg,
)


class SimNode(Node):
    def __init__(self) -> None:
        super().__init__(SIM_NODE_NAME)
        self._log_handler = forward_library_logs(self.get_logger())
        self.params = p = read_params(self, SimNodeParams, "mnemo_mpc/ros/sim_params.py")
        self.adapter = SimAdapter(p, RCLPY_SIM_TYPES)
        self.exit_code: int | None = None

        latched = QoSProfile(
            depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
        )
        self.clock_pub = self.create_publisher(ClockMsg, "/clock", 10)
        self.odom_pub = self.create_publisher(Odometry, p.odom_topic, 10)
        self.grid_pub = self.create_publisher(OccupancyGrid, p.grid_topic, 1)
        self.scan_pub = self.create_publisher(LaserScan, p.scan_topic, 5)
        self.goal_pub = self.create_publisher(PoseStamped, p.goal_topic, latched) if p.publish_goal else None
        self.path_pub = self.create_publisher(Path, p.path_topic, latched) if p.publish_plan else None
        self.create_subscription(TwistStamped if p.use_stamped_twist else Twist, p.cmd_vel_topic, self._on_cmd, 10)
        self.tf_pub, self._tf_types = None, None
        if p.map_frame_id:  # a localiser's /tf: map -> odom -> base_link
            try:
                from geometry_msgs.msg import Transform, TransformStamped
                from tf2_msgs.msg import TFMessage
            except ImportError as exc:
                raise InputError(
                    f"parameter map_frame_id {p.map_frame_id!r}: /tf needs tf2_msgs ({exc}; `mnemo-mpc "
                    "ros-interfaces build` makes it, see docs/ros.md)"
                ) from None
            self._tf_types = (TFMessage, TransformStamped, Transform)
            self.tf_pub = self.create_publisher(
                TFMessage, "/tf", QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
            )
        self._latched_matched: dict[str, int] = {}  # subscribers matched when last published
        self._started = False
        # Paced on the steady clock: with use_sim_time this node's ROS clock follows the /clock it publishes itself.
        self.create_timer(
            self.adapter.step_s / p.real_time_factor, self._tick, clock=Clock(clock_type=ClockType.STEADY_TIME)
        )
        w = self.adapter.world
        self.get_logger().info(
            f"mnemo_mpc simulator: world {w.name} ({w.grid.size_m[0]:.1f} x {w.grid.size_m[1]:.1f} m"
            + (f", {p.map_yaml}" if p.map_yaml else "")
            + f"), start ({w.start[0]:.2f}, {w.start[1]:.2f}, {w.start[2]:.2f}) -> goal ({w.goal[0]:.2f}, "
            f"{w.goal[1]:.2f}, {w.goal[2]:.2f}); steps of {self.adapter.step_s:.4g} s ({self.adapter.substeps} physics "
            f"substeps) at {p.real_time_factor:g} x real time; "
            f"waiting for a '{p.cmd_vel_topic}' publisher (simulated time held at 0)"
        )

    def _on_cmd(self, msg: Any) -> None:
        try:
            self.adapter.on_cmd_vel(msg)
        except MnemoError as exc:  # a malformed command is reported and dropped; the held one times out
            self.get_logger().warning(f"dropped {type(msg).__name__}: {exc}", throttle_duration_sec=1.0)

    def _publish_latched(self) -> None:
        """Publish goal and path again whenever a new subscriber matched: a volatile subscription (what a planner
        accepting any publisher uses) gets no history, so it must not miss the one message."""
        for key, pub, make in (
            ("goal", self.goal_pub, self.adapter.goal_msg),
            ("path", self.path_pub, self.adapter.path_msg),
        ):
            if pub is None:
                continue
            n = pub.get_subscription_count()
            if key not in self._latched_matched or n > self._latched_matched[key]:
                msg = make()
                if msg is not None:
                    pub.publish(msg)
            self._latched_matched[key] = n

    def _publish(self, out: SimOutputs) -> None:
        self.clock_pub.publish(out.clock)
        if out.frame_changed:  # goal and plan re-expressed in the drifting odom frame after a localiser fix
            for pub, make in ((self.goal_pub, self.adapter.goal_msg), (self.path_pub, self.adapter.path_msg)):
                msg = make() if pub is not None else None
                if msg is not None:
                    pub.publish(msg)
        if self.tf_pub is not None and out.transforms and out.time_s > 0:  # 0 is /tf's "unset" stamp: held time
            self.tf_pub.publish(make_tf_message(*self._tf_types, self.adapter.types, out.transforms))
        self.odom_pub.publish(out.odom)
        self.grid_pub.publish(out.grid)
        self.scan_pub.publish(out.scan)

    def _tick(self) -> None:
        if self.exit_code is not None:
            return
        self._publish_latched()
        if not self._started:
            if self.count_publishers(self.params.cmd_vel_topic) == 0:
                self._publish(self.adapter.observation())  # time held at 0: late joiners still see the robot
                return
            self._started = True
            self.get_logger().info("cmd_vel publisher matched: simulated time starts")
        out = self.adapter.step()
        self._publish(out)
        for line in out.events:
            self.get_logger().info(line)
        if out.exit_code is not None:
            self.exit_code = out.exit_code

    def destroy_node(self) -> None:
        """Write the result file (if asked) and close the simulator, on every way out (`run_node`)."""
        try:
            if self.params.result_file:
                summary = {"summary": self.adapter.summary(), "params": vars(self.params)}
                atomic_write_json(self.params.result_file, summary)
        finally:
            logging.getLogger("mnemo_mpc").removeHandler(self._log_handler)
            self.adapter.close()
            super().destroy_node()


def main(argv: list[str] | None = None) -> int:
    return run_node(SIM_NODE_NAME, SimNode, argv)


if __name__ == "__main__":
    sys.exit(main())
