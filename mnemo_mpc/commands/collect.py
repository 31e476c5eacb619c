"""`mnemo-mpc collect --worlds N --out DIR [--workers K] [--ray-address ADDR] [--seed S] [--params ROBOT.yaml]`: SQP
dataset collection."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from mnemo_mpc.commands import _args
from mnemo_mpc.warmstart import MODES

# Local worker processes are CPU-bound episodes; more than a few per CPU only adds memory and start-up time.
MAX_LOCAL_WORKERS_PER_CPU = 4


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "collect",
        help="drive an MPC agent through generated worlds and store every step's SQP solution (resumable)",
    )
    p.add_argument("--worlds", type=_args.count, required=True, help="number of worlds (ids 0..N-1)")
    p.add_argument("--out", required=True, help="dataset directory (created, or resumed if it exists)")
    p.add_argument("--workers", type=_args.count, default=1, help="local worker processes (default 1)")
    p.add_argument("--ray-address", default=None, help="run the tasks on Ray: a cluster address, or 'local'")
    p.add_argument("--seed", type=_args.seed, default=0, help="base seed of the world generator (default 0)")
    p.add_argument(
        "--difficulty", type=_args.unit_interval, default=None, help="world difficulty in [0, 1] (default: generator's)"
    )
    _args.add_world_arguments(p)
    p.add_argument(
        "--warmstart",
        choices=MODES,
        default="shift",
        help="start of the closed-loop solves that drive the robot (the recorded expert is always converged)",
    )
    p.add_argument("--model", default=None, help="warm-start model (ONNX) for --warmstart learned / hybrid")
    _args.add_params_argument(p)
    _args.add_realism_argument(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    import dataclasses
    import importlib.util
    import os

    from mnemo_mpc.dataset.collect import MAX_WORLDS_PER_SEED
    from mnemo_mpc.errors import InputError

    # Checked before the store is created or opened: a user error leaves no dataset folder behind.
    if args.worlds > MAX_WORLDS_PER_SEED:
        raise InputError(f"--worlds: expected 1..{MAX_WORLDS_PER_SEED}, got {args.worlds}")
    if args.ray_address is None and args.workers > MAX_LOCAL_WORKERS_PER_CPU * (os.cpu_count() or 1):
        raise InputError(
            f"--workers: expected at most {MAX_LOCAL_WORKERS_PER_CPU} local processes per CPU "
            f"({MAX_LOCAL_WORKERS_PER_CPU * (os.cpu_count() or 1)} here), got {args.workers}"
        )
    if args.ray_address is not None and importlib.util.find_spec("ray") is None:
        raise InputError("--ray-address: Ray is not installed (pip install 'mnemo_mpc[ray]')")
    _args.check_output_dir(args.out, "--out")
    _args.check_warmstart(args)
    params = _args.load_params(args)
    if args.warmstart in ("learned", "hybrid") and args.model is None:
        raise InputError(f"--warmstart {args.warmstart}: needs --model FILE.onnx")

    from mnemo_mpc.dataset.collect import CollectConfig, collect
    from mnemo_mpc.dataset.stats import world_throughput
    from mnemo_mpc.dataset.store import DatasetStore
    from mnemo_mpc.nav.controller import ControllerConfig
    from mnemo_mpc.sim.worlds import WorldConfig

    world = WorldConfig() if args.difficulty is None else dataclasses.replace(WorldConfig(), difficulty=args.difficulty)
    model = str(Path(args.model).resolve()) if args.model else None
    profile: dict = {}
    controller = ControllerConfig(warm_start=args.warmstart)
    # Without --params and --realism the built-in robot's stores keep the configuration they were collected with (so
    # a re-run resumes them); the built-in robot's profile realism is the ideal robot either way.
    if params is not None or args.realism != "profile":
        from mnemo_mpc.sim.profile import closed_loop_setup

        # The profile's robot, its MPC, its controller, its simulator (body, lidar, --realism) and the worlds sized
        # for it; the iteration cap alone bounds the solves (not the machine's load).
        setup = closed_loop_setup(params, realism=args.realism)
        world = dataclasses.replace(setup.world, difficulty=world.difficulty)
        profile = {"robot": setup.robot, "mpc": setup.mpc, "sim": setup.sim}
        controller = dataclasses.replace(setup.profile.controller_config, warm_start=args.warmstart)
    world = dataclasses.replace(world, moving_obstacles=args.moving_obstacles, moving_kind=args.moving_kind)
    config = CollectConfig(
        seed=args.seed,
        world=world,
        kinds=args.world_kinds or (None,),
        controller=controller,
        model=model,
        **profile,
    )
    if model is not None:
        # Load the model once here: a file that is not a warm-start model for this robot is one error line now,
        # not an "error" status recorded for every world by the workers.
        from mnemo_mpc.warmstart.runtime import WarmStartModel

        WarmStartModel(model, config.robot, config.mpc.N, config.mpc.dt)
    summary = collect(
        args.out,
        args.worlds,
        config,
        workers=args.workers,
        ray_address=args.ray_address,
        progress=not args.no_progress,
    )
    summary["throughput"] = world_throughput(DatasetStore.open(args.out))
    print(json.dumps(summary, indent=2))
    return 0
