"""The node's tracks (issue 28): the /diagnostics KeyValues and the MarkerArray built from tracks (against real ROS 2
message definitions and CDR from rosbags, and rclpy's classes where installed), and the node core reporting the box
it tracks crossing its grids."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from mnemo_mpc.nav.tracking import Track
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import PredictedObstacles
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.tracks import (
    NS_LABEL,
    NS_PREDICTED,
    NS_TRACK,
    NS_VELOCITY,
    MarkerTypes,
    nearest_first,
    track_markers,
    track_values,
)

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")


def track(track_id: int, position, velocity, radius: float = 0.25) -> Track:
    return Track(
        id=track_id,
        position=np.asarray(position, float),
        velocity=np.asarray(velocity, float),
        covariance=np.eye(4) * 0.01,
        radius_m=radius,
        age_s=1.0,
        confirmed=True,
        cells=np.zeros((0, 2), int),
    )


TRACKS = [track(7, (3.0, 0.0), (0.0, 1.0)), track(2, (1.0, 1.0), (-1.2, 0.5), 0.3), track(9, (-0.5, 0.0), (0.4, 0.0))]


def test_tracks_are_listed_nearest_the_robot_first():
    assert [t.id for t in nearest_first(TRACKS, np.array([0.0, 0.0, 1.0]))] == [9, 2, 7]
    assert [t.id for t in nearest_first(TRACKS, np.array([3.0, 0.5]))] == [7, 2, 9]
    assert [t.id for t in nearest_first(TRACKS, None)] == [2, 7, 9]  # no pose: by id


def test_track_values_give_each_tracks_id_position_velocity_speed_in_the_grids_frame():
    values = track_values(nearest_first(TRACKS, np.zeros(2)), "odom", max_listed=5)
    assert values["tracks"] == "3" and values["tracks_frame"] == "odom"
    assert values["track_0_id"] == "9"
    assert values["track_1_id"] == "2"
    assert values["track_1_position_m"] == "1.000, 1.000"
    assert values["track_1_velocity_m_s"] == "-1.200, 0.500"
    assert values["track_1_speed_m_s"] == "1.300"
    assert values["track_1_radius_m"] == "0.300"
    assert values["track_2_id"] == "7"
    assert all(isinstance(v, str) for v in values.values())  # a KeyValue's value is a string


def test_track_values_are_bounded_but_count_every_track():
    many = [track(i, (float(i), 0.0), (1.0, 0.0)) for i in range(40)]
    values = track_values(many, "map", max_listed=5)
    assert values["tracks"] == "40"
    assert {k.split("_")[1] for k in values if k.startswith("track_")} == {str(i) for i in range(5)}
    assert track_values([], "map", max_listed=5) == {"tracks": "0", "tracks_frame": "map"}


@pytest.fixture(scope="module", params=["ROS2_HUMBLE", "ROS2_JAZZY"])
def marker_env(request):
    return typesys.get_typestore(getattr(typesys.Stores, request.param)), MarkerTypes.from_rosbags(request.param)


def test_markers_clear_then_draw_each_track_its_velocity_and_the_predicted_centres(marker_env):
    store, types = marker_env
    centres = np.stack([np.column_stack([np.linspace(0, 1, 10), np.full(10, 2.0)]), np.full((10, 2), -1.0)], axis=1)
    predicted = PredictedObstacles(centres, np.full((10, 2), 0.4))
    msg = track_markers(types, TRACKS[:2], predicted, 12.25, "odom")
    msg = store.deserialize_cdr(bytes(store.serialize_cdr(msg, msg.__msgtype__)), msg.__msgtype__)  # a real message
    m = types.Marker
    first, *rest = msg.markers
    assert first.action == m.DELETEALL  # the markers of tracks that ended go first
    assert all(x.action == m.ADD for x in rest)
    for x in msg.markers:
        assert x.header.frame_id == "odom" and (x.header.stamp.sec, x.header.stamp.nanosec) == (12, 250_000_000)
    by = {(x.ns, x.id): x for x in rest}
    assert set(by) == {
        *((ns, i) for ns in (NS_TRACK, NS_VELOCITY, NS_LABEL) for i in (7, 2)),
        (NS_PREDICTED, 0),
        (NS_PREDICTED, 1),
    }
    cylinder = by[NS_TRACK, 2]
    assert cylinder.type == m.CYLINDER
    assert (cylinder.pose.position.x, cylinder.pose.position.y) == (1.0, 1.0)
    assert cylinder.scale.x == cylinder.scale.y == pytest.approx(0.6)  # the track's diameter
    arrow = by[NS_VELOCITY, 2]
    assert arrow.type == m.ARROW
    tail, tip = ((p.x, p.y) for p in arrow.points)
    assert tail == (1.0, 1.0) and tip == pytest.approx((1.0 - 1.2, 1.0 + 0.5))  # one second of its velocity
    assert "#2" in by[NS_LABEL, 2].text and "1.30 m/s" in by[NS_LABEL, 2].text
    line = by[NS_PREDICTED, 0]
    assert line.type == m.LINE_STRIP
    np.testing.assert_allclose([(p.x, p.y) for p in line.points], centres[:, 0])
    assert all(x.lifetime.sec + x.lifetime.nanosec > 0 for x in rest)  # a stopped node's markers fade


def test_markers_without_tracks_only_clear(marker_env):
    _, types = marker_env
    msg = track_markers(types, [], None, 1.0, "odom")
    assert [x.action for x in msg.markers] == [types.Marker.DELETEALL]
    many = [track(i, (float(i), 0.0), (1.0, 0.0)) for i in range(40)]
    assert len(track_markers(types, many, None, 1.0, "odom", max_tracks=4).markers) == 1 + 3 * 4


def test_markers_with_rclpy_classes_serialise():
    pytest.importorskip("visualization_msgs.msg", reason="ros-jazzy-visualization-msgs (the .[ros] extra)")
    from rclpy.serialization import deserialize_message, serialize_message

    from mnemo_mpc.ros.node import marker_types

    types = marker_types()
    assert types is not None
    predicted = PredictedObstacles(np.zeros((10, 1, 2)), np.full((10, 1), 0.4))
    msg = track_markers(types, TRACKS, predicted, 3.5, "odom")
    back = deserialize_message(serialize_message(msg), types.MarkerArray)
    assert len(back.markers) == 1 + 3 * len(TRACKS) + 1
    assert back.markers[1].ns == NS_TRACK and back.markers[1].id == 7


def test_without_visualization_msgs_the_node_has_no_marker_types(monkeypatch):
    pytest.importorskip("rclpy", reason="the node module needs rclpy")
    from mnemo_mpc.ros import node

    monkeypatch.setitem(sys.modules, "visualization_msgs.msg", None)  # `import` raises ImportError
    assert node.marker_types() is None


# --- the node core: a box crossing the grids ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def ros_types():
    return typesys.get_typestore(typesys.Stores.ROS2_JAZZY), convert.MessageTypes.from_rosbags("ROS2_JAZZY")


def run_crossing_box(
    store, types, moving_prediction: str, ticks: int = 30, rate_hz: float = 10.0, jitter_s: float = 0.0
) -> tuple[NavAdapter, list[dict]]:
    """The node core at `rate_hz`, the robot still at the origin with a goal ahead, a box crossing its grids at 1 m/s;
    the diagnostics' values after every tick. Grids come at the same rate, each sensed `jitter_s` (normal, seeded)
    around its nominal time, which is 2 ms before a tick's: a tick plans on the newest grid sensed before it -- with
    jitter, now and then the one it had already (and the next tick skips one), as over DDS."""
    from moving_box import GOAL, ORIGIN_M, RESOLUTION_M, box_cells

    t = store.types
    rng = np.random.default_rng(0)
    sensed_s = np.arange(ticks) / rate_hz - 0.002 + rng.normal(0.0, jitter_s, ticks)
    ad = NavAdapter(NavParams(moving_prediction=moving_prediction, control_rate_hz=rate_hz), types)
    goal = types.PoseStamped(header=convert.make_header(types, 0.0, "odom"), pose=convert.make_pose(types, *GOAL))
    ad.on_goal(goal, 0.0)
    seen = []
    for k in range(ticks):
        now = 1.0 + k / rate_hz
        odom = t["nav_msgs/msg/Odometry"](
            header=convert.make_header(types, now, "odom"),
            child_frame_id="base_link",
            pose=t["geometry_msgs/msg/PoseWithCovariance"](
                pose=convert.make_pose(types, 0, 0, 0), covariance=np.zeros(36)
            ),
            twist=t["geometry_msgs/msg/TwistWithCovariance"](
                twist=convert.make_twist(types, 0, 0), covariance=np.zeros(36)
            ),
        )
        ad.on_odometry(odom, now)
        sensed = max(float(sensed_s[sensed_s <= now - 1.0].max(initial=0.0)), 0.0)
        grid = OccupancyGrid(box_cells(sensed), RESOLUTION_M, (ORIGIN_M, ORIGIN_M, 0.0))
        ad.on_grid(convert.make_grid_msg(types, grid, 1.0 + sensed, "odom"), now)
        ad.tick(now)
        seen.append(ad.diagnostics()[2])
    return ad, seen


def track_vx(seen: list[dict]) -> np.ndarray:
    return np.array([float(v["track_0_velocity_m_s"].split(",")[0]) for v in seen if v.get("tracks", "0") != "0"])


def test_the_node_core_lists_the_tracks_nearest_the_robot_up_to_the_slots_and_two(ros_types, monkeypatch):
    from moving_box import GOAL, ORIGIN_M, RESOLUTION_M, box_cells

    from mnemo_mpc.nav.controller import ControlOutput

    store, types = ros_types
    ad = NavAdapter(NavParams(moving_prediction="track", warm_start="shift"), types)  # no model to load
    far = [track(20 + i, (5.0 + i, 5.0), (0.0, 0.5)) for i in range(5)]
    crowd = (*far[::-1], TRACKS[2], *TRACKS[:2])  # as the tracker may give them: not by distance
    start = np.array([3.0, 0.5, 0.0, 0.0, 0.0])  # the state the step planned from: the robot's place
    planned = ControlOutput(np.zeros(2), "planned", None, start_state=start, tracks=crowd)
    monkeypatch.setattr(ad.controller, "step", lambda *args, **kwargs: planned)
    ad.on_goal(
        types.PoseStamped(header=convert.make_header(types, 0.0, "odom"), pose=convert.make_pose(types, *GOAL)), 0
    )
    ad.on_grid(
        convert.make_grid_msg(types, OccupancyGrid(box_cells(0.0), RESOLUTION_M, (ORIGIN_M,) * 2 + (0.0,)), 1, "odom"),
        1,
    )
    t = store.types
    pose = t["geometry_msgs/msg/PoseWithCovariance"](
        pose=convert.make_pose(types, 3.0, 0.5, 0), covariance=np.zeros(36)
    )
    twist = t["geometry_msgs/msg/TwistWithCovariance"](twist=convert.make_twist(types, 0, 0), covariance=np.zeros(36))
    header = convert.make_header(types, 1.0, "odom")
    ad.on_odometry(t["nav_msgs/msg/Odometry"](header=header, child_frame_id="base_link", pose=pose, twist=twist), 1)
    assert ad.tick(1.0).status == "planned"
    values = ad.diagnostics()[2]
    slots = ad.controller.config.tracking.slots
    assert values["tracks"] == str(len(crowd))
    listed = [values[f"track_{i}_id"] for i in range(len(crowd)) if f"track_{i}_id" in values]
    assert listed == ["7", "2", "9", "20", "21"][: slots + 2]  # nearest (3, 0.5) first


def test_the_node_core_reports_the_crossing_box_on_diagnostics(ros_types):
    from moving_box import BOX_Y_M, SPEED_M_S, box_x

    store, types = ros_types
    ad, seen = run_crossing_box(store, types, "track")
    last = seen[-1]
    assert last["tracks"] == "1" and last["tracks_frame"] == "odom", last
    vx, vy = (float(c) for c in last["track_0_velocity_m_s"].split(","))
    assert vx == pytest.approx(SPEED_M_S, abs=0.15) and abs(vy) < 0.1
    assert float(last["track_0_speed_m_s"]) == pytest.approx(SPEED_M_S, abs=0.15)
    x, y = (float(c) for c in last["track_0_position_m"].split(","))
    assert x == pytest.approx(box_x(0.1 * 29), abs=0.1) and y == pytest.approx(BOX_Y_M, abs=0.1)
    assert ad.stats.predicted is not None and ad.stats.predicted.count == 1  # and the MPC met it
    # A tick that plans nothing (stale input) reports no tracks: none outlive the tick that saw them.
    ad.tick(1.0 + 0.1 * 29 + 5.0)
    assert ad.stats.last_status == "stale_input" and ad.diagnostics()[2]["tracks"] == "0"


def test_without_tracking_diagnostics_carry_no_track_values(ros_types):
    store, types = ros_types
    _, seen = run_crossing_box(store, types, "reach", ticks=3)
    assert not any(k.startswith("track") for k in seen[-1])


# The tracker's clock is the controller's step count (nav/controller.py `_plan`: `now = self._clock`, one MPC dt per
# step), not the node's time or the grid's stamp: right when the node ticks at 1/dt in step with its grids, wrong
# otherwise. These hold when it runs on the grid's time (strict: an XPASS says the markers can go).


def test_a_node_ticking_faster_than_dt_tracks_the_true_speed(ros_types):
    store, types = ros_types
    _, seen = run_crossing_box(store, types, "track", ticks=60, rate_hz=20.0)  # 20 Hz, dt 0.1 s: measured 0.50 m/s
    assert np.median(track_vx(seen)[5:]) == pytest.approx(1.0, abs=0.1)


def test_grids_a_few_ms_off_the_ticks_keep_the_velocity_estimate(ros_types):
    store, types = ros_types
    # measured: 0.58-1.25 m/s (0.999-1.012 m/s without the jitter)
    _, seen = run_crossing_box(store, types, "track", ticks=40, jitter_s=0.005)
    assert np.all(np.abs(track_vx(seen)[5:] - 1.0) < 0.15)
