"""`mnemo-mpc dds-loop [--seeds S ...] [--rtf R ...] [--params ROBOT.yaml] --out F.json`: time to goal over DDS beside
`mnemo-mpc demo`.

For each generated world (seed), runs `mnemo-mpc demo --seed S` (one process: controller and simulator stepped in
lockstep) and the ROS stack (the simulator node and the planner node as two processes on simulated time, over Fast
DDS) at each real-time factor, and writes the time to goal of both, in simulated and wall-clock seconds, to one JSON
(atomically) with a bar chart beside it. With `--params` one robot profile drives all three: `demo --params`, the
planner node's `--params-file` and the simulator node's `robot_params`, the simulator stepping at the profile's
`control_rate_hz`. `--interface action` drives the planner through Nav2's FollowPath action (a client process sends
the simulator's path, as bt_navigator does) instead of the goal and path topics; the run then ends at the action's
result. `--frame map` has the simulator publish goal and path in `map` with /tf map -> odom (its localiser's
estimate) -> base_link, as a robot with a localiser does, and the planner express them in odom through /tf. Needs the
`.[ros]` extra (rclpy wheels), and nav2_msgs / tf2_msgs for the action and the map frame (`mnemo-mpc ros-interfaces`).
"""

from __future__ import annotations

import argparse

from mnemo_mpc.commands import _args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "dds-loop", help="time to goal: simulator node + planner node over DDS beside `mnemo-mpc demo`"
    )
    p.add_argument("--seeds", type=_args.seed, nargs="+", default=[45, 19, 7], help="world seeds (default 45 19 7)")
    p.add_argument(
        "--rtf", type=_args.positive_float, nargs="+", default=[1.0], help="simulator real-time factors (default 1)"
    )
    p.add_argument("--repeats", type=_args.count, default=1, help="DDS runs per world and real-time factor (default 1)")
    p.add_argument(
        "--interface",
        nargs="+",
        choices=("topic", "action"),
        default=["topic"],
        help="how the planner gets its goal: the goal and path topics, or Nav2's FollowPath action from a client "
        "process (needs nav2_msgs: `mnemo-mpc ros-interfaces build`); several: each in turn (default topic)",
    )
    p.add_argument(
        "--frame",
        choices=("odom", "map"),
        default="odom",
        help="the frame of the simulator's goal and path: odom (as the planner's odometry), or map with /tf "
        "map -> odom -> base_link from the simulator (needs tf2_msgs: `mnemo-mpc ros-interfaces build`; default odom)",
    )
    p.add_argument(
        "--yaw-goal-tolerance",
        type=_args.positive_float,
        default=None,
        help="the planner's yaw_goal_tolerance [rad] (default: the profile's, pi: heading not required; Nav2's 0.25)",
    )
    p.add_argument("--work", default="out/dds_loop", help="folder for the runs' logs and demo outputs")
    p.add_argument("--params", default=None, help="robot profile / planner params YAML (config/robots/*.yaml)")
    _args.add_realism_argument(p)
    p.add_argument("--out", required=True, help="result JSON (a PNG is written beside it)")
    p.set_defaults(func=handler)


def _demo(seed: int, out: str, params: str | None = None, realism: str = "profile") -> dict:
    """`mnemo-mpc demo --seed S [--params P] --realism R` as a user runs it; its episode.json metrics plus the
    process's wall time."""
    import json
    import subprocess
    import sys
    import time

    from mnemo_mpc.errors import MnemoError

    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mnemo_mpc.cli", "demo", "--seed", str(seed), "--out", out, "--quiet"]
        + ["--realism", realism]
        + ([] if params is None else ["--params", params]),
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    path = f"{out}/episode.json"
    try:
        with open(path) as f:
            metrics = json.load(f)["metrics"]
    except (OSError, ValueError, KeyError) as exc:
        raise MnemoError(f"demo --seed {seed}: no episode.json ({exc}); stderr: {proc.stderr[-500:]}") from exc
    keep = ("world", "success", "outcome", "time_s", "wall_time_s", "steps", "path_length_m", "final_dist_to_goal_m")
    return {**{k: metrics[k] for k in keep}, "process_wall_s": round(wall, 3)}


def _dds_run(work, seed, rtf, rep, interface, demo_s, sim_rate, params_file, args) -> dict:
    """One run of the ROS stack: its row for the JSON, and one line printed."""
    from mnemo_mpc.ros.sim_launch import run_closed_loop

    # Twice the demo's time, at least 30 s: a stall is reported as a timeout, not waited out.
    limit = max(30.0, 2.0 * demo_s)
    run = run_closed_loop(
        work / f"dds{seed}_rtf{rtf:g}_{interface}_{args.frame}_{rep}",
        {
            "world_seed": seed,
            "time_limit_s": limit,
            "real_time_factor": rtf,
            # with the action the run ends at the action's result (the goal checker's heading included)
            "exit_on_goal": interface == "topic",
            "realism": args.realism,
            "map_frame_id": "map" if args.frame == "map" else "",
            **sim_rate,
        },
        nav_params=None if args.yaw_goal_tolerance is None else {"yaw_goal_tolerance": args.yaw_goal_tolerance},
        wall_limit_s=60.0 + limit / rtf,
        params_file=params_file,
        interface=interface,
    )
    s = run.summary or {}
    success = bool(s.get("success")) and (interface == "topic" or run.client_code == 0)
    row = {
        "real_time_factor": rtf,
        "interface": interface,
        "goal_frame": args.frame,
        "yaw_goal_tolerance": args.yaw_goal_tolerance,
        "repeat": rep,
        "sim_exit": run.sim_code,
        "planner_exit": run.nav_code,
        "action_client_exit": run.client_code,
        "success": success,
        "time_to_goal_s": s.get("time_to_goal_s"),
        "wall_time_to_goal_s": s.get("wall_time_to_goal_s"),
        "first_command_s": s.get("first_command_s"),
        "command_rate_hz": s.get("command_rate_hz"),
        "achieved_real_time_factor": s.get("real_time_factor"),
        "collisions": s.get("collisions"),
        "path_length_m": s.get("path_length_m"),
        "final_dist_to_goal_m": s.get("final_dist_to_goal_m"),
        "final_heading_error_rad": s.get("final_heading_error_rad"),
        "process_wall_s": run.wall_s,
    }
    print(
        f"seed {seed}: DDS x{rtf:g} {interface} #{rep}: {'goal' if success else 'FAILED'} in "
        f"{row['time_to_goal_s']} s simulated ({row['wall_time_to_goal_s']} s wall, "
        f"{run.wall_s:.1f} s with start-up; commands at {row['command_rate_hz']} Hz)"
    )
    return row


def handler(args: argparse.Namespace) -> int:
    import importlib.util
    import os
    import platform

    from mnemo_mpc.errors import InputError

    # Checked before the first demo runs: the DDS half needs rclpy, and both outputs must be writable.
    out = _args.check_output_file(args.out, "--out")
    png = _args.check_output_file(out.with_suffix(".png"), "--out (its PNG)")
    _args.check_distinct({"--out": out, "--out (its PNG)": png})
    work = _args.check_output_dir(args.work, "--work")
    if importlib.util.find_spec("rclpy") is None:
        raise InputError("dds-loop: needs rclpy (pip install 'mnemo_mpc[ros]' or source a ROS 2 install)")
    if "action" in args.interface and importlib.util.find_spec("nav2_msgs") is None:
        raise InputError(
            "dds-loop --interface action: needs nav2_msgs (`mnemo-mpc ros-interfaces build --out DIR`, then the "
            "environment it prints; or a ROS install's ros-jazzy-nav2-msgs)"
        )
    if args.frame == "map" and importlib.util.find_spec("tf2_msgs") is None:
        raise InputError(
            "dds-loop --frame map: needs tf2_msgs (`mnemo-mpc ros-interfaces build --out DIR`, then the environment "
            "it prints; or a ROS install's ros-jazzy-tf2-msgs)"
        )
    nav_params = _args.load_params(args)  # checked before any run; None without --params
    sim_rate: dict[str, float] = {}
    if nav_params is not None:
        sim_rate = {"sim_rate_hz": float(nav_params.control_rate_hz)}  # the simulator steps at the planner's rate
    params_file = None if args.params is None else str(args.params)

    from mnemo_mpc import __version__
    from mnemo_mpc.atomic import atomic_write_json

    load_before = os.getloadavg()
    rows = []
    for seed in args.seeds:
        demo = _demo(seed, str(work / f"demo{seed}"), params_file, args.realism)
        print(f"seed {seed}: demo {demo['outcome']} in {demo['time_s']} s simulated ({demo['wall_time_s']} s wall)")
        dds = []
        for rtf in args.rtf:
            for interface in args.interface:
                for rep in range(args.repeats):
                    dds.append(_dds_run(work, seed, rtf, rep, interface, demo["time_s"], sim_rate, params_file, args))
        rows.append({"seed": seed, "world": demo["world"], "demo": demo, "dds": dds})

    payload = {
        "what": "time to goal: simulator node + planner node over Fast DDS on /clock vs `mnemo-mpc demo` (lockstep)",
        "command": f"mnemo-mpc dds-loop --seeds {' '.join(map(str, args.seeds))} --rtf "
        f"{' '.join(f'{r:g}' for r in args.rtf)} --repeats {args.repeats} --interface {' '.join(args.interface)}"
        + ("" if args.frame == "odom" else f" --frame {args.frame}")
        + ("" if args.yaw_goal_tolerance is None else f" --yaw-goal-tolerance {args.yaw_goal_tolerance:g}")
        + ("" if params_file is None else f" --params {params_file}")
        + f" --realism {args.realism} --out {args.out}",
        "params": params_file,
        "realism": args.realism,
        "notes": "time_to_goal_s: simulated seconds until the robot centre is within 0.25 m of the goal (the demo's "
        "goal check), from simulated time 0 (the simulator holds time at 0 until the planner's cmd_vel publisher "
        "matched). wall_time_to_goal_s: wall seconds over the same span; the demo steps as fast as it can, the "
        "simulator node paces simulated time at real_time_factor. process_wall_s includes start-up.",
        "version": __version__,
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            # Simulated times depend on how fast the planner answers in wall time: other load matters.
            "load_average_1_5_15_before": [round(v, 2) for v in load_before],
            "load_average_1_5_15_after": [round(v, 2) for v in os.getloadavg()],
        },
        "worlds": rows,
    }
    atomic_write_json(out, payload)
    _plot(rows, png)
    print(f"wrote {out} and {png}")
    return 0 if all(r["demo"]["success"] and all(d["success"] for d in r["dds"]) for r in rows) else 1


def _plot(rows: list[dict], path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from mnemo_mpc.atomic import atomic_write_bytes

    labels = [r["world"] for r in rows]
    demo = [r["demo"]["time_s"] for r in rows]
    kinds = sorted({(d["real_time_factor"], d.get("interface", "topic")) for r in rows for d in r["dds"]})
    x = np.arange(len(rows))
    width = 0.8 / (1 + len(kinds))
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.bar(x, demo, width, label="mnemo-mpc demo (lockstep)")
    for i, (rtf, interface) in enumerate(kinds, start=1):
        t = [
            np.mean(
                [
                    d["time_to_goal_s"]
                    for d in r["dds"]
                    if (d["real_time_factor"], d.get("interface", "topic")) == (rtf, interface) and d["success"]
                ]
                or [0]
            )
            for r in rows
        ]
        ax.bar(x + i * width, t, width, label=f"sim node + planner over DDS ({interface}), x{rtf:g} real time")
    ax.set_xticks(x + width * len(kinds) / 2, labels)
    ax.set_ylabel("time to goal [s, simulated]")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
