"""The planner's FollowPath action server (nav2_msgs/action/FollowPath, `node.py`, semantics in
`mnemo_mpc/ros/follow_path.py`) driven over DDS by an rclpy ActionClient, as Nav2's bt_navigator drives a controller
server: a path is followed to SUCCEEDED with feedback, a cancel ramps the robot to rest within the acceleration
limits and ends CANCELED, and a new goal preempts the running one (ABORTED, error NONE) without a stop.

nav2_msgs is built from the shipped definitions (`nav2_interfaces`, tests/conftest.py); its environment must be set
before Python starts, so the client runs as a subprocess: this file run as a script (`client_main`). It plays the
kinematic robot of tests/test_ros_node_live.py (`LiveNode`: odometry from integrating cmd_vel, a free local grid),
which starts the planner node as its own subprocess, sends the goals, and prints one JSON line of what it saw; the
tests judge it. Isolated as the other live tests: a claimed ROS_DOMAIN_ID, discovery limited to localhost, logs in a
temporary folder; waits are on received messages, never fixed sleeps.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy", reason="ROS 2 Jazzy rclpy wheels: pip install 'ros-jazzy-rclpy[fastrtps]'")

from test_ros_node_live import STARTUP_S, LiveNode, assert_within_limits  # noqa: E402

from mnemo_mpc.planning.robot import RobotModel  # noqa: E402
from mnemo_mpc.profile import NavParams  # noqa: E402
from mnemo_mpc.ros.sim_launch import claim_domain_id  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SUCCEEDED, CANCELED, ABORTED = 4, 5, 6  # action_msgs/GoalStatus
PARAMS = NavParams()  # the node runs with its defaults: 10 Hz, goal tolerance 0.2 m
PATH_SPACING_M = 0.05  # poses as dense as a Nav2 planner's
MOVING_S = 0.5  # the robot drives this long before the cancel or the preemption
GOAL_TIMEOUT_S = 40.0


# --- the client: this file run as a script, with nav2_msgs importable ------------------------------------------------
def path_points(start, end, bend: float = 0.0) -> np.ndarray:
    """(K, 3) poses from `start` to `end` every ~PATH_SPACING_M, bowed sideways by `bend` metres in the middle, each
    headed along the path."""
    start, end = np.asarray(start, dtype=float), np.asarray(end, dtype=float)
    along = end - start
    n = max(2, int(math.ceil(np.hypot(*along) / PATH_SPACING_M)) + 1)
    s = np.linspace(0.0, 1.0, n)
    normal = np.array([-along[1], along[0]]) / np.hypot(*along)
    xy = start + s[:, None] * along + (bend * np.sin(np.pi * s))[:, None] * normal
    heading = np.arctan2(*np.diff(xy, axis=0)[:, ::-1].T)
    return np.column_stack([xy, np.append(heading, heading[-1])])


class ActionGoal:
    """One FollowPath goal sent by the client: its feedback, result and the (monotonic) times they came."""

    def __init__(self, live: LiveNode, client, points: np.ndarray, frame: str = "odom", map_from_odom=None) -> None:
        """`points` in odom; sent in `frame`, through `map_from_odom` (x, y, yaw of odom in map) when that is map."""
        from geometry_msgs.msg import PoseStamped
        from nav2_msgs.action import FollowPath

        goal = FollowPath.Goal(
            controller_id="FollowPath", goal_checker_id="general_goal_checker", progress_checker_id="progress_checker"
        )
        goal.path.header.frame_id = frame
        goal.path.header.stamp = live.node.get_clock().now().to_msg()
        for x, y, yaw in points if map_from_odom is None else to_map(points, map_from_odom):
            pose = PoseStamped()
            pose.header = goal.path.header
            pose.pose.position.x, pose.pose.position.y = float(x), float(y)
            pose.pose.orientation.z, pose.pose.orientation.w = math.sin(yaw / 2), math.cos(yaw / 2)
            goal.path.poses.append(pose)
        self.live, self.end = live, points[-1, :2].tolist()
        self.end_yaw = float(points[-1, 2])
        self.feedback: list[tuple[float, float, float]] = []  # (time, distance_to_goal, speed)
        self.sent_s = time.monotonic()
        self.sending = client.send_goal_async(goal, feedback_callback=self._on_feedback)
        self.handle = self.result = None
        length = float(np.sum(np.hypot(*np.diff(points[:, :2], axis=0).T)))
        self.record: dict = {"end": self.end, "end_yaw": self.end_yaw, "length": length, "sent_s": self.sent_s}

    def _on_feedback(self, msg) -> None:
        self.feedback.append((time.monotonic(), float(msg.feedback.distance_to_goal), float(msg.feedback.speed)))

    def accepted(self) -> None:
        assert self.live.spin(10.0, until=self.sending.done), "no goal response"
        self.handle = self.sending.result()
        self.record["accepted"] = bool(self.handle.accepted)
        assert self.handle.accepted, "goal rejected"
        self.result = self.handle.get_result_async()

    def finished(self, timeout_s: float = GOAL_TIMEOUT_S) -> None:
        assert self.live.spin(timeout_s, until=self.result.done), f"no result within {timeout_s} s"
        # rclpy's executor runs a ready action client before ready subscriptions: take the commands that came with
        # the result (the node publishes a tick's command before it ends a goal) before noting its time.
        for _ in range(10):
            self.live.executor.spin_once(timeout_sec=0.0)
        r = self.result.result()
        self.record.update(
            status=r.status,
            error_code=r.result.error_code,
            error_msg=r.result.error_msg,
            done_s=time.monotonic(),
            pose=self.live.pose.tolist(),
        )

    def summary(self) -> dict:
        return {**self.record, "feedback": self.feedback}


def moving_for(live: LiveNode, seconds: float):
    """A condition: the robot has been commanded forward for `seconds`."""

    def condition() -> bool:
        moving = [t for t, v, _ in live.commands if v > 0]
        return bool(moving) and time.monotonic() - moving[0] >= seconds

    return condition


def drive_to_the_end(live: LiveNode, client, out: dict) -> None:
    goal = ActionGoal(live, client, path_points([0.0, 0.0], [1.5, 0.3], bend=0.1))
    goal.accepted()
    goal.finished()
    live.spin(0.5, until=lambda: False)  # the robot at rest: nothing more is published
    out["goal"] = goal.summary()


def cancel_while_moving(live: LiveNode, client, out: dict) -> None:
    goal = ActionGoal(live, client, path_points([0.0, 0.0], [3.0, 0.0]))
    goal.accepted()
    assert live.spin(20.0, until=moving_for(live, MOVING_S)), "the robot never moved"
    out["cancel_s"] = time.monotonic()
    canceling = goal.handle.cancel_goal_async()
    assert live.spin(10.0, until=canceling.done), "no cancel response"
    out["cancel_answered_s"] = time.monotonic()
    out["cancel_return_code"] = canceling.result().return_code
    goal.finished(10.0)
    live.spin(1.0, until=lambda: False)  # the node idles: no command after the ramp
    out["goal"] = goal.summary()


def preempt_while_moving(live: LiveNode, client, out: dict) -> None:
    first = ActionGoal(live, client, path_points([0.0, 0.0], [3.0, 0.0]))
    first.accepted()
    assert live.spin(20.0, until=moving_for(live, MOVING_S)), "the robot never moved"
    second = ActionGoal(live, client, path_points(live.pose[:2], [1.6, 0.4]))
    out["preempt_s"] = second.sent_s
    second.accepted()
    first.finished(10.0)
    second.finished()
    live.spin(0.5, until=lambda: False)
    out["first"], out["second"] = first.summary(), second.summary()


MAP_FROM_ODOM = (2.0, -1.0, 0.6)  # where odom lies in map (a localiser's map -> odom), far from identity
END_YAW = 1.2  # the path's last pose turned off its direction: the goal checker must turn the robot to it


def to_map(points: np.ndarray, map_from_odom) -> np.ndarray:
    x, y, yaw = map_from_odom
    c, s_ = math.cos(yaw), math.sin(yaw)
    px, py = points[:, 0], points[:, 1]
    return np.column_stack([x + c * px - s_ * py, y + s_ * px + c * py, points[:, 2] + yaw])


def follow_a_path_in_map(live: LiveNode, client, out: dict) -> None:
    """TF as a robot with a localiser has it: /tf_static map -> odom (latched) and /tf odom -> base_link from the
    odometry; the path sent in map, its end turned to END_YAW."""
    from geometry_msgs.msg import TransformStamped
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from tf2_msgs.msg import TFMessage

    def transform(parent: str, child: str, x: float, y: float, yaw: float) -> TransformStamped:
        t = TransformStamped()
        t.header.frame_id, t.child_frame_id = parent, child
        t.header.stamp = live.node.get_clock().now().to_msg()
        t.transform.translation.x, t.transform.translation.y = float(x), float(y)
        t.transform.rotation.z, t.transform.rotation.w = math.sin(yaw / 2), math.cos(yaw / 2)
        return t

    latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL, reliability=ReliabilityPolicy.RELIABLE)
    static_pub = live.node.create_publisher(TFMessage, "/tf_static", latched)
    static_pub.publish(TFMessage(transforms=[transform("map", "odom", *MAP_FROM_ODOM)]))
    tf_pub = live.node.create_publisher(TFMessage, "/tf", 10)
    live.node.create_timer(
        0.05, lambda: tf_pub.publish(TFMessage(transforms=[transform("odom", "base_link", *live.pose)]))
    )
    points = path_points([0.0, 0.0], [1.5, 0.3], bend=0.1)
    points[-1, 2] = END_YAW
    goal = ActionGoal(live, client, points, frame="map", map_from_odom=MAP_FROM_ODOM)
    goal.accepted()
    goal.finished()
    live.spin(0.5, until=lambda: False)
    out["goal"] = goal.summary()


SCENARIOS = {
    "goal": drive_to_the_end,
    "cancel": cancel_while_moving,
    "preempt": preempt_while_moving,
    "map": follow_a_path_in_map,
}
SCENARIO_ARGS = {"map": ["-p", "yaw_goal_tolerance:=0.25"]}  # Nav2's default: the heading is required


def client_main(scenario: str, folder: str) -> None:
    """Run `scenario` against a planner node of its own; print one JSON line (the failure, if any, under 'error')."""
    from nav2_msgs.action import FollowPath
    from rclpy.action import ActionClient

    live = LiveNode(dict(os.environ), Path(folder), args=SCENARIO_ARGS.get(scenario, []))
    out: dict = {}
    try:
        client = ActionClient(live.node, FollowPath, "/follow_path")
        live.wait_ready()
        assert live.spin(STARTUP_S, until=client.server_is_ready), "no follow_path action server"
        SCENARIOS[scenario](live, client, out)
    except AssertionError:
        out["error"] = traceback.format_exc()
    finally:
        out["rc"] = live.stop()
    out["commands"] = live.commands
    out["pose"] = live.pose.tolist()
    out["log"] = live.text()
    print(json.dumps(out))


# --- the tests --------------------------------------------------------------------------------------------------------
def run_client(env: dict[str, str], tmp_path: Path, scenario: str) -> dict:
    """Run the client script for `scenario` (its planner node with it) in an isolated domain; its JSON, checked for a
    clean run and a clean node exit."""
    env = {
        **env,
        "ROS_DOMAIN_ID": str(claim_domain_id()),
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
        "ROS_LOG_DIR": str(tmp_path / "ros_log"),
        # this checkout's mnemo_mpc, for the script (its own folder comes first) and the node it starts
        "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
    }
    proc = subprocess.run(
        [sys.executable, __file__, scenario, str(tmp_path)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=STARTUP_S + 3 * GOAL_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    log = out["log"]
    assert "error" not in out, f"{out['error']}\nnode log:\n{log[-3000:]}"
    assert out["rc"] == 0 and "Traceback" not in log, log[-3000:]
    out["commands"] = np.array(out["commands"]).reshape(-1, 3)  # (time, v, w)
    assert_within_limits(out["commands"][:, 1:], PARAMS.control_rate_hz)  # every command, the ramps too
    return out


def assert_reached(goal: dict, commands: np.ndarray) -> None:
    """SUCCEEDED with NONE once at rest (the zero command came before the result, nothing after it), at the path's
    end (within the node's goal tolerance), with feedback on the way."""
    assert (goal["status"], goal["error_code"], goal["error_msg"]) == (SUCCEEDED, 0, ""), goal
    before = commands[commands[:, 0] <= goal["done_s"]]
    assert np.all(before[-1, 1:] == 0.0), before[-3:]
    assert not np.any(commands[:, 0] > goal["done_s"]), commands[commands[:, 0] > goal["done_s"]]
    gap = np.hypot(*(np.array(goal["pose"][:2]) - goal["end"]))
    assert gap <= PARAMS.goal_tolerance_m, (goal["pose"], goal["end"])
    feedback = np.array(goal["feedback"]).reshape(-1, 3)  # (time, distance_to_goal, speed)
    assert len(feedback) >= 5, feedback
    distance, speed = feedback[:, 1], feedback[:, 2]
    assert np.all(np.isfinite(feedback)), feedback
    # Along the path from its nearest pose, plus the way to that pose: all of it at first, then shrinking (up to that
    # way, at most about half a spacing), to about the goal tolerance at the end
    assert distance[0] >= goal["length"] - 0.15, (distance, goal["length"])
    assert np.all(np.diff(distance) <= PATH_SPACING_M / 2 + 0.01), distance
    assert distance[-1] <= PARAMS.goal_tolerance_m + PATH_SPACING_M, distance
    assert np.all(speed >= 0.0) and np.all(speed <= PARAMS.v_max + 1e-6) and speed.max() > 0.2, speed


def test_a_path_is_followed_to_its_end_with_feedback(nav2_interfaces, tmp_path):
    out = run_client(nav2_interfaces, tmp_path, "goal")
    assert_reached(out["goal"], out["commands"])


def test_a_cancel_ramps_to_rest_within_the_limits_then_ends_canceled(nav2_interfaces, tmp_path):
    out = run_client(nav2_interfaces, tmp_path, "cancel")
    goal = out["goal"]
    assert out["cancel_return_code"] == 0  # ERROR_NONE: the server took the cancel
    assert (goal["status"], goal["error_code"]) == (CANCELED, 0), goal
    cmds = out["commands"]
    before = cmds[cmds[:, 0] < out["cancel_s"]]
    after = cmds[cmds[:, 0] >= out["cancel_answered_s"]]
    assert before[-1, 1] > 0.2, before[-5:]  # it was driving
    # The ramp: from the cancel on the speed only falls (the node takes it before the tick's command, as Nav2 does),
    # to a zero command that is the last one.
    assert np.all(np.diff(cmds[cmds[:, 0] >= out["cancel_s"]][:, 1]) <= 1e-9), after
    assert np.all(after[-1, 1:] == 0.0) and np.count_nonzero(np.all(after[:, 1:] == 0.0, axis=1)) == 1, after
    ramp_s = before[-1, 1] / RobotModel().a_max  # as fast as the limits allow, and a tick or so of latency
    assert after[-1, 0] - out["cancel_answered_s"] <= ramp_s + 0.5, after
    assert after[-1, 0] <= goal["done_s"], (after[-1, 0], goal["done_s"])  # canceled once at rest, then silent
    assert np.hypot(*np.subtract(out["pose"][:2], goal["pose"][:2])) < 0.02  # and it stays there


def test_a_new_goal_preempts_the_running_one_without_a_stop(nav2_interfaces, tmp_path):
    out = run_client(nav2_interfaces, tmp_path, "preempt")
    first, second = out["first"], out["second"]
    # Nav2's preemption (node.py `_follow_path_accepted`): the running goal is aborted with NONE and says why ...
    assert (first["status"], first["error_code"]) == (ABORTED, 0), first
    assert first["error_msg"] == "preempted by a new FollowPath goal", first
    assert first["done_s"] - out["preempt_s"] < 2.0, first  # ... at once, not after the new goal ends
    assert_reached(second, out["commands"])  # ... and the new one followed to its own end
    # ... without a stop: the robot drives on through the first half second of the new goal.
    cmds = out["commands"]
    taking_over = cmds[(cmds[:, 0] >= out["preempt_s"]) & (cmds[:, 0] <= out["preempt_s"] + MOVING_S)]
    assert len(taking_over) >= 3 and np.all(taking_over[:, 1] > 0.0), taking_over
    assert np.hypot(*np.subtract(second["pose"][:2], first["end"])) > 1.0  # not at the first goal's end


if __name__ == "__main__":
    client_main(*sys.argv[1:])


def test_a_path_in_map_is_followed_through_tf_to_the_goals_position_and_heading(nav2_interfaces, tmp_path):
    """Issue 29: the path in `map`, /tf_static map -> odom offset by (2, -1, 0.6 rad) and /tf odom -> base_link from
    the test; the planner expresses the path in odom, reaches its end within xy_goal_tolerance and turns in place to
    its heading within yaw_goal_tolerance (0.25) before SUCCEEDED."""
    out = run_client(nav2_interfaces, tmp_path, "map")
    goal = out["goal"]
    assert_reached(goal, out["commands"])  # the end in odom: the transform was applied, not the map coordinates
    yaw_error = math.remainder(goal["pose"][2] - goal["end_yaw"], math.tau)
    assert abs(yaw_error) <= 0.25 + 1e-6, (goal["pose"], goal["end_yaw"])
    direction = path_points([0.0, 0.0], [1.5, 0.3], bend=0.1)[-2, 2]  # how the robot arrives
    assert abs(math.remainder(END_YAW - direction, math.tau)) > 0.9  # so reaching END_YAW took a turn in place
    assert "reached (reached: xy error" in out["log"] and "no transform" not in out["log"], out["log"][-3000:]
