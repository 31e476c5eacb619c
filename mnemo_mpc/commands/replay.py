"""`mnemo-mpc replay BAG --out OUT_BAG [--params nav.yaml] [--json FILE]`: the node's logic over a rosbag2."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="run the local planner over a recorded rosbag2 (no ROS needed)")
    p.add_argument("bag", type=Path, help="rosbag2 directory with grid, odometry and goal topics")
    p.add_argument("--out", type=Path, required=True, help="new rosbag2 directory for cmd_vel and local_plan")
    p.add_argument("--params", type=Path, default=None, help="ROS2 parameter file (default: config/nav.yaml values)")
    p.add_argument("--distro", default="ROS2_HUMBLE", help="message definitions (rosbags Stores name)")
    p.add_argument("--json", type=Path, default=None, help="also write the summary here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from mnemo_mpc.ros.replay import check_bag_metadata

    check_bag_metadata(args.bag)  # names the bag: missing, not a rosbag2 folder, unreadable metadata
    _args.check_output_dir(args.out, "--out", new=True)
    partial = args.out.with_name(args.out.name + ".partial")
    if partial.exists():
        raise InputError(f"--out: {partial} is left from an interrupted replay; remove it first")
    if args.params is not None:
        _args.check_input_file(args.params, "--params")
    if args.json is not None:
        _args.check_output_file(args.json, "--json")
    from rosbags.typesys import Stores

    if args.distro not in Stores.__members__:
        raise InputError(f"--distro: expected one of {', '.join(Stores.__members__)}, got {args.distro!r}")

    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.ros.replay import replay_bag

    params = NavParams.from_yaml(args.params) if args.params else NavParams()
    summary = replay_bag(args.bag, args.out, params, args.distro).as_dict()
    if args.json:
        atomic_write_json(args.json, summary)
    print(json.dumps(summary, indent=2))
    return 0
