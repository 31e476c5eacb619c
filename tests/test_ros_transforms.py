"""The planar transform buffer (mnemo_mpc.ros.transforms, issue 29): interpolation, chains through the tree, the
tolerance past the data, refused edges and values, bounded memory, time going backwards; TFMessages with the real
ROS2 definitions (rosbags), without rclpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.ros.transforms import Transform2D, TransformBuffer, TransformError

rosbags_typesys = pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")


def matrix(x: float, y: float, yaw: float) -> np.ndarray:
    """The homogeneous 3x3 matrix of a planar pose: an independent reference for the buffer's compositions."""
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s, x], [s, c, y], [0.0, 0.0, 1.0]])


def pose_of(m: np.ndarray) -> np.ndarray:
    return np.array([m[0, 2], m[1, 2], math.atan2(m[1, 0], m[0, 0])])


def as_array(t: Transform2D) -> np.ndarray:
    return np.array([t.x, t.y, t.yaw])


def robot_tree() -> TransformBuffer:
    """map -> odom static (1, 2, pi/2); odom -> base_link at t = 0 and 1 s; base_link -> laser static (0.2, 0, pi)."""
    buf = TransformBuffer()
    buf.add("map", "odom", None, 1.0, 2.0, math.pi / 2, static=True)
    buf.add("odom", "base_link", 0.0, 1.0, 0.0, 0.0)
    buf.add("odom", "base_link", 1.0, 2.0, 0.0, 0.4)
    buf.add("base_link", "laser", None, 0.2, 0.0, math.pi, static=True)
    return buf


# --- interpolation and chains ----------------------------------------------------------------------------------------
def test_interpolates_linearly_in_x_y_and_the_short_way_round_in_yaw():
    buf = TransformBuffer()
    buf.add("odom", "base_link", 10.0, 0.0, 0.0, 0.1)
    buf.add("odom", "base_link", 11.0, 2.0, 4.0, 0.9)
    np.testing.assert_allclose(as_array(buf.lookup("odom", "base_link", 10.25)), [0.5, 1.0, 0.3], atol=1e-12)
    np.testing.assert_allclose(as_array(buf.lookup("odom", "base_link", 10.0)), [0.0, 0.0, 0.1], atol=1e-12)
    np.testing.assert_allclose(as_array(buf.lookup("odom", "base_link", 11.0)), [2.0, 4.0, 0.9], atol=1e-12)
    # Across +-pi: from 3.0 to -3.0 rad is 0.28 rad counter-clockwise, so half way is pi, not 0.
    buf.add("odom", "base_link", 12.0, 2.0, 4.0, 3.0)
    buf.add("odom", "base_link", 13.0, 2.0, 4.0, -3.0)
    yaw = buf.lookup("odom", "base_link", 12.5).yaw
    assert abs(math.remainder(yaw - math.pi, 2 * math.pi)) < 1e-12
    yaw = buf.lookup("odom", "base_link", 12.25).yaw
    assert yaw == pytest.approx(3.0 + 0.25 * (2 * math.pi - 6.0))


def test_chain_map_odom_base_link_with_a_static_offset():
    buf = robot_tree()
    # map <- base_link at 0.5 s: odom's pose in map composed with base_link's (1.5, 0, 0.2) in odom.
    t = buf.lookup("map", "base_link", 0.5)
    np.testing.assert_allclose(as_array(t), [1.0, 3.5, math.pi / 2 + 0.2], atol=1e-12)
    assert t.stamp_s == 0.5
    # the other way round is the inverse
    back = buf.lookup("base_link", "map", 0.5)
    np.testing.assert_allclose(as_array(back.compose(t)), [0.0, 0.0, 0.0], atol=1e-12)
    # siblings through their common ancestor: laser in odom, odom in laser, against 3x3 matrices
    expected = matrix(1.5, 0.0, 0.2) @ matrix(0.2, 0.0, math.pi)
    np.testing.assert_allclose(as_array(buf.lookup("odom", "laser", 0.5)), pose_of(expected), atol=1e-12)
    np.testing.assert_allclose(
        as_array(buf.lookup("laser", "map", 0.5)),
        pose_of(np.linalg.inv(matrix(1.0, 2.0, math.pi / 2) @ expected)),
        atol=1e-12,
    )
    # a frame in itself is the identity, at any time
    assert as_array(buf.lookup("odom", "odom", 123.0)).tolist() == [0.0, 0.0, 0.0]


def test_random_trees_agree_with_matrix_products():
    rng = np.random.default_rng(3)
    for _ in range(20):
        buf, in_root = TransformBuffer(), [np.eye(3)]  # frame k's pose in f0, as a matrix product
        for k in range(1, 8):  # frame k hangs under a random earlier frame
            p = int(rng.integers(0, k))
            pose = (float(rng.uniform(-5, 5)), float(rng.uniform(-5, 5)), float(rng.uniform(-math.pi, math.pi)))
            buf.add(f"f{p}", f"f{k}", None, *pose, static=True)
            in_root.append(in_root[p] @ matrix(*pose))
        a, b = (int(v) for v in rng.integers(0, 8, size=2))
        got = buf.lookup(f"f{a}", f"f{b}")
        want = pose_of(np.linalg.inv(in_root[a]) @ in_root[b])
        np.testing.assert_allclose(as_array(got)[:2], want[:2], atol=1e-9)
        assert abs(math.remainder(got.yaw - want[2], 2 * math.pi)) < 1e-9
        assert got.stamp_s is None  # all static: valid at any time


def test_poses_and_paths_between_frames():
    buf = robot_tree()
    # A goal 1 m ahead of odom's origin along map's x: map's x is odom's -y (odom is turned by pi/2 in map).
    goal_in_odom = buf.transform_pose([2.0, 2.0, 0.0], "odom", "map")
    np.testing.assert_allclose(goal_in_odom, [0.0, -1.0, -math.pi / 2], atol=1e-12)
    path = np.array([[1.0, 2.0], [2.0, 2.0], [2.0, 3.0]])
    np.testing.assert_allclose(
        buf.transform_path(path, "odom", "map"), [[0.0, 0.0], [0.0, -1.0], [1.0, -1.0]], atol=1e-12
    )
    poses = np.array([[1.0, 2.0, 3.0], [2.0, 2.0, 0.0]])
    out = buf.transform_path(poses, "odom", "map")
    assert out.shape == (2, 3) and np.all(np.abs(out[:, 2]) <= math.pi)
    np.testing.assert_allclose(out[1], goal_in_odom, atol=1e-12)
    round_trip = buf.transform_path(out, "map", "odom")
    np.testing.assert_allclose(round_trip[:, :2], poses[:, :2], atol=1e-12)
    with pytest.raises(InputError, match=r"\(N, 2\) or \(N, 3\)"):
        buf.transform_path(np.zeros((3, 4)), "odom", "map")


def test_latest_is_the_newest_time_every_edge_of_the_chain_has():
    buf = robot_tree()
    buf.add("map", "marker", 0.0, 0.0, 0.0, 0.0)
    buf.add("map", "marker", 0.6, 6.0, 0.0, 0.0)  # newest 0.6 s; base_link's newest is 1.0 s
    assert buf.lookup("map", "base_link").stamp_s == 1.0
    assert buf.lookup("map", "base_link", 0).stamp_s == 1.0  # tf2's Time(0)
    t = buf.lookup("marker", "base_link")
    assert t.stamp_s == 0.6  # the older of the two newest samples
    np.testing.assert_allclose(as_array(buf.lookup("map", "marker")), [6.0, 0.0, 0.0])
    assert buf.lookup("map", "laser", None).stamp_s == 1.0
    assert buf.lookup("odom", "map").stamp_s is None  # static only


# --- tolerance ------------------------------------------------------------------------------------------------------
def test_within_the_tolerance_the_nearest_sample_is_held_beyond_it_an_error_names_the_edge():
    buf = robot_tree()
    held = buf.lookup("map", "base_link", 1.08, tolerance_s=0.1)
    np.testing.assert_allclose(as_array(held), as_array(buf.lookup("map", "base_link", 1.0)))
    assert held.stamp_s == 1.08
    with pytest.raises(TransformError, match=r"edge odom -> base_link .* 0\.2 s after its newest sample.* 0\.1 s"):
        buf.lookup("map", "base_link", 1.2, tolerance_s=0.1)
    with pytest.raises(TransformError, match=r"0\.3 s before its oldest sample"):
        buf.lookup("laser", "map", -0.3, tolerance_s=0.1)
    np.testing.assert_allclose(as_array(buf.lookup("odom", "base_link", -0.05, 0.1)), [1.0, 0.0, 0.0])
    with pytest.raises(TransformError, match="after its newest"):  # no tolerance: exactly the data's span
        buf.lookup("map", "base_link", 1.0 + 1e-6)
    # edges with no common time: the latest of one is before the oldest of the other
    buf.add("map", "marker", 5.0, 0.0, 0.0, 0.0)
    buf.add("map", "marker", 6.0, 0.0, 0.0, 0.0)
    with pytest.raises(TransformError, match="edge map -> marker .* before its oldest"):
        buf.lookup("marker", "base_link")
    assert buf.lookup("marker", "base_link", tolerance_s=4.0).stamp_s == 1.0


def test_unknown_and_unconnected_frames_and_bad_arguments():
    buf = robot_tree()
    buf.add("world", "other", None, 0.0, 0.0, 0.0, static=True)
    with pytest.raises(TransformError, match="frame 'nowhere' is unknown"):
        buf.lookup("map", "nowhere")
    with pytest.raises(TransformError, match="not connected.*'world'.*'map'"):
        buf.lookup("other", "base_link")
    with pytest.raises(InputError, match="time_s"):
        buf.lookup("map", "odom", float("nan"))
    with pytest.raises(InputError, match="tolerance_s"):
        buf.lookup("map", "odom", 1.0, -0.1)


# --- refused edges and values ---------------------------------------------------------------------------------------
def test_cycles_two_parents_and_mixed_static_edges_are_refused():
    buf = robot_tree()
    with pytest.raises(InputError, match="would close a cycle"):
        buf.add("laser", "map", 0.0, 0.0, 0.0, 0.0)
    buf.add("a", "b", None, 0.0, 0.0, 0.0, static=True)
    with pytest.raises(InputError, match="would close a cycle"):
        buf.add("b", "a", None, 0.0, 0.0, 0.0, static=True)
    with pytest.raises(InputError, match="'base_link' already has parent 'odom'"):
        buf.add("map", "base_link", 2.0, 0.0, 0.0, 0.0)
    with pytest.raises(InputError, match="its own parent"):
        buf.add("odom", "odom", 2.0, 0.0, 0.0, 0.0)
    with pytest.raises(InputError, match="edge map -> odom is static"):
        buf.add("map", "odom", 2.0, 0.0, 0.0, 0.0)
    with pytest.raises(InputError, match="edge odom -> base_link is dynamic"):
        buf.add("odom", "base_link", None, 0.0, 0.0, 0.0, static=True)
    for bad in ("", "/map", 3, "x" * 300):
        with pytest.raises(InputError, match="frame"):
            buf.add(bad, "new", 0.0, 0.0, 0.0, 0.0)
    # nothing refused was kept: the tree and its answers are unchanged
    assert buf.frames() == {"map", "odom", "base_link", "laser", "a", "b"}
    np.testing.assert_allclose(as_array(buf.lookup("map", "base_link", 0.5)), [1.0, 3.5, math.pi / 2 + 0.2])
    # a static edge re-sent replaces its value (a re-published /tf_static)
    buf.add("map", "odom", None, 0.0, 0.0, 0.0, static=True)
    np.testing.assert_allclose(as_array(buf.lookup("map", "odom")), [0.0, 0.0, 0.0])


@pytest.mark.parametrize(
    "x, y, yaw, stamp, match",
    [
        (float("nan"), 0.0, 0.0, 1.0, "finite"),
        (0.0, float("inf"), 0.0, 1.0, "finite"),
        (0.0, 0.0, float("nan"), 1.0, "finite"),
        (1e9, 0.0, 0.0, 1.0, "1e\\+06 m"),
        (0.0, -1e9, 0.0, 1.0, "1e\\+06 m"),
        (0.0, 0.0, 0.0, float("nan"), "stamp"),
        (0.0, 0.0, 0.0, None, "stamp"),
    ],
)
def test_non_finite_and_absurd_values_are_refused(x, y, yaw, stamp, match):
    buf = TransformBuffer()
    with pytest.raises(InputError, match=match):
        buf.add("odom", "base_link", stamp, x, y, yaw)
    assert buf.frames() == set() and buf.edges() == []


# --- messages -------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["ROS2_HUMBLE", "ROS2_JAZZY"])
def tf_types(request):
    return rosbags_typesys.get_typestore(getattr(rosbags_typesys.Stores, request.param)).types


def transform_stamped(t, parent, child, stamp_s, x, y, yaw, z=0.0, q=None):
    sec, nanosec = divmod(int(round(stamp_s * 1e9)), 1_000_000_000)
    qx, qy, qz, qw = q if q is not None else (0.0, 0.0, math.sin(yaw / 2), math.cos(yaw / 2))
    return t["geometry_msgs/msg/TransformStamped"](
        header=t["std_msgs/msg/Header"](
            stamp=t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=parent
        ),
        child_frame_id=child,
        transform=t["geometry_msgs/msg/Transform"](
            translation=t["geometry_msgs/msg/Vector3"](x=x, y=y, z=z),
            rotation=t["geometry_msgs/msg/Quaternion"](x=qx, y=qy, z=qz, w=qw),
        ),
    )


def test_tf_messages_add_the_valid_transforms_and_return_a_reason_for_each_refused_one(tf_types):
    t, buf = tf_types, TransformBuffer()
    static = t["tf2_msgs/msg/TFMessage"](transforms=[transform_stamped(t, "map", "odom", 0.0, 1.0, 2.0, math.pi / 2)])
    assert buf.add_message(static, static=True) == []  # stamp 0 is fine on /tf_static
    msg = t["tf2_msgs/msg/TFMessage"](
        transforms=[
            transform_stamped(t, "odom", "base_link", 100.0, 1.0, 0.0, 0.0, z=0.3),  # z is dropped
            transform_stamped(t, "odom", "bad_nan", 100.0, float("nan"), 0.0, 0.0),
            transform_stamped(t, "odom", "bad_far", 100.0, 2e6, 0.0, 0.0),
            transform_stamped(t, "odom", "bad_quat", 100.0, 0.0, 0.0, 0.0, q=(0.0, 0.0, 0.0, 0.0)),
            transform_stamped(t, "odom", "bad_z", 100.0, 0.0, 0.0, 0.0, z=float("inf")),
            transform_stamped(t, "odom", "bad_stamp", 0.0, 0.0, 0.0, 0.0),
            transform_stamped(t, "base_link", "odom", 100.0, 0.0, 0.0, 0.0),  # a second parent
            transform_stamped(t, "odom", "base_link", 100.5, 2.0, 0.0, 0.5),
        ]
    )
    reasons = buf.add_message(msg, static=False)
    assert len(reasons) == 6
    for frame, why in zip(
        ("bad_nan", "bad_far", "bad_quat", "bad_z", "bad_stamp", "'odom'"),
        ("finite", "1e+06 m", "quaternion", "translation.z", "header.stamp", "already has parent 'map'"),
        strict=True,
    ):
        assert any(frame in r and why in r for r in reasons), (frame, why, reasons)
    assert buf.frames() == {"map", "odom", "base_link"}
    np.testing.assert_allclose(as_array(buf.lookup("map", "base_link", 100.25)), [1.0, 3.5, math.pi / 2 + 0.25])
    # A message that is not a TFMessage, and a transform missing its fields, are reasons too, never exceptions.
    assert "TFMessage.transforms" in buf.add_message(object())[0]
    assert "AttributeError" in buf.add_message(t["tf2_msgs/msg/TFMessage"](transforms=[object()]))[0]
    # A 3-D rotation keeps its yaw about z: roll pi/2 about x then yaw 0.3 about z
    q_yaw = (0.0, 0.0, math.sin(0.15), math.cos(0.15))
    q_roll = (math.sin(math.pi / 4), 0.0, 0.0, math.cos(math.pi / 4))
    w1, x1, y1, z1 = q_yaw[3], *q_yaw[:3]
    w2, x2, y2, z2 = q_roll[3], *q_roll[:3]
    q = (
        w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
        w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
        w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
    )
    tilted = t["tf2_msgs/msg/TFMessage"](transforms=[transform_stamped(t, "base_link", "cam", 0.0, 0.1, 0.0, 0, q=q)])
    assert buf.add_message(tilted, static=True) == []
    assert buf.lookup("base_link", "cam").yaw == pytest.approx(0.3)


# --- memory and time ------------------------------------------------------------------------------------------------
def test_memory_stays_bounded_over_a_million_adds():
    # 1024 Hz (exact binary stamps) for ~490 s on each of two buffers: the cache bounds one, max_samples the other.
    by_cache = TransformBuffer(cache_s=2.0)
    by_count = TransformBuffer(cache_s=1000.0, max_samples=3000)
    n = 500_000
    for i in range(n):
        by_cache.add("odom", "base_link", i / 1024, i * 1e-4, 0.0, 0.0)
        by_count.add("odom", "base_link", i / 1024, i * 1e-4, 0.0, 0.0)
    (a,), (b,) = by_cache.edges(), by_count.edges()
    newest = (n - 1) / 1024
    assert a.newest_s == b.newest_s == newest
    assert a.oldest_s == newest - 2.0 and a.samples == 2049  # cache_s of history, both ends included
    assert b.samples == 3000 and b.oldest_s == (n - 3000) / 1024
    assert a.stored <= 2 * 2049 + 65 and b.stored <= 2 * 3000 + 65
    np.testing.assert_allclose(as_array(by_cache.lookup("odom", "base_link", newest - 1.0)), [(n - 1025) * 1e-4, 0, 0])
    with pytest.raises(TransformError, match="before its oldest"):
        by_count.lookup("odom", "base_link", newest - 10.0)


def test_frames_are_bounded():
    buf = TransformBuffer(max_frames=10)
    for k in range(9):
        buf.add("root", f"f{k}", None, 0.0, 0.0, 0.0, static=True)
    with pytest.raises(InputError, match="max_frames = 10"):
        buf.add("root", "f9", None, 0.0, 0.0, 0.0, static=True)
    assert len(buf.frames()) == 10


def test_time_going_backwards():
    buf = TransformBuffer(cache_s=10.0)
    buf.add("odom", "base_link", 20.0, 2.0, 0.0, 0.0)
    buf.add("odom", "base_link", 14.0, 0.0, 0.0, 0.0)  # late, within the cache: kept in order
    assert buf.lookup("odom", "base_link", 17.0).x == pytest.approx(1.0)
    assert buf.edges()[0].oldest_s == 14.0
    with pytest.raises(InputError, match="already held"):  # a repeated stamp is ignored (tf2's TF_REPEATED_DATA)
        buf.add("odom", "base_link", 14.0, 5.0, 0.0, 0.0)
    assert buf.lookup("odom", "base_link", 14.0).x == 0.0
    # a simulator restart: stamps from 0 again are older than the cache and refused, so a stale pose is never mixed
    with pytest.raises(InputError, match="older than its newest sample, beyond cache_s = 10 s.*clear"):
        buf.add("odom", "base_link", 0.5, 0.0, 0.0, 0.0)
    with pytest.raises(TransformError, match="before its oldest"):  # a clock gone back asks before the data
        buf.lookup("odom", "base_link", 0.5, tolerance_s=0.2)
    buf.clear()  # what the node does when its clock jumps back
    assert buf.frames() == set()
    buf.add("odom", "base_link", 0.5, 3.0, 0.0, 0.0)
    assert buf.lookup("odom", "base_link").x == 3.0


def test_buffer_settings_are_validated():
    for kwargs, field in (
        ({"cache_s": 0.0}, "cache_s"),
        ({"cache_s": float("inf")}, "cache_s"),
        ({"max_samples": 1}, "max_samples"),
        ({"max_frames": True}, "max_frames"),
    ):
        with pytest.raises(InputError, match=f"TransformBuffer.{field}"):
            TransformBuffer(**kwargs)
