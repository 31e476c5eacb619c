"""`mnemo-mpc runs RUN_DIR... --out F.json [--png F.png]`: training runs side by side (learning curves, ablations)."""

from __future__ import annotations

import argparse

from mnemo_mpc.commands import _args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("runs", help="compare warm-start training runs (learning curve, ablations)")
    p.add_argument("run_dirs", nargs="+", help="run directories written by `mnemo-mpc train`")
    p.add_argument("--out", required=True, help="JSON to write")
    p.add_argument("--png", default=None, help="also plot validation error against training worlds")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    from pathlib import Path

    for run_dir in args.run_dirs:
        _args.check_input_dir(run_dir, "run_dir")
    out = _args.check_output_file(args.out, "--out")
    png = _args.check_output_file(args.png, "--png") if args.png else None
    _args.check_distinct({"--out": out, "--png": png})

    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.warmstart.compare import compare, plot

    result = compare(args.run_dirs)
    atomic_write_json(Path(args.out), result)
    print(
        f"{'run':16s} {'worlds':>6s} {'examples':>8s} {'epoch':>5s} {'val loss':>9s} {'rms v':>7s} {'rms w':>7s} "
        f"{'train s':>7s}  differs"
    )
    for r in result["runs"]:
        diff = ", ".join(f"{k.split('.')[-1]}={v}" for k, v in r["differs"].items() if k != "out")
        print(
            f"{Path(r['run']).name:16s} {r['train_worlds'] or 0:6d} {r['train_examples'] or 0:8d} "
            f"{r['best_epoch']:5d} {r['val_loss']:9.2e} {r['val_rms_v']:7.4f} {r['val_rms_w']:7.4f} "
            f"{r['train_wall_s']:7.0f}  {diff}"
        )
    if not result["same_validation_split"]:
        print("note: the runs do not share a validation split (data, seed or val_fraction differ)")
    written = [args.out]
    if args.png:
        plot(result, args.png)
        written.append(args.png)
    print("wrote " + ", ".join(written))
    return 0
