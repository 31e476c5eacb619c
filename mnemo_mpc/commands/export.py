"""`mnemo-mpc export RUN_DIR --out models/NAME.onnx`: a trained warm-start model as ONNX with its metadata."""

from __future__ import annotations

import argparse

from mnemo_mpc.commands import _args


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("export", help="export a trained warm-start model to ONNX (dynamic batch, metadata)")
    p.add_argument("run_dir", help="run directory written by `mnemo-mpc train`")
    p.add_argument("--out", required=True, help="ONNX file to write")
    p.add_argument("--weights", choices=("best", "checkpoint"), default="best", help="best validation or last epoch")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    import json

    _args.check_input_dir(args.run_dir, "run_dir")
    _args.check_output_file(args.out, "--out")

    from mnemo_mpc.warmstart.export import export

    info = export(args.run_dir, args.out, args.weights)
    training = json.loads(info["metadata"]["mnemo_mpc.training"])
    print(
        f"wrote {info['out']} ({info['bytes'] / 1e3:.0f} kB, {info['nodes']} nodes, feature map "
        f"{info['metadata']['mnemo_mpc.feature_map']}, trained on {training['train_worlds']} worlds / "
        f"{training['train_examples']} examples, epoch {training['epoch']}); onnxruntime vs torch max abs "
        f"difference {info['parity']['max_abs']:.2e} on {info['parity']['examples']} {info['parity']['inputs']} "
        "examples"
    )
    return 0
