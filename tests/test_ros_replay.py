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


# --- a newcomer's path: the shipped sample, the installed distro, the record mode ----------------------------------
def sample_bag():
    from mnemo_mpc.resources import share_dir

    return share_dir("sim") / "bags" / "open_45"


def test_the_shipped_sample_bag_replays_end_to_end(tmp_path, capsys):
    """`mnemo-mpc replay sim/bags/open_45 --out OUT`: a short human summary, OUT (cmd_vel, local_plan), OUT.json and
    a figure OUT.png; the replayed commands are the recorded ones (the same planner on the same inputs)."""
    import json

    from mnemo_mpc.ros.distro import default_distro

    bag = sample_bag()
    assert sum(f.stat().st_size for f in bag.iterdir()) < 300_000  # shipped small
    out = tmp_path / "replayed"
    assert cli_main(["replay", str(bag), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    lines = text.strip().splitlines()
    assert lines[0].startswith(f"replayed {bag}: 13.7 s of bag, 138 ticks at 10 Hz") and len(lines) <= 8
    assert "statuses: planned" in text and "vs the bag's 136 recorded commands" in text and "{" not in text

    data = json.loads((tmp_path / "replayed.json").read_text())
    assert data["distro"] == default_distro() and data["ticks"] == 138 and data["recorded_commands"] == 136
    assert data["statuses"].get("planned", 0) >= 100 and data["commands_written"] >= 130
    diff = data["command_difference"]
    # Identical (~1e-12) on a quiet machine; a solve cut short by its wall-clock budget under load may differ a bit.
    assert diff["pairs"] >= 130 and diff["v_mean_abs"] < 0.01 and diff["w_mean_abs"] < 0.02, diff
    assert data["plot"] == str(tmp_path / "replayed.png") and "trace" not in data
    with rosbag2.Reader(out) as r:
        counts = {c.topic: c.msgcount for c in r.connections}
    assert counts["/cmd_vel"] == data["commands_written"] and counts["/local_plan"] >= 100

    png = tmp_path / "replayed.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000
    import matplotlib.image

    img = matplotlib.image.imread(png)[..., :3]
    ink = np.any(img < 0.9, axis=-1)  # anything but the white background
    colours = np.unique((img * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert img.shape[0] > 400 and img.shape[1] > 800 and ink.mean() > 0.03 and len(colours) > 50


def test_the_default_distro_follows_the_installed_ros(monkeypatch, capsys):
    from importlib import metadata

    from mnemo_mpc.ros import distro

    monkeypatch.setenv("ROS_DISTRO", "humble")
    assert distro.default_distro() == "ROS2_HUMBLE"
    monkeypatch.setenv("ROS_DISTRO", "jazzy")
    assert distro.installed_distro() == ("ROS2_JAZZY", "ROS_DISTRO=jazzy")
    monkeypatch.delenv("ROS_DISTRO")
    try:
        metadata.version("ros-jazzy-rclpy")
        assert distro.default_distro() == "ROS2_JAZZY"  # this environment's .[ros] wheels
    except metadata.PackageNotFoundError:
        pass
    real = metadata.version

    def only(name):
        def version(dist):
            if dist == name:
                return "1.0"
            raise metadata.PackageNotFoundError(dist)

        return version

    monkeypatch.setattr(metadata, "version", only("ros-humble-rclpy"))
    assert distro.installed_distro() == ("ROS2_HUMBLE", "installed wheel ros-humble-rclpy")
    monkeypatch.setattr(metadata, "version", only("nothing"))
    assert distro.default_distro() == distro.FALLBACK == "ROS2_JAZZY"
    monkeypatch.setattr(metadata, "version", real)
    # --help states the default it found
    assert cli_main(["replay", "--help"]) == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert f"(default: the installed ROS 2's: {distro.default_distro()}, from " in help_text


def test_record_a_bag_from_the_simulator_and_replay_it(tmp_path, capsys):
    from mnemo_mpc.ros.distro import default_distro
    from mnemo_mpc.ros.record import record_sim_bag

    s = record_sim_bag(tmp_path / "rec", seconds=1.0)
    # 1 s at 10 Hz: the first observation and ten steps; a command each tick from 0 to 1 s
    assert s["messages"] == {"/odom": 11, "/local_costmap/costmap": 11, "/goal_pose": 1, "/plan": 1, "/cmd_vel": 11}
    # rosbag2 names its storage after the folder; nothing left of the partial one
    assert sorted(p.name for p in (tmp_path / "rec").iterdir()) == ["metadata.yaml", "rec.db3"]
    assert not (tmp_path / "rec.partial").exists() and s["distro"] == default_distro()
    summary = replay_bag(tmp_path / "rec", tmp_path / "out")
    assert summary.recorded_commands == 11 and summary.command_difference["pairs"] == 11
    diff = summary.command_difference  # the same planner on the same inputs (a loaded machine: see above)
    assert diff["v_mean_abs"] < 0.02 and diff["w_mean_abs"] < 0.05, diff
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["metadata.yaml", "out.db3"]
    # record-only and replay-only flags, and a bag in either mode, are one-line errors
    for argv, message in (
        (["replay", "--record", str(tmp_path / "r2"), str(tmp_path / "rec")], "drop the input bag"),
        (["replay", "--record", str(tmp_path / "r2"), "--out", str(tmp_path / "o2")], "--out: only for replaying"),
        (["replay", str(tmp_path / "rec"), "--out", str(tmp_path / "o2"), "--seed", "3"], "--seed: only with --record"),
        (["replay", str(tmp_path / "rec")], "--out: expected"),
        (["replay", "--record", str(tmp_path / "rec")], "exists"),
    ):
        assert cli_main(argv) == 2, argv
        assert message in capsys.readouterr().err, argv
