"""The planner's RViz markers (issue 29): the footprint, the covering discs and the planned horizon as a MarkerArray
(against real ROS 2 message definitions and CDR from rosbags, and rclpy's classes where installed), and the shipped
rviz/mnemo_mpc.rviz naming the topics the node uses."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from mnemo_mpc.planning.footprint import Footprint, to_world
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import NODE_NAME, NavParams
from mnemo_mpc.ros.markers import (
    MARKERS_TOPIC,
    NS_DISCS,
    NS_FOOTPRINT,
    NS_HEADING,
    NS_HORIZON,
    NS_HORIZON_END_DISCS,
    NS_HORIZON_FOOTPRINTS,
    planner_markers,
)
from mnemo_mpc.ros.tracks import MarkerTypes

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")

ROOT = Path(__file__).resolve().parents[1]
# A TurtleBot3-Burger-like base: a rectangle reaching further behind the axle than ahead (several covering discs)
BOX = RobotModel.from_footprint(Footprint.rectangle(0.28, 0.2, x_offset=-0.03))
DISC = RobotModel()  # the default 0.2 m disc: one covering disc
POSE = np.array([1.0, -2.0, 0.7])


def a_plan(knots: int = 21) -> np.ndarray:
    """(knots, 3) x, y, yaw along an arc from POSE."""
    s = np.linspace(0.0, 2.0, knots)
    yaw = POSE[2] + 0.4 * s
    return np.column_stack([POSE[0] + np.cos(yaw) * s, POSE[1] + np.sin(yaw) * s, yaw])


@pytest.fixture(scope="module", params=["ROS2_HUMBLE", "ROS2_JAZZY"])
def marker_env(request):
    return typesys.get_typestore(getattr(typesys.Stores, request.param)), MarkerTypes.from_rosbags(request.param)


def round_trip(store, msg):
    """The message through CDR and back: what a subscriber gets."""
    return store.deserialize_cdr(bytes(store.serialize_cdr(msg, msg.__msgtype__)), msg.__msgtype__)


def by_key(msg) -> dict:
    return {(x.ns, x.id): x for x in msg.markers[1:]}


def xy(marker) -> np.ndarray:
    return np.array([(p.x, p.y) for p in marker.points])


def test_markers_clear_then_draw_the_footprint_discs_and_horizon(marker_env):
    store, types = marker_env
    plan = a_plan()
    msg = round_trip(store, planner_markers(types, POSE, plan, BOX, 12.25, "odom"))
    m = types.Marker
    first, *rest = msg.markers
    assert first.action == m.DELETEALL  # what the last array drew goes first (a dropped plan leaves no line)
    assert all(x.action == m.ADD for x in rest)
    k = len(BOX.discs)
    assert k > 1
    assert set(by_key(msg)) == {
        (NS_FOOTPRINT, 0),
        (NS_HEADING, 0),
        (NS_HORIZON, 0),
        (NS_HORIZON_FOOTPRINTS, 0),
        *((NS_DISCS, i) for i in range(k)),
        *((NS_HORIZON_END_DISCS, i) for i in range(k)),
    }
    assert len(msg.markers) == 1 + 4 + 2 * k
    for x in msg.markers:
        assert x.header.frame_id == "odom" and (x.header.stamp.sec, x.header.stamp.nanosec) == (12, 250_000_000)
    assert all(x.lifetime.sec + x.lifetime.nanosec > 0 for x in rest)  # a stopped node's markers fade


def test_the_footprint_is_the_closed_polygon_at_the_pose(marker_env):
    store, types = marker_env
    fp = by_key(round_trip(store, planner_markers(types, POSE, None, BOX, 1.0, "odom")))[NS_FOOTPRINT, 0]
    assert fp.type == types.Marker.LINE_STRIP
    points = xy(fp)
    np.testing.assert_array_equal(points[0], points[-1])  # closed
    np.testing.assert_allclose(points[:-1], to_world(BOX.shape.points, POSE), atol=1e-12)
    heading = by_key(round_trip(store, planner_markers(types, POSE, None, BOX, 1.0, "odom")))[NS_HEADING, 0]
    tail, tip = xy(heading)
    np.testing.assert_allclose(tail, POSE[:2])
    np.testing.assert_allclose(tip - tail, BOX.radius * np.array([np.cos(POSE[2]), np.sin(POSE[2])]), atol=1e-12)


def test_a_disc_robots_footprint_never_draws_inside_the_disc(marker_env):
    _, types = marker_env
    fp = by_key(planner_markers(types, POSE, None, DISC, 1.0, "odom"))[NS_FOOTPRINT, 0]
    points = xy(fp)
    np.testing.assert_array_equal(points[0], points[-1])
    assert np.all(np.linalg.norm(points - POSE[:2], axis=1) >= DISC.radius - 1e-12)
    # and no edge cuts into it: each edge's midpoint is outside too (a circumscribed polygon)
    mid = 0.5 * (points[1:] + points[:-1])
    assert np.all(np.linalg.norm(mid - POSE[:2], axis=1) >= DISC.radius - 1e-12)


def test_the_horizon_is_the_plans_positions(marker_env):
    store, types = marker_env
    plan = a_plan()
    horizon = by_key(round_trip(store, planner_markers(types, POSE, plan, BOX, 1.0, "odom")))[NS_HORIZON, 0]
    assert horizon.type == types.Marker.LINE_STRIP
    np.testing.assert_array_equal(xy(horizon), plan[:, :2])


def test_the_footprint_is_outlined_at_every_fifth_knot_and_the_last(marker_env):
    _, types = marker_env
    plan = a_plan(21)
    outlines = by_key(planner_markers(types, POSE, plan, BOX, 1.0, "odom", footprint_every=5))
    lines = outlines[NS_HORIZON_FOOTPRINTS, 0]
    assert lines.type == types.Marker.LINE_LIST
    segments = xy(lines).reshape(-1, 2, 2)
    v = len(BOX.shape.points)
    assert len(segments) == 4 * (v + 1)  # knots 5, 10, 15, 20: each its edges and a heading tick
    first = to_world(BOX.shape.points, plan[5])
    np.testing.assert_allclose(segments[:v, 0], first, atol=1e-12)
    np.testing.assert_allclose(segments[:v, 1], np.roll(first, -1, axis=0), atol=1e-12)  # the edges close
    last = segments[-(v + 1) :]
    np.testing.assert_allclose(last[:v, 0], to_world(BOX.shape.points, plan[-1]), atol=1e-12)
    np.testing.assert_allclose(last[-1, 0], plan[-1, :2])  # the tick: from the centre ...
    np.testing.assert_allclose(last[-1, 1], to_world(np.array([[BOX.radius, 0.0]]), plan[-1])[0])  # ... forward
    short = by_key(planner_markers(types, POSE, plan[:3], BOX, 1.0, "odom", footprint_every=5))
    assert len(xy(short[NS_HORIZON_FOOTPRINTS, 0])) == 2 * (v + 1)  # a short plan: its last knot only


def test_the_discs_are_the_robots_covering_discs(marker_env):
    store, types = marker_env
    plan = a_plan()
    got = by_key(round_trip(store, planner_markers(types, POSE, plan, BOX, 1.0, "odom")))
    for ns, pose in ((NS_DISCS, POSE), (NS_HORIZON_END_DISCS, plan[-1])):
        centres = to_world(BOX.discs[:, :2], pose)
        for i, r in enumerate(BOX.discs[:, 2]):
            disc = got[ns, i]
            assert disc.type == types.Marker.CYLINDER
            assert disc.scale.x == disc.scale.y == pytest.approx(2 * r)  # a cylinder's scale is its diameter
            assert 0 < disc.scale.z < 0.1 and 0 < disc.color.a < 1  # thin, translucent
            np.testing.assert_allclose((disc.pose.position.x, disc.pose.position.y), centres[i], atol=1e-12)
    one = by_key(planner_markers(types, POSE, None, DISC, 1.0, "odom"))[NS_DISCS, 0]
    assert one.scale.x == pytest.approx(2 * DISC.radius)
    assert (one.pose.position.x, one.pose.position.y) == (POSE[0], POSE[1])
    assert (NS_HORIZON_END_DISCS, 0) not in by_key(planner_markers(types, POSE, plan, DISC, 1.0, "o", end_discs=False))


@pytest.mark.parametrize("plan", [None, np.zeros((0, 3)), np.zeros((1, 3))], ids=["none", "empty", "one_knot"])
def test_without_a_plan_only_the_footprint_and_discs(marker_env, plan):
    _, types = marker_env
    msg = planner_markers(types, POSE, plan, BOX, 1.0, "odom")
    assert msg.markers[0].action == types.Marker.DELETEALL
    assert {ns for ns, _ in by_key(msg)} == {NS_FOOTPRINT, NS_HEADING, NS_DISCS}


BAD_PLANS = {
    "nan_knot": np.vstack([a_plan(5), [[np.nan, 0.0, 0.0]]]),
    "inf_yaw": np.column_stack([a_plan(5)[:, :2], [0, 0, np.inf, 0, 0]]),
    "two_columns": a_plan(5)[:, :2],
    "flat": a_plan(5).ravel(),
    "text": "not a plan",
    "ragged": [[0.0, 0.0, 0.0], [1.0]],
}
BAD_POSES = {"nan": [np.nan, 0.0, 0.0], "inf_yaw": [0.0, 0.0, -np.inf], "two_numbers": [1.0, 2.0], "text": "here"}


@pytest.mark.parametrize("plan", list(BAD_PLANS.values()), ids=list(BAD_PLANS))
def test_a_non_finite_or_misshapen_plan_is_left_out(marker_env, plan):
    store, types = marker_env
    msg = round_trip(store, planner_markers(types, POSE, plan, BOX, 1.0, "odom"))
    assert {ns for ns, _ in by_key(msg)} == {NS_FOOTPRINT, NS_HEADING, NS_DISCS}


@pytest.mark.parametrize("pose", list(BAD_POSES.values()), ids=list(BAD_POSES))
def test_a_non_finite_or_misshapen_pose_is_left_out(marker_env, pose):
    store, types = marker_env
    msg = round_trip(store, planner_markers(types, pose, a_plan(), BOX, 1.0, "odom"))
    assert {ns for ns, _ in by_key(msg)} == {NS_HORIZON, NS_HORIZON_FOOTPRINTS, NS_HORIZON_END_DISCS}


def test_nothing_known_only_clears_and_a_bad_stamp_is_unset(marker_env):
    store, types = marker_env
    msg = round_trip(store, planner_markers(types, None, None, BOX, float("nan"), "odom"))
    assert [x.action for x in msg.markers] == [types.Marker.DELETEALL]
    assert (msg.markers[0].header.stamp.sec, msg.markers[0].header.stamp.nanosec) == (0, 0)


def test_markers_with_rclpy_classes_serialise():
    pytest.importorskip("visualization_msgs.msg", reason="ros-jazzy-visualization-msgs (the .[ros] extra)")
    from rclpy.serialization import deserialize_message, serialize_message

    from mnemo_mpc.ros.node import marker_types

    types = marker_types()
    assert types is not None
    msg = planner_markers(types, POSE, a_plan(), BOX, 3.5, "odom")
    back = deserialize_message(serialize_message(msg), types.MarkerArray)
    assert len(back.markers) == 1 + 4 + 2 * len(BOX.discs)
    assert back.markers[1].ns == NS_FOOTPRINT and back.markers[1].type == types.Marker.LINE_STRIP


# --- rviz/mnemo_mpc.rviz --------------------------------------------------------------------------------------------
def rviz_displays(node: dict) -> list[dict]:
    """Every display in an rviz config's tree (groups opened)."""
    out = []
    for d in node.get("Displays", []):
        out.append(d)
        out.extend(rviz_displays(d))
    return out


def absolute(topic: str) -> str:
    """A topic as the node resolves it with no namespace: relative names under /, `~` under the node's name."""
    if topic.startswith("~/"):
        return f"/{NODE_NAME}/{topic[2:]}"
    return topic if topic.startswith("/") else f"/{topic}"


def test_the_rviz_config_shows_the_topics_the_node_uses():
    config = yaml.safe_load((ROOT / "rviz" / "mnemo_mpc.rviz").read_text())
    manager = config["Visualization Manager"]
    p = NavParams()
    assert manager["Global Options"]["Fixed Frame"] == p.frame_id
    shown = {(d["Class"].split("/")[-1], d["Topic"]["Value"]) for d in rviz_displays(manager) if "Topic" in d}
    assert {
        ("Map", absolute(p.grid_topic)),
        ("Odometry", absolute(p.odom_topic)),
        ("Path", absolute(p.local_plan_topic)),
        ("Path", absolute(p.path_topic)),
        ("Pose", absolute(p.goal_topic)),
        ("MarkerArray", absolute(MARKERS_TOPIC)),
    } <= shown
    assert "TF" in {d["Class"].split("/")[-1] for d in rviz_displays(manager)}
    goal_tool = next(t for t in manager["Tools"] if t["Class"].endswith("/SetGoal"))
    assert goal_tool["Topic"]["Value"] == absolute(p.goal_topic)  # RViz's 2D Goal Pose drives the planner


def test_the_rviz_config_shows_the_tracks_topic():
    pytest.importorskip("rclpy", reason="the node module needs rclpy")
    from mnemo_mpc.ros.node import TRACKS_TOPIC

    config = yaml.safe_load((ROOT / "rviz" / "mnemo_mpc.rviz").read_text())
    topics = {d["Topic"]["Value"] for d in rviz_displays(config["Visualization Manager"]) if "Topic" in d}
    assert absolute(TRACKS_TOPIC) in topics
