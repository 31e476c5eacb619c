"""The simulated stack without `ros2 launch`: the simulator node and the planner node as two processes on simulated
time, isolated from other DDS traffic (a random `ROS_DOMAIN_ID`, localhost discovery, logs in the run folder).

What `nav.launch.py use_sim:=true` starts, for the closed-loop test and `mnemo-mpc dds-loop` where `launch` is not
installed. No rclpy import here: the nodes run as `python -m mnemo_mpc.ros.sim_node` / `mnemo_mpc.ros.node`.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
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
    wall_s: float  # from starting the processes to the simulator's exit


def isolated_env(log_dir: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update(
        ROS_DOMAIN_ID=str(random.randint(1, 200)),
        ROS_AUTOMATIC_DISCOVERY_RANGE="LOCALHOST",
        ROS_LOG_DIR=str(log_dir),
        OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
    )
    return env


def _ros_args(params: dict[str, Any]) -> list[str]:
    out = ["--ros-args"]
    for k, v in params.items():
        out += ["-p", f"{k}:={str(v).lower() if isinstance(v, bool) else v}"]
    return out


def run_closed_loop(
    workdir: str | Path,
    sim_params: dict[str, Any],
    nav_params: dict[str, Any] | None = None,
    wall_limit_s: float = 120.0,
    env: dict[str, str] | None = None,
    params_file: str | Path | None = None,
) -> ClosedLoopRun:
    """Run simulator + planner until the simulator exits (set `exit_on_goal` and `time_limit_s` in `sim_params`) or
    `wall_limit_s` passes; then SIGINT both. Both nodes get `use_sim_time:=true`; `params_file` (a robot profile or
    the planner's params YAML) goes to the planner as `--params-file` and to the simulator as `robot_params`, as
    `nav.launch.py` passes its `params_file`."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = workdir / "sim_result.json"
    result.unlink(missing_ok=True)
    env = isolated_env(workdir / "ros_log", env)
    profile = {} if params_file is None else {"robot_params": str(Path(params_file).resolve())}
    sim_args = _ros_args({**profile, **sim_params, "result_file": str(result), "use_sim_time": True})
    nav_args = _ros_args({**(nav_params or {}), "use_sim_time": True})
    if params_file is not None:
        nav_args += ["--params-file", str(Path(params_file).resolve())]
    logs = {name: (workdir / f"{name}.log").open("w+") for name in ("sim", "nav")}
    t0 = time.perf_counter()
    procs = {
        "sim": subprocess.Popen(
            [sys.executable, "-m", "mnemo_mpc.ros.sim_node", *sim_args],
            env=env,
            stdout=logs["sim"],
            stderr=subprocess.STDOUT,
        ),
        "nav": subprocess.Popen(
            [sys.executable, "-m", "mnemo_mpc.ros.node", *nav_args],
            env=env,
            stdout=logs["nav"],
            stderr=subprocess.STDOUT,
        ),
    }
    try:
        sim_code: int | None = procs["sim"].wait(timeout=wall_limit_s)
    except subprocess.TimeoutExpired:
        sim_code = None
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
    return ClosedLoopRun(sim_code, codes["nav"], summary, text["sim"], text["nav"], round(wall, 3))


__all__ = ["ClosedLoopRun", "isolated_env", "run_closed_loop"]
