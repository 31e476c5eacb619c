"""Message conversions against real ROS2 message definitions and CDR (rosbags), without rclpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.ros import convert

rosbags_typesys = pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")


@pytest.fixture(scope="module", params=["ROS2_HUMBLE", "ROS2_JAZZY"])
def env(request):
    store = rosbags_typesys.get_typestore(getattr(rosbags_typesys.Stores, request.param))
    return store, convert.MessageTypes.from_rosbags(request.param)


def cdr_roundtrip(store, msg):
    """Serialise to CDR as a ROS2 publisher would and read it back."""
    raw = store.serialize_cdr(msg, msg.__msgtype__)
    return store.deserialize_cdr(bytes(raw), msg.__msgtype__)


def test_grid_roundtrip_through_cdr(env):
    store, types = env
    rng = np.random.default_rng(0)
    data = rng.choice(np.array([-1, 0, 30, 100], dtype=np.int8), size=(7, 11))
    grid = OccupancyGrid(data, 0.05, (-1.0, 2.5, 0.4))
    msg = cdr_roundtrip(store, convert.make_grid_msg(types, grid, 12.25, "odom"))
    back = convert.grid_from_msg(msg)
    np.testing.assert_array_equal(back.data, grid.data)
    assert back.resolution == pytest.approx(0.05)
    np.testing.assert_allclose(back.origin, grid.origin, atol=1e-12)
    assert msg.header.frame_id == "odom" and msg.header.stamp.sec == 12 and msg.header.stamp.nanosec == 250_000_000


def test_grid_msg_read_as_a_nav2_costmap(env):
    """costmap_semantics (issue 29): the same message read as a Nav2 costmap -- inflation 1..98 and inscribed 99 free
    with a soft cost, lethal 100 an obstacle -- or, by default, as occupancy (50 unknown)."""
    store, types = env
    grid = OccupancyGrid(np.array([[100, 99, 50, 0, -1]], np.int8), 0.05)
    msg = cdr_roundtrip(store, convert.make_grid_msg(types, grid, 0.0, "odom"))
    nav2 = convert.grid_from_msg(msg, "nav2_costmap")
    assert nav2.semantics == "nav2_costmap"
    np.testing.assert_array_equal(nav2.free_mask()[0], [False, True, True, True, False])
    np.testing.assert_array_equal(nav2.occupied_mask()[0], [True, False, False, False, False])
    assert convert.grid_from_msg(msg).unknown_mask()[0, 2]
    with pytest.raises(InputError, match="costmap_semantics: expected one of"):
        convert.grid_from_msg(msg, "nav2")


def test_grid_msg_with_wrong_length_is_rejected(env):
    store, types = env
    grid = OccupancyGrid(np.zeros((4, 5), np.int8), 0.1)
    msg = convert.make_grid_msg(types, grid, 0.0, "map")
    msg.info.width = 6
    with pytest.raises(InputError, match="width\\*height"):
        convert.grid_from_msg(msg)


def test_odometry_and_goal(env):
    store, types = env
    t = store.types
    odom = t["nav_msgs/msg/Odometry"](
        header=convert.make_header(types, 1.0, "odom"),
        child_frame_id="base_link",
        pose=t["geometry_msgs/msg/PoseWithCovariance"](
            pose=convert.make_pose(types, 1.0, -2.0, 2.5), covariance=np.zeros(36)
        ),
        twist=t["geometry_msgs/msg/TwistWithCovariance"](
            twist=convert.make_twist(types, 0.3, -0.2), covariance=np.zeros(36)
        ),
    )
    pose, vel = convert.state_from_odometry(cdr_roundtrip(store, odom))
    np.testing.assert_allclose(pose, [1.0, -2.0, 2.5], atol=1e-12)
    np.testing.assert_allclose(vel, [0.3, -0.2])
    goal = types.PoseStamped(header=convert.make_header(types, 0.0, "odom"), pose=convert.make_pose(types, 3, 4, -3.0))
    np.testing.assert_allclose(convert.goal_from_pose_stamped(cdr_roundtrip(store, goal)), [3, 4, -3.0], atol=1e-12)


def test_path_and_twist_stamped_serialise(env):
    store, types = env
    states = np.array([[0, 0, 0], [0.1, 0.0, 0.1], [0.2, 0.02, 0.2]])
    path = cdr_roundtrip(store, convert.make_path(types, states, 5.0, "odom"))
    np.testing.assert_allclose(convert.path_from_msg(path), states[:, :2])
    cmd = cdr_roundtrip(store, convert.make_twist_stamped(types, 0.5, 0.1, 5.0, "base_link"))
    assert cmd.twist.linear.x == 0.5 and cmd.twist.angular.z == 0.1


@pytest.mark.parametrize("v,w", [(math.nan, 0.0), (0.0, math.inf)])
def test_never_builds_a_non_finite_command(env, v, w):
    _, types = env
    with pytest.raises(InputError, match="non-finite"):
        convert.make_twist(types, v, w)


def test_bad_orientation_and_pose(env):
    _, types = env
    pose = convert.make_pose(types, 0.0, 0.0, 0.0)
    pose.orientation.w = 0.0
    with pytest.raises(InputError, match="quaternion"):
        convert.goal_from_pose_stamped(types.PoseStamped(header=convert.make_header(types, 0, "odom"), pose=pose))
    pose = convert.make_pose(types, math.nan, 0.0, 0.0)
    with pytest.raises(InputError, match="finite pose"):
        convert.goal_from_pose_stamped(types.PoseStamped(header=convert.make_header(types, 0, "odom"), pose=pose))


def test_yaw_quaternion_inverse():
    for yaw in np.linspace(-math.pi + 1e-6, math.pi - 1e-6, 13):
        q = convert.quaternion_from_yaw(yaw)

        class Q:
            x, y, z, w = q

        assert convert.yaw_from_quaternion(Q) == pytest.approx(yaw, abs=1e-12)


def test_stamps_just_below_a_second_round_up_not_back(env):
    _, types = env
    # Defect: 2.9999999999999996 s became sec=2, nanosec=0 (the rounded nanoseconds wrapped), a stamp 1 s in the past.
    stamp = convert.make_header(types, 2.9999999999999996, "odom").stamp
    assert (stamp.sec, stamp.nanosec) == (3, 0)
    assert convert.stamp_seconds(convert.make_header(types, 12.25, "odom").stamp) == 12.25
