"""Message builders for the simulator node: Odometry, LaserScan, Clock, and commands read from Twist / TwistStamped.

Like `mnemo_mpc.ros.convert` (whose header, pose and grid builders these reuse), no rclpy import: messages are built
from a `SimMessageTypes` namespace of classes, rclpy's in the node and a rosbags typestore's in the tests, so the
same code is checked against the real ROS 2 definitions and CDR without a ROS install.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.ros.convert import MessageTypes, make_header, make_pose, make_twist


@dataclass(frozen=True)
class SimMessageTypes:
    """The planner's message classes plus those only the simulator publishes."""

    base: MessageTypes
    Odometry: Any
    PoseWithCovariance: Any
    TwistWithCovariance: Any
    LaserScan: Any
    Clock: Any

    @classmethod
    def from_rosbags(cls, distro: str = "ROS2_HUMBLE") -> SimMessageTypes:
        from rosbags.typesys import Stores, get_typestore

        t = get_typestore(getattr(Stores, distro)).types
        return cls(
            base=MessageTypes.from_rosbags(distro),
            Odometry=t["nav_msgs/msg/Odometry"],
            PoseWithCovariance=t["geometry_msgs/msg/PoseWithCovariance"],
            TwistWithCovariance=t["geometry_msgs/msg/TwistWithCovariance"],
            LaserScan=t["sensor_msgs/msg/LaserScan"],
            Clock=t["rosgraph_msgs/msg/Clock"],
        )


def make_time(types: SimMessageTypes, stamp_s: float) -> Any:
    return make_header(types.base, stamp_s, "").stamp


def make_tf_message(
    tf_message: Any, transform_stamped: Any, transform: Any, types: SimMessageTypes, transforms: Any
) -> Any:
    """tf2_msgs/TFMessage of planar (parent, child, (x, y, yaw), stamp_s) transforms (the classes handed in: tf2_msgs
    is optional, built by `mnemo-mpc ros-interfaces build` where no ROS install has it)."""
    b, out = types.base, []
    for parent, child, (x, y, yaw), stamp_s in transforms:
        pose = make_pose(b, x, y, yaw)
        out.append(
            transform_stamped(
                header=make_header(b, stamp_s, parent),
                child_frame_id=child,
                transform=transform(translation=b.Vector3(x=float(x), y=float(y), z=0.0), rotation=pose.orientation),
            )
        )
    return tf_message(transforms=out)


def make_clock(types: SimMessageTypes, stamp_s: float) -> Any:
    """rosgraph_msgs/Clock: the simulated time every `use_sim_time` node follows."""
    return types.Clock(clock=make_time(types, stamp_s))


def make_odometry(
    types: SimMessageTypes,
    pose: np.ndarray,
    velocity: np.ndarray,
    stamp_s: float,
    frame_id: str,
    child_frame_id: str,
) -> Any:
    """nav_msgs/Odometry: pose (x, y, yaw) in `frame_id`, body velocity (v, w) in `child_frame_id` (REP-105).
    Ground truth, so the covariances are zero."""
    b = types.base
    twist = make_twist(b, float(velocity[0]), float(velocity[1]))
    return types.Odometry(
        header=make_header(b, stamp_s, frame_id),
        child_frame_id=child_frame_id,
        pose=types.PoseWithCovariance(pose=make_pose(b, *pose[:3]), covariance=np.zeros(36)),
        twist=types.TwistWithCovariance(twist=twist, covariance=np.zeros(36)),
    )


def make_laser_scan(
    types: SimMessageTypes,
    angles: np.ndarray,
    ranges: np.ndarray,
    hit: np.ndarray,
    range_min: float,
    range_max: float,
    stamp_s: float,
    frame_id: str,
    scan_time_s: float = 0.0,
) -> Any:
    """sensor_msgs/LaserScan from evenly spaced beam angles (relative to the robot's heading, as `LidarScan`).

    Beams without a return are +inf (REP-117: "no return within range"), not `range_max`; lost beams (NaN ranges,
    `LidarScan.valid` False) are NaN (REP-117: an erroneous reading)."""
    angles = np.asarray(angles, dtype=float)
    if angles.ndim != 1 or angles.size < 2:
        raise InputError(f"LaserScan angles: expected >= 2 evenly spaced beams, got shape {angles.shape}")
    inc = float(angles[1] - angles[0])
    if not np.allclose(np.diff(angles), inc, atol=1e-9):
        raise InputError("LaserScan angles: expected evenly spaced beams")
    ranges = np.asarray(ranges, dtype=float)
    out = np.where(np.asarray(hit, dtype=bool), ranges, np.where(np.isnan(ranges), np.nan, np.inf)).astype(np.float32)
    return types.LaserScan(
        header=make_header(types.base, stamp_s, frame_id),
        angle_min=float(angles[0]),
        angle_max=float(angles[-1]),
        angle_increment=inc,
        time_increment=0.0,
        scan_time=float(scan_time_s),
        range_min=float(range_min),
        range_max=float(range_max),
        ranges=out,
        intensities=np.zeros(0, dtype=np.float32),
    )


def command_from_twist(msg: Any) -> tuple[float, float]:
    """(v, w) from a geometry_msgs/Twist or TwistStamped; the unicycle reads linear.x and angular.z only."""
    twist = msg.twist if hasattr(msg, "twist") else msg
    v, w = float(twist.linear.x), float(twist.angular.z)
    if not (math.isfinite(v) and math.isfinite(w)):
        raise InputError(f"cmd_vel: expected finite linear.x and angular.z, got ({v}, {w})")
    return v, w


def path_states(points: np.ndarray) -> np.ndarray:
    """(K, 2) path points -> (K, 3) poses heading along the path (the last keeps the previous heading)."""
    pts = np.asarray(points, dtype=float).reshape(-1, 2)
    if len(pts) < 2:
        return np.column_stack([pts, np.zeros(len(pts))])
    d = np.diff(pts, axis=0)
    yaw = np.arctan2(d[:, 1], d[:, 0])
    return np.column_stack([pts, np.append(yaw, yaw[-1])])


__all__ = [
    "SimMessageTypes",
    "command_from_twist",
    "make_clock",
    "make_laser_scan",
    "make_odometry",
    "make_time",
    "path_states",
]
