"""`mnemo-mpc data stats|verify|pack DIR`: summarise an SQP dataset store, check every byte of it, or pack its model
inputs into one small file for training elsewhere (`warmstart.pack`).

`verify` exits 0 when the store is intact, 1 when it found damage (one line per problem: world, array, chunk,
reason), 2 on a usage error or when DIR is not a store. `--repair` moves the damaged worlds to `DIR/.quarantine/` and
drops them from the manifest, so the next `mnemo-mpc collect` with the same arguments re-collects them.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mnemo_mpc.commands import _args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("data", help="inspect, verify or pack an SQP dataset store")
    sub = p.add_subparsers(dest="data_command", metavar="ACTION", required=True)
    s = sub.add_parser("stats", help="counts, episode outcomes and solver statistics of a store (verified reads)")
    s.add_argument("dir", help="dataset directory written by `mnemo-mpc collect`")
    s.add_argument("--json", action="store_true", help="print the full summary as JSON")
    s.add_argument(
        "--no-verify",
        action="store_true",
        help="read only the (sealed) manifest: counts, no per-step statistics",
    )
    s.set_defaults(func=handler)
    v = sub.add_parser("verify", help="decode every array of every world; report (and --repair) damaged worlds")
    v.add_argument("dir", help="dataset directory written by `mnemo-mpc collect`")
    v.add_argument(
        "--repair",
        action="store_true",
        help="move damaged worlds to DIR/.quarantine/ and drop them from the manifest (collect re-collects them)",
    )
    v.add_argument("--json", action="store_true", help="print the report as JSON")
    v.add_argument("--no-progress", action="store_true", help="no progress bar")
    v.set_defaults(func=verify_handler)
    k = sub.add_parser(
        "pack", help="the store's model inputs and targets in one small file, for `mnemo-mpc train --data FILE`"
    )
    k.add_argument("dir", help="dataset directory written by `mnemo-mpc collect`")
    k.add_argument("--out", required=True, help="pack file to write (.mnpack)")
    k.add_argument("--seed", type=_args.seed, default=0, help="the world split's seed (train's --seed)")
    k.add_argument("--max-train-worlds", type=_args.count, default=None, help="a nested subset (train's option)")
    k.add_argument("--crop", type=_args.count, default=40, help="cells per side of the robot-frame crop")
    k.add_argument("--crop-resolution", type=_args.positive_float, default=0.1, help="metres per crop cell")
    k.add_argument(
        "--every", type=_args.count, default=1, help="keep every K-th training example of each world (default: all)"
    )
    k.add_argument("--input-workers", type=_args.count, default=1, help="processes that build the input cache")
    k.add_argument("--no-progress", action="store_true", help="no progress bar")
    k.set_defaults(func=pack_handler)


def pack_handler(args: argparse.Namespace) -> int:
    _args.check_input_dir(args.dir, "dir")
    _args.check_output_file(args.out, "--out")
    from mnemo_mpc.warmstart.inputs import InputSpec
    from mnemo_mpc.warmstart.pack import write_pack

    spec = InputSpec(size=args.crop, resolution=args.crop_resolution)
    meta = write_pack(
        args.dir,
        spec,
        args.out,
        seed=args.seed,
        max_train_worlds=args.max_train_worlds,
        every=args.every,
        workers=args.input_workers,
        progress=not args.no_progress,
    )
    shapes = meta["shapes"]
    size = os.path.getsize(args.out)
    print(
        f"wrote {args.out} ({size / 1e6:.1f} MB): {len(meta['train_worlds'])} training worlds "
        f"({shapes['train/controls'][0]} examples), {len(meta['val_worlds'])} validation worlds "
        f"({shapes['val/controls'][0]}); train on it with `mnemo-mpc train --data {args.out} --out RUN`"
    )
    return 0


def verify_handler(args: argparse.Namespace) -> int:
    from mnemo_mpc.dataset.store import iter_problems, verify_store

    report = verify_store(args.dir, repair=args.repair, progress=not args.no_progress and not args.json)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
        return 0 if report.ok else 1
    for line in iter_problems(report):
        print(line)
    bad = len(report.bad_worlds)
    print(f"checked {report.worlds_checked} worlds: {bad} damaged, {len(report.problems)} problem(s)")
    if report.repaired:
        print(
            f"repaired: moved {len(report.repaired)} world(s) to {report.quarantine} and dropped them from the "
            f"manifest; `mnemo-mpc collect` with the same arguments re-collects them"
        )
    elif args.repair and not report.manifest_ok:
        print(
            "not repaired: the manifest itself is damaged (it holds the collection config); restore it or re-collect",
            file=sys.stderr,
        )
    return 0 if report.ok else 1


def handler(args: argparse.Namespace) -> int:
    from mnemo_mpc.dataset.stats import dataset_stats, throughput_text
    from mnemo_mpc.dataset.store import StoreCorruptionError
    from mnemo_mpc.errors import DatasetError

    try:
        stats = dataset_stats(args.dir, verify=not args.no_verify)
    except StoreCorruptionError as exc:
        raise DatasetError(f"{exc} (`mnemo-mpc data verify {args.dir} --repair` quarantines damaged worlds)") from exc
    if args.json:
        print(json.dumps(stats, indent=2))
        return 0
    gb = stats["disk_bytes"] / 1e9
    print(f"store            {stats['root']} (schema v{stats['schema_version']}, {gb:.3f} GB on disk)")
    print(f"worlds           {stats['worlds']}  by outcome {stats['worlds_by_status']}")
    print(f"examples         {stats['examples']} ({stats['examples_expert_converged']} with a converged expert)")
    print(f"steps per world  {stats['steps_per_world']}")
    print(f"throughput       {throughput_text(stats['throughput'])}")
    if not stats["verified"]:
        print("per-step stats   not computed (--no-verify reads only the manifest)")
        return 0
    print(f"grid shapes      {stats['grid_shapes']}   horizons N {stats['horizons']}")
    print(f"expert iters     {stats['expert_iterations']}")
    print(f"expert time ms   {stats['expert_time_ms']}")
    print(f"mpc iters        {stats['mpc_iterations']}")
    print(f"mpc time ms      {stats['mpc_time_ms']}")
    return 0
