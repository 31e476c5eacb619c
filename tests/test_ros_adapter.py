"""The node's per-callback logic (NavAdapter) driven by real ROS2 message types from rosbags, without rclpy."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.adapter import NavAdapter

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


def stamped(types, msg, stamp_s):
    msg.header = convert.make_header(types, stamp_s, msg.header.frame_id)
    return msg


def drive(ad, store, types, ticks, t0=0.0, goal=(1.8, 0.0, 0.0), odometry=True):
    """Tick `ticks` control periods with ideal odometry (the robot does what it was told, integrated); returns
    (time, published commands). With odometry=False, nothing new arrives (frozen odometry and grid)."""
    period = ad.period_s
    robot = ad.params.robot_model()
    if ad.goal is None:
        ad.on_goal(goal_msg(types, goal), t0)
    pose, vel, t, commands = np.zeros(3), np.zeros(2), t0, []
    for _ in range(ticks):
        t += period
        if odometry:
            ad.on_grid(stamped(types, convert.make_grid_msg(types, local_grid(pose[:2]), 0.0, "odom"), t), t)
            ad.on_odometry(stamped(types, odom_msg(store, types, pose, vel), t), t)
        res = ad.tick(t)
        if res.command is not None:
            commands.append(res.command.copy())
            vel = res.command.copy()
            pose = robot.step(pose, vel, period)
    return t, np.array(commands)


def assert_within_limits(commands, params, previous=(0.0, 0.0)):
    robot, period = params.robot_model(), params.control_period_s
    cmds = np.vstack([np.asarray(previous, float)[None], commands])
    assert np.all(np.isfinite(cmds))
    assert np.all(cmds[:, 0] >= robot.v_min - 1e-12) and np.all(cmds[:, 0] <= robot.v_max + 1e-12)
    assert np.all(np.abs(cmds[:, 1]) <= robot.w_max + 1e-12)
    steps = np.abs(np.diff(cmds, axis=0))
    assert np.all(steps[:, 0] <= robot.a_max * period * (1 + 1e-9)), steps[:, 0].max()
    assert np.all(steps[:, 1] <= robot.alpha_max * period * (1 + 1e-9)), steps[:, 1].max()


@pytest.mark.parametrize("rate_hz", [10.0, 50.0])
def test_frozen_odometry_ramps_the_command_to_zero_within_the_limits(store, types, rate_hz):
    # Defect: each stale tick stepped down once from the *stale* odometry velocity, so the command never reached 0.
    params = NavParams(control_rate_hz=rate_hz)
    ad = NavAdapter(params, types)
    t, moving = drive(ad, store, types, int(1.5 * rate_hz))
    assert moving[-1][0] > 0.2  # cruising
    _, stopping = drive(ad, store, types, int(2.0 * rate_hz), t0=t, odometry=False)
    assert ad.stats.last_status == "stale_input" and "odometry last received" in ad.stats.last_reason
    assert_within_limits(np.vstack([moving, stopping]), params)
    assert np.all(stopping[-5:] == 0.0)


@pytest.mark.parametrize("rate_hz", [10.0, 20.0, 50.0])
def test_acceleration_limits_hold_per_control_period(store, types, rate_hz):
    # Defect: at 50 Hz the limits were applied per MPC dt (0.1 s): 0.1 m/s steps every 20 ms.
    params = NavParams(control_rate_hz=rate_hz)
    ad = NavAdapter(params, types)
    _, commands = drive(ad, store, types, int(1.5 * rate_hz))
    assert ad.stats.statuses["planned"] > 0
    assert_within_limits(commands, params)


def test_a_stop_ramps_to_zero_within_the_limits_then_publishes_nothing(store, types):
    """A cancelled goal or a deactivated node (`NavAdapter.stop`): dropping the goal alone left the base driving on
    the last command, since an idle tick publishes nothing."""
    params = NavParams()
    ad = NavAdapter(params, types)
    t, moving = drive(ad, store, types, 15, goal=(3.0, 0.0, 0.0))
    assert moving[-1][0] > 0.2
    ad.stop("cancelled")
    results = [ad.tick(t + k * ad.period_s) for k in range(1, 21)]
    stopping = np.array([r.command for r in results if r.command is not None])
    assert ad.goal is None and ad.at_rest and {r.status for r in results} == {"stopping", "idle"}
    assert results[0].reason == "cancelled"
    assert np.all(stopping[-1] == 0.0) and results[-1].cmd_vel is None  # at rest: idle, nothing more published
    assert_within_limits(np.vstack([moving, stopping]), params, previous=(0.0, 0.0))


def test_control_rate_below_the_mpc_step_is_refused():
    with pytest.raises(InputError, match="control_rate_hz: expected >= 1/dt"):
        NavParams(control_rate_hz=5.0, dt=0.1)


def test_goal_reached_ramps_to_zero_then_idles(store, types):
    params = NavParams()
    ad = NavAdapter(params, types)
    t, commands = drive(ad, store, types, 80, goal=(1.0, 0.0, 0.0))
    assert ad.goal is None and ad.tick(t + 0.1).status == "idle"
    assert ad.stats.statuses["goal_reached"] >= 1 and np.all(commands[-1] == 0.0)
    assert_within_limits(commands, params)


def test_bad_messages_are_rejected_at_the_callback_with_a_reason(store, types):
    ad = NavAdapter(NavParams(), types)
    for frame in ("", "/", "m" * 100_000):  # a goal may come in any frame, but in a named one of bounded length
        ad.on_goal(goal_msg(types, (1.0, 0.0, 0.0), frame=frame), 0.0)
        assert ad.goal is None and "expected a frame name of 1..256 characters" in ad.last_rejection
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "map"), 0.0)  # sensor data: frame_id only
    assert "header.frame_id 'map': expected 'odom'" in ad.last_rejection
    for side in (1, 3):  # defect: a 1x1 grid was accepted, then raised out of the control tick
        tiny = OccupancyGrid(np.zeros((side, side), np.int8), 0.05, (0.0, 0.0, 0.0))
        ad.on_grid(convert.make_grid_msg(types, tiny, 0.0, "odom"), 0.0)
        assert "expected >= 4 x 4" in ad.last_rejection
    bad = convert.make_grid_msg(types, local_grid(), 0.0, "odom")
    bad.info.resolution = 0.0
    ad.on_grid(bad, 0.0)
    assert "resolution" in ad.last_rejection
    short = convert.make_grid_msg(types, local_grid(), 0.0, "odom")
    short.data = short.data[:-1]
    ad.on_grid(short, 0.0)
    assert "width*height" in ad.last_rejection
    ad.on_goal(goal_msg(types, (1.0, 0.0, 0.0)), 0.0)
    res = ad.tick(0.1)
    assert res.status == "stale_input" and res.reason == "no odometry received"
    assert ad.stats.rejected["grid"] == 5


def test_old_future_and_out_of_order_stamps_do_not_count_as_fresh(store, types):
    # Defect: stamps that jumped backwards made 0.6 s old data count as fresh.
    params = NavParams()
    ad = NavAdapter(params, types)
    ad.on_goal(goal_msg(types, (1.5, 0.0, 0.0)), 10.0)
    grid = convert.make_grid_msg(types, local_grid(), 10.0, "odom")
    ad.on_grid(grid, 10.0)
    ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), 9.4), 10.0)  # stamped 0.6 s ago
    assert "0.600 s behind the clock" in ad.last_rejection
    assert ad.tick(10.0).reason == "no odometry received"
    ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), 10.1), 10.1)
    assert ad.tick(10.1).status == "planned"
    ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), 10.05), 10.15)  # out of order
    assert "older than the last accepted" in ad.last_rejection
    assert ad.tick(10.2).status == "planned"
    for stamp in (1e6, -5.0):  # far future (it would block every later message) or negative: dropped
        ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), stamp), 10.2)
        assert "the clock" in ad.last_rejection
    ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), 10.25), 10.25)
    assert ad.tick(10.25).status == "planned"
    assert "odometry last received 0.750 s ago" in ad.tick(11.0).reason
    assert "clock went back" in ad.tick(5.0).reason  # e.g. a simulator restarted
    ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), 5.0), 5.0)  # its new stamps are taken


def test_any_costmap_is_fitted_to_one_planning_window(store, types):
    # Defect: a 2000 x 2000 costmap took 28 s in one tick (a new NLP per grid shape, an ESDF over 4 M cells).
    params = NavParams(max_grid_cells=2000 * 2000)
    ad = NavAdapter(params, types)
    ad.on_goal(goal_msg(types, (1.2, 0.4, 0.0)), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0, 0)), 0.0)
    big = np.zeros((2000, 2000), np.int8)
    big[1000:1010, 1030:1036] = 100
    for grid in (
        OccupancyGrid(big, 0.05, (-50.0, -50.0, 0.0)),  # a whole map
        OccupancyGrid(big[:400, :400], 0.01, (-2.0, -2.0, 0.0)),  # finer
        OccupancyGrid(np.zeros((40, 40), np.int8), 0.1, (-2.0, -2.0, 0.3)),  # coarser and rotated
    ):
        ad.on_grid(convert.make_grid_msg(types, grid, 0.0, "odom"), 0.0)
        assert ad.tick(0.05).status == "planned"
    assert set(ad.controller._mpcs) == {ad.window_shape}
    too_big = convert.make_grid_msg(types, OccupancyGrid(np.zeros((2001, 2000), np.int8), 0.05), 0.0, "odom")
    ad.on_grid(too_big, 0.0)
    assert "max_grid_cells" in ad.last_rejection


def test_a_failed_plan_says_why(store, types):
    ad = NavAdapter(NavParams(fallback_solver=""), types)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0, 0)), 0.0)
    ad.on_goal(goal_msg(types, (0.65, 0.5, 0.0)), 0.0)  # inside the box obstacle
    res = ad.tick(0.1)
    assert res.status == "fallback_stop" and res.reason
    level, message, values = ad.diagnostics()
    assert level == 2 and "fallback_stop" in message and values["fallbacks"] == "1"


def test_the_same_goal_twice_does_not_restart_the_plan(store, types, monkeypatch):
    ad = NavAdapter(NavParams(), types)
    resets = []
    monkeypatch.setattr(ad.controller, "reset", lambda: resets.append(1))
    goal = goal_msg(types, (1.0, 0.0, 0.0))
    ad.on_goal(goal, 0.0)
    ad.on_goal(goal, 0.0)  # the volatile and the transient-local subscription both deliver it
    assert len(resets) == 1
    ad.on_goal(stamped(types, goal_msg(types, (1.0, 0.0, 0.0)), 3.0), 3.0)  # sent again later: a new goal
    assert len(resets) == 2
    # re-expressed after a localiser fix (a few cm off): the same goal, followed without a restart
    ad.on_goal(stamped(types, goal_msg(types, (1.03, -0.02, 0.01)), 4.0), 4.0)
    assert len(resets) == 2 and ad._goal[0] == pytest.approx(1.03)
    ad.on_goal(stamped(types, goal_msg(types, (2.0, 0.0, 0.0)), 5.0), 5.0)  # farther than the tolerance: new
    assert len(resets) == 3


# the node modules; the rest of ros/ runs without rclpy (tests, replay)
NODE_MODULES = ("node.py", "lifecycle_node.py", "sim_node.py", "follow_path_client.py")


def test_rclpy_is_imported_only_by_the_node():
    offenders = []
    for path in (ROOT / "mnemo_mpc").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            if any(n.split(".")[0] == "rclpy" for n in names) and path.name not in NODE_MODULES:
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_node_module_needs_rclpy():
    try:
        import rclpy  # noqa: F401
    except ImportError:
        pytest.skip("rclpy not installed (pip install -e '.[ros]': ROS 2 Jazzy wheels)")
    from mnemo_mpc.ros import node

    assert node.NODE_NAME == "mnemo_mpc_nav"


def test_a_goal_beyond_a_small_costmap_is_approached_without_a_global_path(store, types):
    # The 4 m costmap is fitted into the 6 m planning window: the padding is unknown space, where the MPC refuses a
    # goal; with no global path the sub-goal is the farthest known-free point on the line to it.
    params = NavParams()
    ad = NavAdapter(params, types)
    drive(ad, store, types, 100, goal=(2.6, 0.0, 0.0))
    assert set(ad.stats.statuses) == {"planned", "goal_reached", "idle"}, ad.stats.statuses
    assert ad.goal is None  # reached


def test_the_odometry_age_and_the_latency_are_predicted_over(store, types):
    """Issue 24: the node hands the controller the odometry's age (its stamp against the clock); with the profile's
    latency the plan starts where a moving robot will be when the command acts, farther for older odometry."""
    params = NavParams(dynamics_latency_s=0.1, dynamics_lag_v_s=0.1, dynamics_lag_w_s=0.1)
    starts = {}
    for age in (0.0, 0.2):
        ad = NavAdapter(params, types)
        ad.on_grid(convert.make_grid_msg(types, local_grid(), 1.0, "odom"), 1.0)
        msg = odom_msg(store, types, (0, 0, 0), (0.3, 0.0))
        msg.header = convert.make_header(types, 1.0 - age, "odom")
        ad.on_odometry(msg, 1.0)
        ad.on_goal(goal_msg(types, (1.5, 0.8, 0.0)), 1.0)
        out = ad.tick(1.0).output
        starts[age] = out.start_state[0]
    assert starts[0.0] == pytest.approx(0.3 * 0.1, abs=2e-3)  # 0.1 s latency at 0.3 m/s (the lag holds 0.3)
    assert starts[0.2] == pytest.approx(0.3 * 0.3, abs=2e-3)  # plus 0.2 s of age
    off = NavAdapter(dataclasses.replace(params, compensate_dynamics=False), types)
    assert off.controller.config.actuation is None


def test_a_normal_status_is_not_logged_as_a_warning():
    """Issue 27: the node logged WARN "control status: rotating_to_path" each time the status flipped between
    planning and turning onto the path (every 0.5 s on a winding path). A change to a normal status is DEBUG now;
    a fallback is still a warning, once per change. The node's own `_tick` is driven with a stub adapter."""
    pytest.importorskip("rclpy", reason="the node module needs rclpy")
    from types import SimpleNamespace

    from mnemo_mpc.ros import node
    from mnemo_mpc.ros.adapter import TickResult

    sequence = ["planned", "rotating_to_path", "planned", "rotating_to_path", "rotating_to_path"]
    sequence += ["fallback_previous_plan", "fallback_previous_plan", "planned", "goal_reached", "idle"]
    results = iter(TickResult(None, None, s, reason="solver: x" if "fallback" in s else "") for s in sequence)
    lines: dict[str, list[str]] = {"debug": [], "info": [], "warning": [], "error": []}
    logger = SimpleNamespace(**{level: got.append for level, got in lines.items()})
    adapter = SimpleNamespace(tick=lambda now: next(results), _reported_status=("idle", ""))
    adapter.status_change = lambda result: NavAdapter.status_change(adapter, result)
    fake = SimpleNamespace(
        adapter=adapter,
        get_logger=lambda: logger,
        _now=lambda: 0.0,
        marker_pub=None,
        planner_marker_pub=None,
        _following=None,
    )
    fake._publish_tick = lambda result, now: node.NavNode._publish_tick(fake, result, now)
    for _ in sequence:
        node.NavNode._tick(fake)
    assert lines["warning"] == ["control status: fallback_previous_plan (solver: x)"]
    assert lines["error"] == lines["info"] == []
    assert lines["debug"].count("control status: rotating_to_path") == 2


# --- frames: goal and path in map, /tf and /tf_static (issue 29) ------------------------------------------------------
def tf_msg(store, parent, child, stamp_s, x, y, yaw):
    t = store.types
    sec, nanosec = divmod(int(round(stamp_s * 1e9)), 1_000_000_000)
    return t["tf2_msgs/msg/TFMessage"](
        transforms=[
            t["geometry_msgs/msg/TransformStamped"](
                header=t["std_msgs/msg/Header"](
                    stamp=t["builtin_interfaces/msg/Time"](sec=sec, nanosec=nanosec), frame_id=parent
                ),
                child_frame_id=child,
                transform=t["geometry_msgs/msg/Transform"](
                    translation=t["geometry_msgs/msg/Vector3"](x=x, y=y, z=0.0),
                    rotation=t["geometry_msgs/msg/Quaternion"](x=0.0, y=0.0, z=np.sin(yaw / 2), w=np.cos(yaw / 2)),
                ),
            )
        ]
    )


def map_to_odom(pose_in_map, x, y, yaw):
    """A pose in map -> odom, where odom's origin sits at (x, y, yaw) in map."""
    c, s_ = np.cos(yaw), np.sin(yaw)
    dx, dy = pose_in_map[0] - x, pose_in_map[1] - y
    return np.array([c * dx + s_ * dy, -s_ * dx + c * dy, pose_in_map[2] - yaw])


def test_a_goal_in_map_waits_for_tf_as_stale_input_then_is_driven_to_in_odom(store, types):
    ad = NavAdapter(NavParams(), types)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_odometry(odom_msg(store, types, (0, 0, 0), (0, 0)), 0.0)
    goal_map = (2.5, 1.0, 0.5)
    ad.on_goal(goal_msg(types, goal_map, frame="map"), 0.0)
    res = ad.tick(0.05)
    assert res.status == "stale_input" and "no transform map -> odom" in res.reason and not np.any(res.command)
    offset = (1.0, 0.5, 0.2)
    ad.on_tf(tf_msg(store, "map", "odom", 0.0, *offset), 0.06, static=True)
    res = ad.tick(0.1)
    assert res.status == "planned", res.reason
    np.testing.assert_allclose(ad.goal, map_to_odom(goal_map, *offset), atol=1e-9)


def test_a_moving_map_to_odom_re_expresses_the_goal_without_a_new_plan_and_a_stale_one_stops(store, types, monkeypatch):
    params = NavParams()
    ad = NavAdapter(params, types)
    resets = []
    reset = ad.controller.reset
    monkeypatch.setattr(ad.controller, "reset", lambda: (resets.append(1), reset()))
    ad.on_tf(tf_msg(store, "map", "odom", 0.0, 0.0, 0.0, 0.0), 0.0)
    ad.on_goal(goal_msg(types, (3.0, 0.0, 0.0), frame="map"), 0.0)
    t, commands = 0.0, []
    for k in range(10):
        t = 0.1 * (k + 1)
        ad.on_tf(tf_msg(store, "map", "odom", t, 0.0, 0.02 * k, 0.0), t)  # a localiser's drift correction
        ad.on_grid(stamped(types, convert.make_grid_msg(types, local_grid(), 0.0, "odom"), t), t)
        ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), t), t)
        res = ad.tick(t)
        assert res.status in ("planned", "rotating_to_path"), (res.status, res.reason)
        commands.append(res.command)
    assert len(resets) == 1  # the first expression only: a moved goal is the same goal
    np.testing.assert_allclose(ad.goal, (3.0, -0.18, 0.0), atol=1e-9)
    t_late = t + params.transform_tolerance + 0.05  # no /tf since: stale input, the command ramps down
    ad.on_grid(stamped(types, convert.make_grid_msg(types, local_grid(), 0.0, "odom"), t_late), t_late)
    ad.on_odometry(stamped(types, odom_msg(store, types, (0, 0, 0), (0, 0)), t_late), t_late)
    res = ad.tick(t_late)
    assert res.status == "stale_input" and "no transform map -> odom" in res.reason
    assert_within_limits(np.vstack([commands, res.command]), params)


def test_a_follow_path_in_map_is_followed_in_odom_and_the_clock_going_back_clears_tf(store, types):
    ad = NavAdapter(NavParams(), types)
    offset = (-1.0, 2.0, np.pi / 2)
    ad.on_tf(tf_msg(store, "map", "odom", 5.0, *offset), 5.0, static=True)
    msg = path_msg(types, [[-1.0, 2.0], [-1.0, 3.0], [-1.5, 4.0]], frame="map", yaw=np.pi / 2)
    ad.follow_path(msg, 5.0)
    assert ad.tick(5.05).status == "stale_input"  # no odometry yet: stale, the goal expressed
    np.testing.assert_allclose(ad.goal, map_to_odom((-1.5, 4.0, np.pi / 2), *offset), atol=1e-9)
    np.testing.assert_allclose(ad._path, [[0.0, 0.0], [1.0, 0.0], [2.0, 0.5]], atol=1e-9)
    ad.on_tf(tf_msg(store, "map", "odom", 1.0, *offset), 1.0)  # the clock went back: the buffer starts again
    assert ad.tf.frames() == {"map", "odom"} and len(ad.tf.edges()) == 1 and not ad.tf.edges()[0].static
    bad = tf_msg(store, "map", "odom", 1.0, np.nan, 0.0, 0.0)
    ad.on_tf(bad, 1.1)
    assert ad.stats.rejected["tf"] == 1 and "tf: " in ad.last_rejection


def path_msg(types, points, frame="odom", yaw=0.0):
    poses = [
        types.PoseStamped(header=convert.make_header(types, 0.0, frame), pose=convert.make_pose(types, x, y, yaw))
        for x, y in points
    ]
    return types.Path(header=convert.make_header(types, 0.0, frame), poses=poses)


def test_a_cancel_is_taken_before_the_ticks_command():
    """Nav2 checks for a cancel before computing a command: taken after, the tick just after a cancel could still
    speed the robot up (seen live: 0.322 -> 0.341 m/s)."""
    pytest.importorskip("rclpy", reason="the node module needs rclpy")
    from types import SimpleNamespace

    from mnemo_mpc.ros import node

    calls = []
    adapter = SimpleNamespace(stop=lambda reason: calls.append(("stop", reason)), tick=lambda now: calls.append("tick"))
    following = SimpleNamespace(handle=SimpleNamespace(is_cancel_requested=True), canceling=False)
    fake = SimpleNamespace(adapter=adapter, _now=lambda: 1.0, _following=following)
    fake._publish_tick = lambda result, now: None
    fake._follow_tick = lambda result, now: calls.append("follow")
    node.NavNode._tick(fake)
    assert calls == [("stop", "FollowPath goal cancelled"), "tick", "follow"] and following.canceling
    calls.clear()
    node.NavNode._tick(fake)  # taken once
    assert calls == ["tick", "follow"]


def scan_msg(store, types, frame, ranges, angle_min=-np.pi / 2, stamp=0.0):
    n = len(ranges)
    return store.types["sensor_msgs/msg/LaserScan"](
        header=convert.make_header(types, stamp, frame),
        angle_min=angle_min,
        angle_max=angle_min + np.pi * (n - 1) / n,
        angle_increment=np.pi / n,
        time_increment=0.0,
        scan_time=0.0,
        range_min=0.05,
        range_max=10.0,
        ranges=np.asarray(ranges, dtype=np.float32),
        intensities=np.zeros(0, dtype=np.float32),
    )


def test_a_scans_returns_reach_the_controller_in_frame_id_once(store, types):
    """A LaserScan in base_link is placed by the odometry, one in a laser frame through /tf; its returns (finite,
    within the range limits) reach the next tick's controller in odom, once. A scan that cannot be placed, or is
    malformed, is dropped with a reason."""
    ad = NavAdapter(NavParams(), types)
    given = []
    step = ad.controller.step
    ad.controller.step = lambda *a, **k: given.append(k.get("returns")) or step(*a, **k)
    ad.on_grid(convert.make_grid_msg(types, local_grid(), 0.0, "odom"), 0.0)
    ad.on_goal(goal_msg(types, (1.5, 0.0, 0.0)), 0.0)
    ad.on_scan(scan_msg(store, types, "base_link", [1.0] * 4), 0.0)  # no odometry yet: cannot be placed
    assert ad.stats.rejected["scan"] == 1 and "no odometry" in ad.last_rejection
    ad.on_odometry(odom_msg(store, types, (0.5, 0.2, np.pi / 2), (0, 0)), 0.0)
    # beams at -90, -45, 0, 45 degrees: the first beyond range_max, the second NaN, the others hit at 1 m and 2 m
    ad.on_scan(scan_msg(store, types, "base_link", [np.inf, np.nan, 1.0, 2.0]), 0.0)
    ad.tick(0.05)
    ad.tick(0.1)
    assert given[1] is None  # counted once
    expected = [[0.5, 1.2], [0.5 - 2 * np.sin(np.pi / 4), 0.2 + 2 * np.cos(np.pi / 4)]]
    np.testing.assert_allclose(given[0], expected, atol=1e-6)
    # A laser frame 0.1 m ahead of base_link, through /tf (odom -> laser)
    ad.on_tf(tf_msg(store, "odom", "laser", 0.1, 0.5, 0.3, np.pi / 2), 0.1)
    ad.on_scan(scan_msg(store, types, "laser", [1.0], angle_min=0.0), 0.1)
    ad.tick(0.15)
    np.testing.assert_allclose(given[-1], [[0.5, 1.3]], atol=1e-6)
    for bad, why in (
        (scan_msg(store, types, "camera", [1.0]), "no transform"),
        (scan_msg(store, types, "odom", [1.0], stamp=-5.0), "stale_timeout_s"),
        (dataclasses.replace(scan_msg(store, types, "odom", [1.0]), angle_increment=0.0), "angle_increment"),
        (dataclasses.replace(scan_msg(store, types, "odom", [1.0] * 3), range_max=np.nan), "range_max"),
        (scan_msg(store, types, "odom", np.ones(200_000)), "at most"),
    ):
        ad.on_scan(bad, 0.2)
        assert why in ad.last_rejection, (why, ad.last_rejection)
