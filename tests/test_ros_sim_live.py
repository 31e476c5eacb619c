"""Closed loop over DDS: the simulator node (PyBullet) and the planner node as separate processes under real rclpy
(ROS 2 Jazzy wheels, Fast DDS), on simulated time (/clock), must drive a generated world's robot to its goal.

Isolated from other DDS traffic: a claimed ROS_DOMAIN_ID, discovery limited to localhost, logs in a temporary folder.
The simulator node exits 0 at the goal (`exit_on_goal`) and 1 at its simulated time limit, and writes a summary.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("rclpy", reason="ROS 2 Jazzy rclpy wheels: pip install 'ros-jazzy-rclpy[fastrtps]'")
pytest.importorskip("rosgraph_msgs", reason="ROS 2 Jazzy rosgraph_msgs wheel (the .[ros] extra)")

# (seed, simulated-time limit): world 45 is open, 5.0 m of global path, 12.5 s in `mnemo-mpc demo --seed 45`;
# world 7 (rooms, the demo's default) has 13.7 m and takes 34.4 s there.
SHORT_WORLD = (45, 40.0)
LONG_WORLD = (7, 90.0)


@pytest.fixture
def ros_env(tmp_path):
    from mnemo_mpc.ros.sim_launch import isolated_env

    return isolated_env(tmp_path / "ros_log")


def closed_loop(env: dict, tmp_path: Path, seed: int, time_limit_s: float, rtf: float, wall_limit_s: float):
    from mnemo_mpc.ros.sim_launch import run_closed_loop

    sim = {"world_seed": seed, "time_limit_s": time_limit_s, "real_time_factor": rtf, "exit_on_goal": True}
    return run_closed_loop(tmp_path / "run", sim, wall_limit_s=wall_limit_s, env=env)


def check_reached(run, time_limit_s):
    s = run.summary
    tail = f"\n--- sim ---\n{run.sim_log[-3000:]}\n--- nav ---\n{run.nav_log[-3000:]}"
    assert run.sim_code == 0, f"simulator exit status {run.sim_code} (1: time limit, None: wall limit){tail}"
    assert s is not None and s["success"], tail
    assert s["collisions"] == 0, tail
    assert s["time_to_goal_s"] < time_limit_s
    assert s["final_dist_to_goal_m"] <= s["goal_tolerance_m"]
    assert "goal reached at t=" in run.sim_log
    assert run.nav_code == 0, f"planner exit status {run.nav_code} after SIGINT{tail}"
    for name, text in (("sim", run.sim_log), ("nav", run.nav_log)):
        assert "Traceback" not in text, f"{name}:{tail}"


def test_short_world_reaches_the_goal_over_dds(ros_env, tmp_path):
    seed, limit = SHORT_WORLD
    run = closed_loop(ros_env, tmp_path, seed, limit, rtf=2.0, wall_limit_s=90)
    check_reached(run, limit)
    assert run.summary["world"] == "open-45"
    assert run.summary["first_command_s"] < 1.0  # simulated time started when the planner was up


def test_a_jackal_at_2_m_s_runs_both_nodes_at_25_hz_over_dds(ros_env, tmp_path):
    """One profile drives both nodes (issue 10 items 1 and 3): the planner with the Jackal's params file at its
    25 Hz, the simulator with the same file as `robot_params` (its body, lidar and world) stepping at 25 Hz."""
    from mnemo_mpc.resources import share_file
    from mnemo_mpc.ros.sim_launch import run_closed_loop

    jackal = share_file("config", "robots/jackal.yaml")
    sim = {"world_seed": 19, "time_limit_s": 30.0, "real_time_factor": 1.0, "exit_on_goal": True}
    sim.update(sim_rate_hz=25.0)
    run = run_closed_loop(tmp_path / "run", sim, wall_limit_s=90, env=ros_env, params_file=jackal)
    check_reached(run, 30.0)
    assert run.summary["world"] == "corridor-19"  # generated for the Jackal, as `demo --seed 19 --params` drives it
    # The planner runs at the profile's rate, not the default 10 Hz (a loose floor: the machine is shared; the rate
    # itself is measured by `mnemo-mpc dds-loop --params`: 25.0 Hz)
    assert run.summary["command_rate_hz"] > 12.5, run.nav_log[-3000:]
    assert "25 Hz" in run.nav_log


@pytest.mark.slow
def test_long_world_reaches_the_goal_over_dds(ros_env, tmp_path):
    seed, limit = LONG_WORLD
    run = closed_loop(ros_env, tmp_path, seed, limit, rtf=1.0, wall_limit_s=180)
    check_reached(run, limit)
    assert run.summary["world"] == "rooms-7"


def test_bad_parameter_is_one_line_and_exit_2(ros_env):
    proc = subprocess.run(
        [sys.executable, "-m", "mnemo_mpc.ros.sim_node", "--ros-args", "-p", "sim_rate_hz:=-5"],
        env=ros_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "pybullet build time" not in ln]
    assert lines == ["mnemo_mpc_sim: error: parameter sim_rate_hz: expected > 0, got -5.0"], proc.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signals_exit_0(ros_env, tmp_path, sig):
    result = tmp_path / "result.json"
    log = (tmp_path / "sim.log").open("w+")
    proc = subprocess.Popen(
        [sys.executable, "-m", "mnemo_mpc.ros.sim_node", "--ros-args", "-p", "world_seed:=45"]
        + ["-p", f"result_file:={result}"],
        env=ros_env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and "waiting for a 'cmd_vel' publisher" not in log_text(log):
        time.sleep(0.1)
        assert proc.poll() is None, log_text(log)
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 0, log_text(log)
    assert "Traceback" not in log_text(log)
    assert json.loads(result.read_text())["summary"]["sim_time_s"] == 0.0  # no planner: time held at 0


def log_text(f) -> str:
    f.flush()
    f.seek(0)
    return f.read()


def test_follow_path_in_map_through_tf_reaches_the_goal_within_both_tolerances(nav2_interfaces, tmp_path):
    """Issue 29: the simulator publishes its goal and path in `map` and /tf map -> odom (its localiser's estimate of
    the Jackal's drifting odometry) -> base_link; a FollowPath client sends the path in `map`; the planner expresses
    it in odom through /tf and ends SUCCEEDED within xy_goal_tolerance and yaw_goal_tolerance."""
    from mnemo_mpc.resources import share_file
    from mnemo_mpc.ros.sim_launch import run_closed_loop

    sim = {"world_seed": 45, "time_limit_s": 40.0, "real_time_factor": 2.0, "map_frame_id": "map", "sim_rate_hz": 25.0}
    nav = {"yaw_goal_tolerance": 0.25}
    jackal = share_file("config", "robots/jackal.yaml")
    run = run_closed_loop(
        tmp_path / "run", sim, nav, wall_limit_s=120, env=nav2_interfaces, params_file=jackal, interface="action"
    )
    s = run.summary or {}
    logs = (("client", run.client_log, 2000), ("nav", run.nav_log, 3000), ("sim", run.sim_log, 1500))
    tail = "".join(f"\n--- {name} ---\n{text[-n:]}" for name, text, n in logs)
    assert run.client_code == 0, f"FollowPath client exit {run.client_code} (0: SUCCEEDED){tail}"
    assert s.get("collisions") == 0, tail
    assert s["final_dist_to_goal_m"] <= 0.25 + 0.05, tail  # the planner's xy tolerance on its drifting odometry
    assert abs(s["final_heading_error_rad"]) <= 0.25 + 0.05, tail
    assert "no transform" not in run.nav_log and "dropped tf" not in run.nav_log, tail
    assert "reached (reached: xy error" in run.nav_log, tail
    for name, text in (("sim", run.sim_log), ("nav", run.nav_log), ("client", run.client_log)):
        assert "Traceback" not in text, f"{name}:{tail}"
