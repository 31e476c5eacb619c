"""The simulated stack without `ros2 launch`: the simulator node and the planner node as two processes on simulated
time, isolated from other DDS traffic (a claimed `ROS_DOMAIN_ID`, localhost discovery, logs in the run folder).

What `nav.launch.py use_sim:=true` starts, for the closed-loop test and `mnemo-mpc dds-loop` where `launch` is not
installed. No rclpy import here: the nodes run as `python -m mnemo_mpc.ros.sim_node` / `mnemo_mpc.ros.node`.
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class ClosedLoopRun:
    """Exit statuses (None: still running at the wall limit, then stopped), the simulator's summary and both logs."""

    sim_code: int | None
    nav_code: int | None
    summary: dict[str, Any] | None
    sim_log: str
    nav_log: str
    wall_s: float  # from starting the processes to the simulator's exit (the client's, with the action interface)
    client_code: int | None = None  # the FollowPath client's exit status (interface "action"): 0 succeeded
    client_log: str = ""


# Linux's safe ROS_DOMAIN_ID range is 0..101 (higher ids can clash with ephemeral ports); 0 is everyone's default.
DOMAIN_IDS = range(1, 102)
# Claims a process holds at once: the oldest is released first, long after its run ended (a test, an episode).
MAX_HELD_CLAIMS = 24
_held_claims: deque[Any] = deque()


def claim_domain_id() -> int:
    """A ROS_DOMAIN_ID no other process on this machine holds: an exclusive lock on a file per id in the temporary
    folder, held by this process (the last MAX_HELD_CLAIMS claims). A random id alone collided: two pytest workers
    whose `random` state had been seeded alike (an experiment seeds it) joined one domain and drove each other's robots.
    """
    folder = Path(tempfile.gettempdir()) / "mnemo_mpc_ros_domains"
    folder.mkdir(exist_ok=True)
    ids = list(DOMAIN_IDS)
    random.SystemRandom().shuffle(ids)  # independent of the seeded global state
    for domain in ids:
        handle = open(folder / f"{domain}.lock", "a")  # noqa: SIM115 -- held open: the lock lives with it
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held_claims.append(handle)
        while len(_held_claims) > MAX_HELD_CLAIMS:
            _held_claims.popleft().close()
        return domain
    raise RuntimeError(f"every ROS_DOMAIN_ID in {DOMAIN_IDS.start}..{DOMAIN_IDS.stop - 1} is claimed under {folder}")


def isolated_env(log_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        ROS_DOMAIN_ID=str(claim_domain_id()),
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_LOG_DIR=str(log_dir),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    return env


def _ros_args(params: dict[str, Any]) -> list[str]:
    out = ["--ros-args"]
    for k, v in params.items():
        # rcl reads the value as YAML: an empty string must be written '' (`name:=` does not parse)
        value = str(v).lower() if isinstance(v, bool) else "''" if v == "" else v
        out += ["-p", f"{k}:={value}"]
    return out


def run_closed_loop(
    workdir: str | Path,
    sim_params: dict[str, Any],
    nav_params: dict[str, Any] | None = None,
    wall_limit_s: float = 120.0,
    env: dict[str, str] | None = None,
    params_file: str | Path | None = None,
    interface: str = "topic",
    planner_module: str = "mnemo_mpc.ros.node",
) -> ClosedLoopRun:
    """Run simulator + planner until the simulator exits (set `exit_on_goal` and `time_limit_s` in `sim_params`) or
    `wall_limit_s` passes; then SIGINT both. Both nodes get `use_sim_time:=true`; `params_file` (a robot profile or
    the planner's params YAML) goes to the planner as `--params-file` and to the simulator as `robot_params`, as
    `nav.launch.py` passes its `params_file`.

    `interface` "action": the planner takes its goal from Nav2's FollowPath action, sent by a third process
    (`follow_path_client`, the simulator's goal and path) instead of the goal and path topics (remapped away from the
    planner); the run ends when the client has its result (the simulator then runs on past the goal). Needs nav2_msgs
    in `env` (`mnemo-mpc ros-interfaces`)."""
    if interface not in ("topic", "action"):
        raise ValueError(f"interface: expected 'topic' or 'action', got {interface!r}")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = workdir / "sim_result.json"
    result.unlink(missing_ok=True)
    env = isolated_env(workdir / "ros_log", env)
    profile = {} if params_file is None else {"robot_params": str(Path(params_file).resolve())}
    sim_args = _ros_args({**profile, **sim_params, "result_file": str(result), "use_sim_time": True})
    unheard = {"goal_topic": "goal_pose_unused", "path_topic": "plan_unused"} if interface == "action" else {}
    nav_args = _ros_args({**(nav_params or {}), **unheard, "use_sim_time": True})
    if params_file is not None:
        nav_args += ["--params-file", str(Path(params_file).resolve())]
    names = ("sim", "nav", "client") if interface == "action" else ("sim", "nav")
    logs = {name: (workdir / f"{name}.log").open("w+") for name in names}
    t0 = time.perf_counter()
    procs = {
        "sim": subprocess.Popen(
            [sys.executable, "-m", "mnemo_mpc.ros.sim_node", *sim_args],
            env=env,
            stdout=logs["sim"],
            stderr=subprocess.STDOUT,
        ),
        "nav": subprocess.Popen(
            [sys.executable, "-m", planner_module, *nav_args],
            env=env,
            stdout=logs["nav"],
            stderr=subprocess.STDOUT,
        ),
    }
    if interface == "action":
        procs["client"] = subprocess.Popen(
            [sys.executable, "-m", "mnemo_mpc.ros.follow_path_client", *_ros_args({"use_sim_time": True})],
            env=env,
            stdout=logs["client"],
            stderr=subprocess.STDOUT,
        )
    awaited = "client" if interface == "action" else "sim"
    try:
        first_code: int | None = procs[awaited].wait(timeout=wall_limit_s)
    except subprocess.TimeoutExpired:
        first_code = None
    finally:
        wall = time.perf_counter() - t0
        for proc in procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        codes = {}
        for name, proc in procs.items():
            try:
                codes[name] = proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                codes[name] = None
    text = {}
    for name, f in logs.items():
        f.seek(0)
        text[name] = f.read()
        f.close()
    summary = json.loads(result.read_text())["summary"] if result.is_file() else None
    # The awaited process's own exit status (None: still running at the wall limit); the others' after SIGINT.
    codes[awaited] = first_code
    return ClosedLoopRun(
        codes["sim"],
        codes["nav"],
        summary,
        text["sim"],
        text["nav"],
        round(wall, 3),
        codes.get("client"),
        text.get("client", ""),
    )


__all__ = ["ClosedLoopRun", "isolated_env", "run_closed_loop"]
