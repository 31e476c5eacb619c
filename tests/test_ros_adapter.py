"""The node's per-callback logic (NavAdapter) driven by real ROS2 message types from rosbags, without rclpy."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.adapter import NavAdapter
from mnemo_mpc.ros.params import NavParams

typesys = pytest.importorskip("rosbags.typesys", reason="rosbags provides the ROS2 message definitions")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def types():
    return convert.MessageTypes.from_rosbags("ROS2_HUMBLE")


@pytest.fixture(scope="module")
def store():
    return typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)


def odom_msg(store, types, pose, vel, frame="odom"):
    t = store.types
    return t["nav_msgs/msg/Odometry"](
        header=convert.make_header(types, 0.0, frame),
        child_frame_id="base_link",
        pose=t["geometry_msgs/msg/PoseWithCovariance"](pose=convert.make_pose(types, *pose), covariance=np.zeros(36)),
        twist=t["geometry_msgs/msg/TwistWithCovariance"](
            twist=convert.make_twist(types, *vel), covariance=np.zeros(36)
        ),
    )


def local_grid(center=(0.0, 0.0)) -> OccupancyGrid:
    """A 4 m x 4 m free window around `center` with a box obstacle ahead-left."""
    data = np.zeros((80, 80), np.int8)
    data[45:55, 50:56] = 100
    return OccupancyGrid(data, 0.05, (center[0] - 2.0, center[1] - 2.0, 0.0))


def goal_msg(types, goal, frame="odom"):
    return types.PoseStamped(header=convert.make_header(types, 0.0, frame), pose=convert.make_pose(types, *goal))


def test_plans_checked_commands_and_a_local_plan(store, types):
    params = NavParams(use_stamped_twist=True)
    ad = NavAdapter(params, types)
    assert ad.tick(0.0).status == "idle"  # no goal: publish nothing
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0, 0)), 0.0)
    ad.on_goal(goal_msg(types, (1.5, 0.8, 0.0)), 0.0)
    res = ad.tick(0.05)
    assert res.status == "planned"
    v, w = res.command
    robot = params.robot_model()
    assert np.isfinite([v, w]).all()
    assert robot.v_min - 1e-9 <= v <= robot.v_max + 1e-9 and abs(w) <= robot.w_max + 1e-9
    # from rest, one control period of acceleration at most
    assert abs(v) <= robot.a_max * params.dt + 1e-6 and abs(w) <= robot.alpha_max * params.dt + 1e-6
    # both outputs are valid ROS2 messages (CDR round trip)
    for msg in (res.cmd_vel, res.local_plan):
        store.deserialize_cdr(bytes(store.serialize_cdr(msg, msg.__msgtype__)), msg.__msgtype__)
    assert res.cmd_vel.header.frame_id == "base_link"
    assert len(res.local_plan.poses) == params.horizon_steps + 1


def test_stale_odometry_decelerates_within_limits(store, types):
    params = NavParams()
    ad = NavAdapter(params, types)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0.4, 0.5)), 0.0)
    ad.on_goal(goal_msg(types, (1.5, -0.8, 0.0)), 0.0)
    res = ad.tick(params.stale_timeout_s + 0.1)
    assert res.status == "stale_input"
    np.testing.assert_allclose(res.command, [0.4 - params.a_max * params.dt, 0.5 - params.alpha_max * params.dt])
    assert res.local_plan is None


def test_messages_in_other_frames_are_dropped(store, types):
    ad = NavAdapter(NavParams(), types)
    ad.on_goal(goal_msg(types, (1.0, 0.0, 0.0), frame="map"), 0.0)
    assert ad.goal is None
    ad.on_goal(goal_msg(types, (1.0, 0.0, 0.0)), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0, 0), frame="map"), 0.0)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    assert ad.tick(0.1).status == "stale_input"  # the odometry never arrived in the right frame


def test_goal_reached_brakes_within_limits_then_idles(store, types):
    params = NavParams()
    ad = NavAdapter(params, types)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_goal(goal_msg(types, (0.05, 0.0, 0.0)), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0.35, 0.0)), 0.0)
    braking = ad.tick(0.1)
    assert braking.status == "goal_reached"
    np.testing.assert_allclose(braking.command, [0.35 - params.a_max * params.dt, 0.0])
    assert ad.goal is not None  # still ours to stop
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0.0, 0.0)), 0.15)
    assert np.all(ad.tick(0.2).command == 0.0)
    assert ad.tick(0.3).status == "idle"


def test_goal_reached_at_rest_sends_one_zero_then_idles(store, types):
    ad = NavAdapter(NavParams(), types)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0, 0)), 0.0)
    ad.on_goal(goal_msg(types, (0.05, 0.0, 0.0)), 0.0)
    res = ad.tick(0.1)
    assert res.status == "goal_reached" and np.all(res.command == 0.0)
    assert ad.tick(0.2).status == "idle"


def test_rclpy_is_imported_only_by_the_node():
    offenders = []
    for path in (ROOT / "mnemo_mpc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "rclpy" for n in names) and path.name != "node.py":
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_node_module_needs_rclpy():
    try:
        import rclpy  # noqa: F401
    except ImportError:
        pytest.skip("rclpy not installed (pip install -e '.[ros]': ROS 2 Jazzy wheels)")
    from mnemo_mpc.ros import node

    assert node.NODE_NAME == "mnemo_mpc_nav"
