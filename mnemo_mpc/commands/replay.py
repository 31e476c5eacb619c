"""`mnemo-mpc replay BAG --out OUT_BAG [--params nav.yaml] [--json FILE] [--plot FILE]`: the node's logic over a
rosbag2; prints a short summary, writes OUT_BAG (cmd_vel, local_plan), OUT_BAG.json and OUT_BAG.png.

`mnemo-mpc replay --record BAG [--seed S] [--seconds T] [--params nav.yaml] [--realism R]`: record a bag to replay
from the project's own simulator and planner (`mnemo_mpc.ros.record`); the shipped sample: sim/bags/README.md.

Try it on the sample: `mnemo-mpc replay sim/bags/open_45 --out out/replay/open_45` (an installed package:
`$(python -c "from mnemo_mpc.resources import share_dir; print(share_dir('sim'))")/bags/open_45`).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError
from mnemo_mpc.realism import LEVELS

RECORD_ONLY = ("seconds", "seed", "realism")
REPLAY_ONLY = ("out", "json", "plot")


def register(sub: argparse._SubParsersAction) -> None:
    from mnemo_mpc.ros.distro import InstalledDistro

    p = sub.add_parser(
        "replay",
        help="run the local planner over a recorded rosbag2 (no ROS needed): summary, new bag, JSON, plot "
        "(--record: record one from the simulator)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("bag", type=Path, nargs="?", help="rosbag2 directory with grid, odometry and goal topics")
    p.add_argument("--out", type=Path, default=None, help="new rosbag2 directory for cmd_vel and local_plan (required)")
    p.add_argument(
        "--params",
        type=Path,
        default=None,
        help="ROS 2 parameter file of the planner (default: config/nav.yaml values); --record: also the simulated "
        "robot's body",
    )
    p.add_argument(
        "--distro",
        default=InstalledDistro(),
        help="message definitions, a rosbags Stores name (default: the installed ROS 2's: %(default)s)",
    )
    p.add_argument("--json", type=Path, default=None, help="the summary as JSON (default: OUT_BAG.json)")
    p.add_argument(
        "--plot",
        type=Path,
        default=None,
        help="figure, PNG: commanded vs replayed v and ω, solve times, the local plans over the recorded grids "
        "(default: OUT_BAG.png)",
    )
    p.add_argument("--record", type=Path, default=None, metavar="BAG", help="record a new bag here instead")
    p.add_argument(
        "--seed", type=_args.seed, default=None, help="--record: generated world seed (default 45: open_45, 5 m)"
    )
    p.add_argument(
        "--seconds", type=_args.duration_s, default=None, help="--record: at most this long, simulated (default 30)"
    )
    p.add_argument(
        "--realism",
        choices=LEVELS,
        default=None,
        help="--record: the simulated robot (mnemo_mpc.sim.realism; default profile)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mnemo_mpc.ros.distro import InstalledDistro

    args.distro = InstalledDistro.resolve(args.distro)
    if _args.bag_or_record(
        args, REPLAY_ONLY, RECORD_ONLY, ("replaying", "replay"), "a new rosbag2 directory for the replayed commands"
    ):
        return record(args)
    return replay(args)


def replay(args: argparse.Namespace) -> int:
    from mnemo_mpc.ros.replay import check_bag_metadata

    check_bag_metadata(args.bag)  # names the bag: missing, not a rosbag2 folder, unreadable metadata
    out = _args.check_output_dir(args.out, "--out", new=True)
    partial = out.with_name(out.name + ".partial")
    if partial.exists():
        raise InputError(f"--out: {partial} is left from an interrupted replay; remove it first")
    if args.params is not None:
        _args.check_input_file(args.params, "--params")
    json_path = _args.check_output_file(args.json or out.with_name(out.name + ".json"), "--json")
    plot_path = _args.check_output_file(args.plot or out.with_name(out.name + ".png"), "--plot")
    _args.check_distinct({"--out": out, "--json": json_path, "--plot": plot_path})

    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.ros.replay import replay_bag
    from mnemo_mpc.ros.replay_plot import plot_replay

    params = NavParams.from_yaml(args.params) if args.params else NavParams()
    summary = replay_bag(args.bag, out, params, args.distro)
    data = summary.as_dict()
    data["json"], data["plot"] = str(json_path), str(plot_path)
    plot_replay(summary.trace, plot_path, title=f"replay of {args.bag} ({summary.ticks} ticks)")
    atomic_write_json(json_path, data)
    print(report(data))
    return 0


def report(s: dict[str, Any]) -> str:
    """A few lines a person reads: what ran, how it went, how close to the recorded commands, what was written."""
    rate = 1e3 / s["control_period_ms"] if s["control_period_ms"] else 0.0
    statuses = ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items(), key=lambda kv: -kv[1]))
    lines = [
        f"replayed {s['bag']}: {s['duration_s']:.1f} s of bag, {s['ticks']} ticks at {rate:g} Hz "
        f"({s['distro']} message definitions)",
        f"  statuses: {statuses or 'none'}",
    ]
    if s["solve_ms"]:
        lines.append(
            f"  SQP solve: mean {s['solve_ms']['mean']:.1f} ms, p95 {s['solve_ms']['p95']:.1f} ms, p99 "
            f"{s['solve_ms']['p99']:.1f} ms of the {s['control_period_ms']:g} ms period; iterations mean "
            f"{s['iterations']['mean']:.1f}"
        )
    d = s["command_difference"]
    if d.get("pairs"):
        lines.append(
            f"  vs the bag's {s['recorded_commands']} recorded commands ({d['pairs']} paired): "
            f"|Δv| mean {d['v_mean_abs']:.3f} max {d['v_max_abs']:.3f} m/s, "
            f"|Δω| mean {d['w_mean_abs']:.3f} max {d['w_max_abs']:.3f} rad/s"
        )
    else:
        lines.append("  no recorded commands in the bag to compare with (cmd_vel_topic)")
    lines.append(f"wrote {s['out_bag']} ({s['commands_written']} commands, local plans)")
    lines.append(f"summary {s['json']}, plot {s['plot']}")
    return "\n".join(lines)


def record(args: argparse.Namespace) -> int:
    bag = _args.check_output_dir(args.record, "--record", new=True)
    partial = bag.with_name(bag.name + ".partial")
    if partial.exists():
        raise InputError(f"--record: {partial} is left from an interrupted recording; remove it first")
    params = _args.load_params(args)

    from mnemo_mpc.ros.record import record_sim_bag

    s = record_sim_bag(
        bag,
        params,
        world_seed=args.seed if args.seed is not None else 45,
        seconds=args.seconds or 30.0,
        realism=args.realism or "profile",
        robot_params=str(args.params) if args.params else "",
        distro=args.distro,
    )
    reached = f"goal reached at {s['goal_reached_s']:.1f} s" if s["goal_reached_s"] is not None else "goal not reached"
    print(
        f"recorded {s['bag']}: world {s['world']}, {s['seconds']:.1f} s simulated, {reached}, "
        f"{s['collisions']} collision(s), {s['bytes'] / 1024:.0f} KiB"
    )
    print("  messages: " + ", ".join(f"{t} {n}" for t, n in s["messages"].items()))
    base = f" --params {args.params}" if args.params else ""
    print(f"replay it: mnemo-mpc replay {bag}{base} --out OUT_BAG")
    return 0
