"""The node under real rclpy (ROS 2 Jazzy wheels, Fast DDS), as a separate process: grid, odometry and a goal in,
finite, bounded commands out, with the shipped warm-start model in hybrid mode.

Isolated from other DDS traffic: a random ROS_DOMAIN_ID, discovery limited to localhost, logs in a temporary folder.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import time

import pytest

rclpy = pytest.importorskip("rclpy", reason="ROS 2 Jazzy rclpy wheels: pip install 'ros-jazzy-rclpy[fastrtps]'")


@pytest.fixture
def ros_env(tmp_path, monkeypatch):
    env = {
        "ROS_DOMAIN_ID": str(random.randint(1, 200)),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_LOG_DIR": str(tmp_path / "ros_log"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return dict(os.environ)


def test_the_node_drives_towards_the_goal_with_the_learned_warm_start(ros_env, tmp_path):
    from geometry_msgs.msg import PoseStamped, Twist
    from nav_msgs.msg import OccupancyGrid, Odometry

    from mnemo_mpc.planning.robot import RobotModel

    log = (tmp_path / "node.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mnemo_mpc.ros.node", "--ros-args", "-p", "warm_start:=hybrid"],
        env=ros_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    rclpy.init()
    node = rclpy.create_node("mnemo_mpc_live_test")
    try:
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

        latched = QoSProfile(
            depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE
        )
        grid_pub = node.create_publisher(OccupancyGrid, "local_costmap/costmap", 1)
        odom_pub = node.create_publisher(Odometry, "odom", 10)
        goal_pub = node.create_publisher(PoseStamped, "goal_pose", latched)
        commands: list[tuple[float, float]] = []
        node.create_subscription(Twist, "cmd_vel", lambda m: commands.append((m.linear.x, m.angular.z)), 10)

        grid = OccupancyGrid()
        grid.header.frame_id = "odom"
        grid.info.resolution = 0.05
        grid.info.width = grid.info.height = 80  # 4 m x 4 m of free space around the robot
        grid.info.origin.position.x = grid.info.origin.position.y = -2.0
        grid.info.origin.orientation.w = 1.0
        grid.data = [0] * (80 * 80)
        goal = PoseStamped()
        goal.header.frame_id = "odom"
        goal.pose.position.x = 1.5
        goal.pose.orientation.w = 1.0
        odom = Odometry()
        odom.header.frame_id = "odom"
        odom.pose.pose.orientation.w = 1.0

        deadline = time.monotonic() + 60.0  # the first solve compiles the NLP for this grid shape (or loads it)
        moving = []
        while time.monotonic() < deadline and len(moving) < 5:
            now = node.get_clock().now().to_msg()
            grid.header.stamp = odom.header.stamp = goal.header.stamp = now
            grid_pub.publish(grid)
            odom_pub.publish(odom)
            if goal_pub.get_subscription_count() > 0:
                goal_pub.publish(goal)
            rclpy.spin_once(node, timeout_sec=0.1)
            moving = [c for c in commands if c[0] > 0.01]
            assert proc.poll() is None, "the node exited"
    finally:
        node.destroy_node()
        rclpy.shutdown()
        proc.terminate()
        proc.wait(timeout=20)
    log.seek(0)
    text = log.read()
    assert len(moving) >= 5, f"no forward commands in 60 s; node log:\n{text[-3000:]}"
    robot = RobotModel()
    for v, w in commands:
        assert math.isfinite(v) and math.isfinite(w)
        assert robot.v_min - 1e-9 <= v <= robot.v_max + 1e-9 and abs(w) <= robot.w_max + 1e-9
    assert "warm start hybrid with " in text and "mnemo_vit_favor_plus_n30.onnx on CPUExecutionProvider" in text
    assert "Traceback" not in text
