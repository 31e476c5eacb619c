"""The simulator node's logic without ROS: parameters, message builders (real ROS 2 definitions and CDR through
rosbags), the command hold and timeout, collision and goal events, the episode summary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.ros.sim_params import SimNodeParams
from mnemo_mpc.sim.world import parse_pose
from mnemo_mpc.sim.worlds import world_from_grid

pytest.importorskip("pybullet")
pytest.importorskip("rosbags")


@pytest.fixture(scope="module")
def types():
    from mnemo_mpc.ros.sim_convert import SimMessageTypes

    return SimMessageTypes.from_rosbags()


@pytest.fixture(scope="module")
def typestore():
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.ROS2_HUMBLE)


def hall(wall_x: float | None = None, start=(1.0, 1.5, 0.0), goal=(1.5, 1.5, 0.0)):
    """A 4 m x 3 m walled hall at 0.05 m, optionally with a wall across it at x = wall_x."""
    data = np.full((60, 80), FREE, dtype=np.int8)
    data[:3, :] = data[-3:, :] = data[:, :3] = data[:, -3:] = OCCUPIED
    if wall_x is not None:
        c = int(wall_x / 0.05)
        data[:, c : c + 3] = OCCUPIED
    return world_from_grid(OccupancyGrid(data, 0.05), np.array(start), np.array(goal))


def twist(types, v, w):
    b = types.base
    return b.Twist(linear=b.Vector3(x=v, y=0.0, z=0.0), angular=b.Vector3(x=0.0, y=0.0, z=w))


# --- parameters -----------------------------------------------------------------------------------------------------
def test_params_accept_integers_for_floats_and_name_bad_values():
    p = SimNodeParams.from_dict({"sim_rate_hz": 20, "real_time_factor": 2, "world_seed": 45})
    assert p.sim_rate_hz == 20.0 and isinstance(p.sim_rate_hz, float) and p.real_time_factor == 2.0
    with pytest.raises(InputError, match="parameter sim_rate_hz: expected > 0, got -5.0"):
        SimNodeParams.from_dict({"sim_rate_hz": -5})
    with pytest.raises(InputError, match="parameter world_seed expected int, got float"):
        SimNodeParams.from_dict({"world_seed": 4.5})
    with pytest.raises(InputError, match="parameter physics_hz: expected >= sim_rate_hz"):
        SimNodeParams.from_dict({"sim_rate_hz": 100, "physics_hz": 50})
    with pytest.raises(InputError, match="world_kind"):
        SimNodeParams.from_dict({"world_kind": "castle"})
    with pytest.raises(InputError, match="only with map_yaml"):
        SimNodeParams.from_dict({"start": "1,2,0"})
    with pytest.raises(InputError, match="unknown parameter"):
        SimNodeParams.from_dict({"sim_rate": 20})


def test_pose_parameters_as_string_or_list():
    assert parse_pose("[1, 2, 0.5]", "parameter start").tolist() == [1.0, 2.0, 0.5]
    assert parse_pose([1, 2, 0], "parameter goal").tolist() == [1.0, 2.0, 0.0]
    for bad in ("1,2", "a,b,c", [1, 2, float("nan")], [True, 1, 2]):
        with pytest.raises(InputError, match="parameter start: expected"):
            parse_pose(bad, "parameter start")
    with pytest.raises(InputError, match="parameter goal"):
        SimNodeParams(map_yaml="worlds/open_45.yaml", start="7.325,4.575,0", goal="")


def test_map_yaml_relative_to_the_sim_data_folder():
    p = SimNodeParams(map_yaml="worlds/open_45.yaml", start=[7.325, 4.575, 0], goal="2.425,4.925,0")
    assert p.map_yaml_path().is_file()
    world = p.world()
    assert world.start.tolist() == [7.325, 4.575, 0.0]
    with pytest.raises(InputError, match="parameter map_yaml: no file 'worlds/nope.yaml'"):
        SimNodeParams(map_yaml="worlds/nope.yaml", start="0,0,0", goal="1,1,0").world()


# --- messages -------------------------------------------------------------------------------------------------------
def test_messages_serialize_with_the_ros2_definitions(types, typestore):
    from mnemo_mpc.ros.sim_convert import command_from_twist, make_clock, make_laser_scan, make_odometry

    odom = make_odometry(types, np.array([1.0, 2.0, 0.5]), np.array([0.3, -0.2]), 12.25, "odom", "base_link")
    back = typestore.deserialize_cdr(typestore.serialize_cdr(odom, "nav_msgs/msg/Odometry"), "nav_msgs/msg/Odometry")
    assert (back.header.stamp.sec, back.header.stamp.nanosec) == (12, 250_000_000)
    assert back.header.frame_id == "odom" and back.child_frame_id == "base_link"
    assert back.pose.pose.position.x == 1.0 and back.twist.twist.linear.x == 0.3 and back.twist.twist.angular.z == -0.2
    assert 2 * math.atan2(back.pose.pose.orientation.z, back.pose.pose.orientation.w) == pytest.approx(0.5)

    angles = np.linspace(-math.pi, math.pi, 360, endpoint=False)
    ranges = np.full(360, 5.0)
    ranges[0] = 1.5
    hit = ranges < 5.0
    scan = make_laser_scan(types, angles, ranges, hit, 0.05, 5.0, 3.0, "base_link", scan_time_s=0.05)
    raw = typestore.serialize_cdr(scan, "sensor_msgs/msg/LaserScan")
    back = typestore.deserialize_cdr(raw, "sensor_msgs/msg/LaserScan")
    assert back.angle_min == pytest.approx(-math.pi) and back.angle_increment == pytest.approx(2 * math.pi / 360)
    assert back.ranges[0] == pytest.approx(1.5) and math.isinf(back.ranges[1])  # REP-117: no return is +inf
    assert len(back.ranges) == 360 and back.range_max == 5.0

    clock = make_clock(types, 7.5)
    back = typestore.deserialize_cdr(
        typestore.serialize_cdr(clock, "rosgraph_msgs/msg/Clock"), "rosgraph_msgs/msg/Clock"
    )
    assert (back.clock.sec, back.clock.nanosec) == (7, 500_000_000)

    b = types.base
    stamped = b.TwistStamped(header=b.Header(stamp=b.Time(sec=0, nanosec=0), frame_id=""), twist=twist(types, 0.2, 0.1))
    assert command_from_twist(stamped) == (0.2, 0.1) and command_from_twist(twist(types, 0.3, 0.0)) == (0.3, 0.0)
    with pytest.raises(InputError, match="cmd_vel"):
        command_from_twist(twist(types, float("nan"), 0.0))


# --- the simulator loop ---------------------------------------------------------------------------------------------
def test_command_is_held_then_stopped_after_the_timeout(types, typestore):
    from mnemo_mpc.ros.sim_adapter import SimAdapter

    params = SimNodeParams(sim_rate_hz=20.0, cmd_timeout_s=0.5, publish_plan=False)
    sim = SimAdapter(params, types, world=hall(goal=(3.0, 1.5, 0.0)))
    try:
        out = sim.step()  # no command yet: the robot stays
        assert out.time_s == pytest.approx(0.05) and sim.obs.pose[0] == pytest.approx(1.0, abs=1e-6)
        sim.on_cmd_vel(twist(types, 0.4, 0.0))
        for _ in range(10):  # 0.5 s: held
            out = sim.step()
        assert out.odom.twist.twist.linear.x == pytest.approx(0.4, abs=0.01)
        assert sim.obs.pose[0] == pytest.approx(1.2, abs=0.01)
        events = []
        for _ in range(4):  # past the timeout: stopped, reported once
            events += sim.step().events
        assert sim.command() == (0.0, 0.0) and sim.obs.velocity[0] == pytest.approx(0.0, abs=1e-3)
        assert len([e for e in events if "cmd_vel older than" in e]) == 1
        grid = typestore.deserialize_cdr(
            typestore.serialize_cdr(out.grid, "nav_msgs/msg/OccupancyGrid"), "nav_msgs/msg/OccupancyGrid"
        )
        assert (grid.info.width, grid.info.height) == (120, 120) and grid.header.frame_id == "odom"
        assert out.scan.header.frame_id == "base_link" and out.clock.clock.nanosec == out.odom.header.stamp.nanosec
        for _ in range(6):  # 21 steps of 0.05 s so far -> 1.05 s; stamps are exact, whole seconds included
            out = sim.step()
        assert (out.clock.clock.sec, out.clock.clock.nanosec) == (1, 50_000_000)
        stamps = []
        for _ in range(60):  # through 2.0 and 3.0 s: never a second lost to rounding (stamps strictly increase)
            out = sim.step()
            stamps.append(out.odom.header.stamp.sec + out.odom.header.stamp.nanosec * 1e-9)
        assert np.all(np.diff(stamps) > 0.049) and stamps[-1] == pytest.approx(4.05)
    finally:
        sim.close()


def test_collision_and_goal_events_and_exit_codes(types):
    from mnemo_mpc.ros.sim_adapter import SimAdapter

    # A wall 0.5 m ahead of the robot's front: driving on collides, once.
    params = SimNodeParams(publish_plan=False, time_limit_s=2.0)
    sim = SimAdapter(params, types, world=hall(wall_x=2.0, start=(1.3, 1.5, 0.0), goal=(1.0, 0.8, 0.0)))
    try:
        outs = []
        for _ in range(40):
            sim.on_cmd_vel(twist(types, 0.5, 0.0))
            outs.append(sim.step())
        events = [e for o in outs for e in o.events]
        assert len([e for e in events if e.startswith("collision at")]) == 1 and sim.collisions == 1
        assert outs[-1].exit_code == 1 and "time limit 2.0 s reached" in events[-1]
    finally:
        sim.close()

    # The goal 0.5 m ahead: reached within the 0.25 m tolerance; exit_on_goal asks for status 0.
    params = SimNodeParams(exit_on_goal=True, publish_plan=True)
    sim = SimAdapter(params, types, world=hall())
    try:
        assert sim.path_msg() is not None and sim.goal_msg().pose.position.x == pytest.approx(1.5)
        out = None
        for _ in range(40):
            sim.on_cmd_vel(twist(types, 0.4, 0.0))
            out = sim.step()
            if out.exit_code is not None:
                break
        assert out.exit_code == 0 and any(e.startswith("goal reached at t=") for e in out.events)
        s = sim.summary()
        assert s["success"] and s["time_to_goal_s"] == pytest.approx(0.65, abs=0.06) and s["collisions"] == 0
        assert s["first_command_s"] == 0.0 and s["final_dist_to_goal_m"] <= 0.25
    finally:
        sim.close()


# --- robot profile --------------------------------------------------------------------------------------------------
def test_robot_params_give_the_simulator_the_profiles_body_lidar_and_world(types, tmp_path):
    """One file drives planner and simulator (issue 10 item 1): `robot_params` gives the simulated robot the Jackal's
    footprint, its 10 m lidar and 6 m window, and the world `mnemo-mpc demo --params` drives."""
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.resources import share_file
    from mnemo_mpc.ros.sim_adapter import SimAdapter
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.robot import diff_drive_config
    from mnemo_mpc.sim.worlds import generate_world

    jackal = share_file("config", "robots/jackal.yaml")
    params = SimNodeParams.from_dict({"world_seed": 1003, "robot_params": str(jackal), "sim_rate_hz": 25})
    sim = SimAdapter(params, types)
    try:
        nav = NavParams.from_yaml(jackal)
        robot = nav.robot_model()
        assert sim.robot == robot
        cfg = sim.sim.config
        assert cfg.robot == diff_drive_config(robot)
        assert cfg.lidar.range_max_m == nav.sensor_range_m == 10.0
        assert cfg.local_grid.size_m == closed_loop_setup(robot).sim.local_grid.size_m
        assert sim.step_s == 0.04 and sim.substeps == 10  # exactly 25 Hz, in ten 250 Hz physics substeps
        assert sim.sim.config.physics_hz == pytest.approx(250.0)
        demo_world = generate_world(1003, closed_loop_setup(robot).world)
        assert np.array_equal(sim.world.grid.data, demo_world.grid.data)
        assert np.allclose(sim.world.start, demo_world.start) and np.allclose(sim.world.goal, demo_world.goal)
    finally:
        sim.close()
    with pytest.raises(InputError, match="parameter robot_params: no file"):
        SimNodeParams.from_dict({"robot_params": str(tmp_path / "none.yaml")}).robot_profile()
    bad = tmp_path / "bad.yaml"
    bad.write_text("/**:\n  ros__parameters:\n    v_max: -1.0\n")
    with pytest.raises(InputError, match="parameter robot_params: .*v_max"):
        SimNodeParams.from_dict({"robot_params": str(bad)}).robot_profile()


def test_with_a_map_frame_goal_and_plan_are_the_worlds_and_tf_carries_the_localisers_estimate(types, typestore):
    from mnemo_mpc.ros.sim_adapter import SimAdapter
    from mnemo_mpc.ros.sim_convert import make_tf_message
    from mnemo_mpc.ros.transforms import TransformBuffer

    with pytest.raises(InputError, match="parameter map_frame_id: expected a frame other than frame_id"):
        SimNodeParams(map_frame_id="odom")
    params = SimNodeParams(sim_rate_hz=20.0, map_frame_id="map", realism="harsh")  # odometry drifts
    sim = SimAdapter(params, types, world=hall(goal=(3.0, 1.5, 0.5)))
    t = typestore.types
    try:
        sim.on_cmd_vel(twist(types, 0.4, 0.3))
        fixes = []
        for _ in range(120):
            out = sim.step()
            fixes.append(sim.obs.map_from_odom.copy())
        assert out.frame_changed is False  # goal and plan are not re-sent: /tf carries the localiser's fixes
        assert np.ptp(np.array(fixes), axis=0).max() > 1e-3, "the harsh robot's odometry should have drifted"
        goal, path = sim.goal_msg(), sim.path_msg()
        assert goal.header.frame_id == "map" and path.header.frame_id == "map"
        assert goal.pose.position.x == 3.0 and goal.pose.position.y == 1.5
        msg = make_tf_message(
            t["tf2_msgs/msg/TFMessage"],
            t["geometry_msgs/msg/TransformStamped"],
            t["geometry_msgs/msg/Transform"],
            types,
            out.transforms,
        )
        back = typestore.deserialize_cdr(
            typestore.serialize_cdr(msg, "tf2_msgs/msg/TFMessage"), "tf2_msgs/msg/TFMessage"
        )
        assert [(x.header.frame_id, x.child_frame_id) for x in back.transforms] == [
            ("map", "odom"),
            ("odom", "base_link"),
        ]
        stamps = [x.header.stamp.sec + 1e-9 * x.header.stamp.nanosec for x in back.transforms]
        assert stamps == pytest.approx([out.time_s + 1.0, out.time_s])  # the localiser's post-dated, as AMCL's
        buf = TransformBuffer()
        assert buf.add_message(back) == []
        map_to_odom = buf.lookup("odom", "map")  # the latest: the localiser's
        in_odom = map_to_odom.apply_pose(np.array([3.0, 1.5, 0.5]))
        np.testing.assert_allclose(in_odom, sim.sim.to_odom(np.array([3.0, 1.5, 0.5])), atol=1e-6)
        base = buf.lookup("odom", "base_link")
        robot = map_to_odom.inverse().compose(base).apply_pose(np.zeros(3))  # the localiser's robot pose in map
        np.testing.assert_allclose(robot[:2], sim.sim.to_map(sim.obs.pose)[:2], atol=1e-6)
    finally:
        sim.close()
