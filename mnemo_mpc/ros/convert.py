"""Conversions between ROS2 messages and the core's plain arrays.

No rclpy import here: functions read messages by field name (rclpy messages and rosbags' message dataclasses have
the same fields), and build messages from a `MessageTypes` namespace of classes, so the same code serves the node
(rclpy classes) and the tests/replay (rosbags classes with real ROS2 definitions and CDR).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.errors import MAX_COORDINATE_M, InputError
from mnemo_mpc.planning.costmap import OCCUPANCY, check_semantics
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.surfaces import MAX_RETURNS


@dataclass(frozen=True)
class MessageTypes:
    """The message classes conversions construct (from rclpy packages or a rosbags typestore)."""

    Time: Any
    Header: Any
    Vector3: Any
    Twist: Any
    TwistStamped: Any
    Point: Any
    Quaternion: Any
    Pose: Any
    PoseStamped: Any
    Path: Any
    MapMetaData: Any
    OccupancyGrid: Any

    @classmethod
    def from_rosbags(cls, distro: str = "ROS2_HUMBLE") -> MessageTypes:
        from rosbags.typesys import Stores, get_typestore

        t = get_typestore(getattr(Stores, distro)).types
        return cls(
            Time=t["builtin_interfaces/msg/Time"],
            Header=t["std_msgs/msg/Header"],
            Vector3=t["geometry_msgs/msg/Vector3"],
            Twist=t["geometry_msgs/msg/Twist"],
            TwistStamped=t["geometry_msgs/msg/TwistStamped"],
            Point=t["geometry_msgs/msg/Point"],
            Quaternion=t["geometry_msgs/msg/Quaternion"],
            Pose=t["geometry_msgs/msg/Pose"],
            PoseStamped=t["geometry_msgs/msg/PoseStamped"],
            Path=t["nav_msgs/msg/Path"],
            MapMetaData=t["nav_msgs/msg/MapMetaData"],
            OccupancyGrid=t["nav_msgs/msg/OccupancyGrid"],
        )


# --- angles ---------------------------------------------------------------------------------------------------------
def yaw_from_quaternion(q: Any) -> float:
    """Yaw (rotation about z) of a geometry_msgs/Quaternion; the planar robot ignores roll and pitch."""
    x, y, z, w = float(q.x), float(q.y), float(q.z), float(q.w)
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    if not math.isfinite(norm) or norm < 1e-9:
        raise InputError(f"orientation: expected a finite non-zero quaternion, got ({x}, {y}, {z}, {w})")
    return math.atan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))


def quaternion_from_yaw(yaw: float) -> tuple[float, float, float, float]:
    return 0.0, 0.0, math.sin(yaw / 2.0), math.cos(yaw / 2.0)


def _pose2d(pose: Any, what: str) -> np.ndarray:
    out = np.array([float(pose.position.x), float(pose.position.y), yaw_from_quaternion(pose.orientation)])
    if not np.all(np.isfinite(out)) or np.any(np.abs(out[:2]) > MAX_COORDINATE_M):
        raise InputError(f"{what}: expected a finite pose within {MAX_COORDINATE_M:g} m, got {out.tolist()}")
    return out


def stamp_seconds(stamp: Any) -> float | None:
    """builtin_interfaces/Time -> seconds; None for an unset stamp (sec = nanosec = 0, what `ros2 topic pub` sends)."""
    sec, nanosec = int(stamp.sec), int(stamp.nanosec)
    if not 0 <= nanosec < 1_000_000_000:
        raise InputError(f"header.stamp.nanosec: expected 0 <= nanosec < 1e9, got {nanosec}")
    return None if sec == 0 and nanosec == 0 else sec + nanosec * 1e-9


# --- messages -> arrays ---------------------------------------------------------------------------------------------
def grid_from_msg(msg: Any, semantics: str = OCCUPANCY) -> OccupancyGrid:
    """nav_msgs/OccupancyGrid -> OccupancyGrid (origin yaw taken from info.origin.orientation) whose values mean what
    `semantics` says (`mnemo_mpc.planning.costmap.SEMANTICS`; the node's `costmap_semantics` parameter): a map_server
    occupancy grid, or a Nav2 costmap (100 lethal, 99 inscribed, 1..98 inflation, 0 free, -1 unknown)."""
    check_semantics(semantics, "costmap_semantics")
    info = msg.info
    origin = _pose2d(info.origin, "OccupancyGrid.info.origin")
    resolution = float(info.resolution)
    if not (1e-4 <= resolution <= 100.0):  # also refuses NaN
        raise InputError(f"OccupancyGrid.info.resolution: expected 1e-4..100 m per cell, got {resolution}")
    data = np.asarray(msg.data, dtype=np.int16)
    return OccupancyGrid.from_msg_arrays(
        int(info.width), int(info.height), resolution, origin, data, semantics=semantics
    )


def state_from_odometry(msg: Any) -> tuple[np.ndarray, np.ndarray]:
    """nav_msgs/Odometry -> pose (x, y, yaw) in header.frame_id and body velocity (v, w) in child_frame_id."""
    pose = _pose2d(msg.pose.pose, "Odometry.pose.pose")
    vel = np.array([float(msg.twist.twist.linear.x), float(msg.twist.twist.angular.z)])
    if not np.all(np.isfinite(vel)):
        raise InputError(f"Odometry.twist.twist: expected finite linear.x and angular.z, got {vel.tolist()}")
    return pose, vel


def returns_from_scan(msg: Any) -> np.ndarray:
    """sensor_msgs/LaserScan -> (K, 2) points of its returns in its own frame: the beams whose range is finite and
    within [range_min, range_max] (REP-117: +inf no return, NaN an erroneous reading)."""
    ranges = np.asarray(msg.ranges, dtype=float).reshape(-1)
    if ranges.size > MAX_RETURNS:
        raise InputError(f"LaserScan ranges: expected at most {MAX_RETURNS} beams, got {ranges.size}")
    start, step = float(msg.angle_min), float(msg.angle_increment)
    lo, hi = float(msg.range_min), float(msg.range_max)
    if not (math.isfinite(start) and math.isfinite(step) and step != 0.0 and abs(step) * ranges.size <= 4 * math.pi):
        raise InputError(
            f"LaserScan angle_min {start}, angle_increment {step}: expected finite, a non-zero increment, and the "
            "beams within two turns"
        )
    if not (math.isfinite(lo) and math.isfinite(hi) and 0.0 <= lo < hi):
        raise InputError(f"LaserScan range_min {lo}, range_max {hi}: expected finite, 0 <= range_min < range_max")
    angles = start + step * np.arange(ranges.size)
    hit = np.isfinite(ranges) & (ranges >= lo) & (ranges <= hi)
    r, a = ranges[hit], angles[hit]
    return np.stack([r * np.cos(a), r * np.sin(a)], axis=-1)


def goal_from_pose_stamped(msg: Any) -> np.ndarray:
    return _pose2d(msg.pose, "PoseStamped.pose")


def path_from_msg(msg: Any) -> np.ndarray:
    """nav_msgs/Path -> (K, 2) positions."""
    pts = np.array([[float(p.pose.position.x), float(p.pose.position.y)] for p in msg.poses], dtype=float)
    pts = pts.reshape(-1, 2)
    if not np.all(np.isfinite(pts)) or np.any(np.abs(pts) > MAX_COORDINATE_M):
        raise InputError(f"Path.poses: expected finite positions within {MAX_COORDINATE_M:g} m")
    return pts


# --- arrays -> messages ---------------------------------------------------------------------------------------------
def make_header(types: MessageTypes, stamp_s: float, frame_id: str) -> Any:
    # Round the whole stamp to nanoseconds first: 2.9999999999999996 s is 3 s, not 2 s + 1e9 ns wrapped to 2 s.
    sec, nanosec = divmod(int(round(stamp_s * 1e9)), 1_000_000_000)
    return types.Header(stamp=types.Time(sec=sec, nanosec=nanosec), frame_id=frame_id)


def make_twist(types: MessageTypes, v: float, w: float) -> Any:
    """geometry_msgs/Twist for a unicycle command. Refuses non-finite values: a controller never publishes NaN."""
    if not (math.isfinite(v) and math.isfinite(w)):
        raise InputError(f"cmd_vel: refusing to build a command with non-finite values (v={v}, w={w})")
    return types.Twist(linear=types.Vector3(x=float(v), y=0.0, z=0.0), angular=types.Vector3(x=0.0, y=0.0, z=float(w)))


def make_twist_stamped(types: MessageTypes, v: float, w: float, stamp_s: float, frame_id: str) -> Any:
    return types.TwistStamped(header=make_header(types, stamp_s, frame_id), twist=make_twist(types, v, w))


def make_pose(types: MessageTypes, x: float, y: float, yaw: float) -> Any:
    qx, qy, qz, qw = quaternion_from_yaw(yaw)
    return types.Pose(
        position=types.Point(x=float(x), y=float(y), z=0.0),
        orientation=types.Quaternion(x=qx, y=qy, z=qz, w=qw),
    )


def make_path(types: MessageTypes, states: np.ndarray, stamp_s: float, frame_id: str) -> Any:
    """nav_msgs/Path of planned states (K, 3) as x, y, yaw."""
    header = make_header(types, stamp_s, frame_id)
    poses = [types.PoseStamped(header=header, pose=make_pose(types, *s[:3])) for s in np.asarray(states, float)]
    return types.Path(header=header, poses=poses)


def make_grid_msg(types: MessageTypes, grid: OccupancyGrid, stamp_s: float, frame_id: str) -> Any:
    header = make_header(types, stamp_s, frame_id)
    info = types.MapMetaData(
        map_load_time=header.stamp,
        resolution=float(grid.resolution),
        width=int(grid.shape[1]),
        height=int(grid.shape[0]),
        origin=make_pose(types, *grid.origin),
    )
    return types.OccupancyGrid(header=header, info=info, data=grid.data.reshape(-1).astype(np.int8))
