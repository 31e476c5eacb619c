"""`mnemo-mpc replay`: the node's logic over a rosbag2 written with real ROS2 definitions (rosbags)."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.cli import main as cli_main
from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.replay import replay_bag

rosbag2 = pytest.importorskip("rosbags.rosbag2", reason="rosbags reads and writes rosbag2")
typesys = pytest.importorskip("rosbags.typesys")


def write_bag(path, topics=("/local_costmap/costmap", "/odom", "/goal_pose"), seconds=1.0):
    store = typesys.get_typestore(typesys.Stores.ROS2_HUMBLE)
    types = convert.MessageTypes.from_rosbags("ROS2_HUMBLE")
    t = store.types
    data = np.zeros((80, 80), np.int8)
    data[45:55, 50:56] = 100
    grid = convert.make_grid_msg(types, OccupancyGrid(data, 0.05, (-2.0, -2.0, 0.0)), 0.0, "odom")
    goal = types.PoseStamped(header=convert.make_header(types, 0.0, "odom"), pose=convert.make_pose(types, 1.5, 0.8, 0))
    with rosbag2.Writer(path, version=9) as w:
        grid_c = w.add_connection(topics[0], grid.__msgtype__, typestore=store)
        odom_c = w.add_connection(topics[1], "nav_msgs/msg/Odometry", typestore=store)
        goal_c = w.add_connection(topics[2], goal.__msgtype__, typestore=store)
        w.write(grid_c, 1, store.serialize_cdr(grid, grid.__msgtype__))
        w.write(goal_c, 2, store.serialize_cdr(goal, goal.__msgtype__))
        for k in range(int(seconds * 20)):
            x = 0.01 * k
            odom = t["nav_msgs/msg/Odometry"](
                header=convert.make_header(types, k * 0.05, "odom"),
                child_frame_id="base_link",
                pose=t["geometry_msgs/msg/PoseWithCovariance"](
                    pose=convert.make_pose(types, x, 0.0, 0.0), covariance=np.zeros(36)
                ),
                twist=t["geometry_msgs/msg/TwistWithCovariance"](
                    twist=convert.make_twist(types, 0.1, 0.0), covariance=np.zeros(36)
                ),
            )
            w.write(odom_c, 10 + k * 50_000_000, store.serialize_cdr(odom, "nav_msgs/msg/Odometry"))
            if k % 4 == 3:  # a local costmap is republished at 5 Hz
                w.write(grid_c, 20 + k * 50_000_000, store.serialize_cdr(grid, grid.__msgtype__))
    return store


def test_replay_writes_the_commands_the_node_would_publish(tmp_path):
    store = write_bag(tmp_path / "in")
    summary = replay_bag(tmp_path / "in", tmp_path / "out")
    # the first tick (before the goal arrives) is idle and publishes nothing; every later one plans
    assert summary.statuses == {"idle": 1, "planned": summary.ticks - 1} and summary.ticks >= 9
    assert summary.commands_written == summary.ticks - 1
    assert summary.solve_ms["p50"] > 0 and summary.iterations["mean"] >= 1
    with rosbag2.Reader(tmp_path / "out") as r:
        topics = {c.topic: c for c in r.connections}
        assert set(topics) == {"/cmd_vel", "/local_plan"}
        cmds = [store.deserialize_cdr(raw, c.msgtype) for c, _, raw in r.messages(connections=[topics["/cmd_vel"]])]
    v = np.array([m.linear.x for m in cmds])
    assert len(cmds) == summary.commands_written and np.all(np.isfinite(v)) and np.all(v <= 0.5 + 1e-9)


def test_replay_cli_and_bad_inputs(tmp_path, capsys):
    write_bag(tmp_path / "in", topics=("/other_grid", "/odom", "/goal_pose"))
    with pytest.raises(InputError, match="no messages on .*/local_costmap/costmap"):
        replay_bag(tmp_path / "in", tmp_path / "out")
    assert not (tmp_path / "out").exists() and not (tmp_path / "out.partial").exists()
    with pytest.raises(InputError, match="not a rosbag2"):
        replay_bag(tmp_path, tmp_path / "out2")
    assert cli_main(["replay", str(tmp_path / "nope"), "--out", str(tmp_path / "o")]) == 2
    assert "not a rosbag2" in capsys.readouterr().err
