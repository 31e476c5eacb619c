"""FollowPath's semantics without DDS (`mnemo_mpc/ros/follow_path.py`, `NavAdapter.follow_path`): when a goal
succeeds, aborts or goes on; the feedback's distance along the path; invalid paths refused with the field named."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert, follow_path
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.follow_path import PathFollowing, path_length_to_go

pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")

L_PATH = np.array([[0.0, 0.0], [2.0, 0.0], [2.0, 1.0]])


def test_distance_to_goal_is_measured_along_the_path_from_the_nearest_vertex():
    assert path_length_to_go(L_PATH, [0.0, 0.0]) == pytest.approx(3.0)
    assert path_length_to_go(L_PATH, [2.0, 0.1]) == pytest.approx(1.0 + 0.1)  # past the corner: 1 m to go, +0.1 off
    assert path_length_to_go(L_PATH, [2.0, 1.0]) == pytest.approx(0.0)
    assert path_length_to_go(L_PATH[:1], [3.0, 4.0]) == pytest.approx(5.0)  # a one-pose path: straight to it


def test_succeeds_only_once_the_goal_is_reached_and_the_robot_at_rest():
    task = PathFollowing(L_PATH, failure_tolerance_s=1.0)
    assert task.update("planned", "", at_rest=False, now_s=0.0) is None
    assert task.update("goal_reached", "", at_rest=False, now_s=0.1) is None  # still ramping down
    assert task.update("goal_reached", "", at_rest=True, now_s=0.2).state == "succeeded"


def test_a_stopped_planner_aborts_after_the_failure_tolerance_and_a_failure_at_once():
    task = PathFollowing(L_PATH, failure_tolerance_s=1.0)
    assert task.update("stale_input", "no odometry", False, 0.0) is None
    assert task.update("planned", "", False, 0.9) is None  # planning again resets the clock
    assert task.update("fallback_stop", "x", False, 1.0) is None
    assert task.update("fallback_stop", "x", False, 1.9) is None
    out = task.update("stale_input", "no odometry", True, 2.1)
    assert out.state == "aborted" and out.error_code == follow_path.NO_VALID_CONTROL and "no odometry" in out.message
    failed = PathFollowing(L_PATH, 1.0).update("failed", "recoveries exhausted", False, 0.0)
    assert failed.state == "aborted" and failed.error_code == follow_path.FAILED_TO_MAKE_PROGRESS
    no_tf = PathFollowing(L_PATH, 1.0)
    assert no_tf.update("stale_input", "no transform map -> odom: unknown frame", True, 0.0) is None
    assert (
        no_tf.update("stale_input", "no transform map -> odom: unknown frame", True, 1.5).error_code
        == follow_path.TF_ERROR
    )
    assert PathFollowing(L_PATH, 1.0).update("error", "boom", True, 0.0).error_code == follow_path.UNKNOWN
    never = PathFollowing(L_PATH, -1.0)
    assert all(never.update("stale_input", "", True, t) is None for t in np.arange(0.0, 100.0, 10.0))


@pytest.fixture(scope="module")
def types():
    return convert.MessageTypes.from_rosbags("ROS2_HUMBLE")


def path_msg(types, points, frame="odom", yaw=0.0):
    poses = [
        types.PoseStamped(header=convert.make_header(types, 0.0, frame), pose=convert.make_pose(types, x, y, yaw))
        for x, y in points
    ]
    return types.Path(header=convert.make_header(types, 0.0, frame), poses=poses)


def test_the_path_end_is_the_goal_with_its_heading_and_a_re_planned_path_goes_on(types, monkeypatch):
    ad = NavAdapter(NavParams(), types)
    resets = []
    monkeypatch.setattr(ad.controller, "reset", lambda: resets.append(1))
    path = ad.follow_path(path_msg(types, L_PATH, yaw=1.2), 0.0)
    assert np.array_equal(path, L_PATH) and np.allclose(ad.goal, [2.0, 1.0, 1.2]) and len(resets) == 1
    ad.follow_path(path_msg(types, [[0.5, 0.1], [2.0, 1.02]], yaw=1.2), 1.0)  # re-planned, same end: no restart
    assert len(resets) == 1 and np.allclose(ad.global_path, [[0.5, 0.1], [2.0, 1.02]])
    ad.follow_path(path_msg(types, [[0.5, 0.1], [2.0, 1.02]], yaw=1.2), 1.5)  # the very same path again: goes on
    assert len(resets) == 1
    ad.follow_path(path_msg(types, [[0.0, 0.0], [4.0, 0.0]]), 2.0)  # another goal: a new plan
    assert len(resets) == 2


@pytest.mark.parametrize(
    "points, frame, match",
    [
        ([], "odom", "path: expected 1..max_path_poses"),
        ([[0.0, 0.0], [1.0, 0.0]], "", "path header.frame_id '': expected a frame name"),
        ([[0.0, 0.0], [np.nan, 0.0]], "odom", "Path.poses: expected finite"),
        ([[0.0, 0.0], [2e6, 0.0]], "odom", "Path.poses: expected finite positions within"),
    ],
)
def test_an_invalid_path_is_refused_naming_the_field(types, points, frame, match):
    ad = NavAdapter(NavParams(), types)
    with pytest.raises(InputError, match=match):
        ad.follow_path(path_msg(types, points, frame), 0.0)
    assert ad.goal is None
