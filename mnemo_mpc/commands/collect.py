"""`mnemo-mpc collect --worlds N --out DIR [--workers K] [--ray-address ADDR] [--seed S]`: SQP dataset collection."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mnemo_mpc.warmstart import MODES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "collect",
        help="drive an MPC agent through generated worlds and store every step's SQP solution (resumable)",
    )
    p.add_argument("--worlds", type=int, required=True, help="number of worlds (ids 0..N-1)")
    p.add_argument("--out", required=True, help="dataset directory (created, or resumed if it exists)")
    p.add_argument("--workers", type=int, default=1, help="local worker processes (default 1)")
    p.add_argument("--ray-address", default=None, help="run the tasks on Ray: a cluster address, or 'local'")
    p.add_argument("--seed", type=int, default=0, help="base seed of the world generator (default 0)")
    p.add_argument("--difficulty", type=float, default=None, help="world difficulty in [0, 1] (default: generator's)")
    p.add_argument(
        "--warmstart",
        choices=MODES,
        default="shift",
        help="start of the closed-loop solves that drive the robot (the recorded expert is always converged)",
    )
    p.add_argument("--model", default=None, help="warm-start model (ONNX) for --warmstart learned / hybrid")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    import dataclasses

    from mnemo_mpc.dataset.collect import CollectConfig, collect
    from mnemo_mpc.dataset.stats import world_throughput
    from mnemo_mpc.dataset.store import DatasetStore
    from mnemo_mpc.nav.controller import ControllerConfig
    from mnemo_mpc.planning.worlds import WorldConfig

    world = WorldConfig() if args.difficulty is None else dataclasses.replace(WorldConfig(), difficulty=args.difficulty)
    model = str(Path(args.model).resolve()) if args.model else None
    config = CollectConfig(
        seed=args.seed, world=world, controller=ControllerConfig(warm_start=args.warmstart), model=model
    )
    summary = collect(
        args.out,
        args.worlds,
        config,
        workers=args.workers,
        ray_address=args.ray_address,
        progress=not args.no_progress,
    )
    summary.update(world_throughput(DatasetStore.open(args.out)))
    print(json.dumps(summary, indent=2))
    return 0
