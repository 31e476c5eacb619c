"""`mnemo-mpc train --data DIR --out RUN_DIR`: train the spatial Mnemosyne ViT warm start on a collected store (or on
its training pack, `mnemo-mpc data pack DIR --out FILE`, where the store is not: a GPU machine).

Re-running the same command resumes after the last finished epoch. Data-parallel on several processes or GPUs:
`torchrun --nproc-per-node K -m mnemo_mpc.cli train ...` (gloo on CPU, nccl on CUDA).
"""

from __future__ import annotations

import argparse
import os
import zipfile

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "train",
        help="train the warm-start ViT on a collected store (resumable)",
        description="Train the warm-start ViT on a collected store or its pack; re-running resumes.",
        formatter_class=_args.DefaultsHelpFormatter,
    )
    p.add_argument(
        "--data", required=True, help="store written by `mnemo-mpc collect`, or a pack written by `mnemo-mpc data pack`"
    )
    p.add_argument("--out", required=True, help="run directory (checkpoints, history, loss curve)")
    p.add_argument("--epochs", type=_args.count, default=30, help="training epochs")
    p.add_argument("--batch-size", type=_args.count, default=256, help="examples per batch")
    p.add_argument("--lr", type=_args.positive_float, default=1e-3, help="AdamW learning rate")
    p.add_argument("--weight-decay", type=_args.nonnegative_float, default=1e-4, help="AdamW weight decay")
    p.add_argument(
        "--state-weight", type=_args.nonnegative_float, default=1.0, help="weight of the rolled-out position error"
    )
    p.add_argument("--no-augment", action="store_true", help="no left-right mirror augmentation")
    p.add_argument("--seed", type=_args.seed, default=0, help="seed of the split, initialisation and batches")
    p.add_argument(
        "--max-train-worlds",
        type=_args.count,
        default=None,
        help="train on a nested subset (learning curves) (default: every training world)",
    )
    p.add_argument(
        "--epoch-examples", type=_args.count, default=None, help="examples per epoch (default: the whole training set)"
    )
    p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:i")
    p.add_argument(
        "--threads", type=_args.count, default=None, help="torch intra-op threads (default: torch's own choice)"
    )
    p.add_argument("--input-workers", type=_args.count, default=1, help="processes that build the input cache")
    g = p.add_argument_group("model (defaults: the paper's 5x5 patches, 3 layers of width 64)")
    g.add_argument("--attention", default="favor_plus", help="favor_plus, hyperbolic, favor_plus_plus or softmax")
    g.add_argument("--num-features", type=_args.count, default=16, help="random features r per head")
    g.add_argument("--width", type=_args.count, default=64, help="token width")
    g.add_argument("--depth", type=_args.count, default=3, help="transformer layers")
    g.add_argument("--heads", type=_args.count, default=1, help="attention heads")
    g.add_argument("--patch", type=_args.count, default=5, help="cells per side of a patch")
    g.add_argument("--crop", type=_args.count, default=40, help="cells per side of the robot-frame crop")
    g.add_argument("--crop-resolution", type=_args.positive_float, default=0.1, help="metres per crop cell")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=handler)


def config_from_args(args: argparse.Namespace):  # noqa: ANN201 (WarmStartTrainConfig, imported lazily)
    from mnemo_mpc.warmstart.inputs import InputSpec
    from mnemo_mpc.warmstart.model import ViTConfig
    from mnemo_mpc.warmstart.train import WarmStartTrainConfig

    model = ViTConfig(
        inputs=InputSpec(size=args.crop, resolution=args.crop_resolution),
        patch=args.patch,
        width=args.width,
        depth=args.depth,
        heads=args.heads,
        attention=args.attention,
        num_features=args.num_features,
    )
    return WarmStartTrainConfig(
        data=args.data,
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        state_weight=args.state_weight,
        augment=not args.no_augment,
        seed=args.seed,
        max_train_worlds=args.max_train_worlds,
        epoch_examples=args.epoch_examples,
        device=args.device,
        threads=args.threads,
        input_workers=args.input_workers,
        model=model,
    )


def handler(args: argparse.Namespace) -> int:
    # Paths and device first (no torch import for a typo), then the configs; nothing is written before both pass.
    if not os.path.isfile(args.data):
        _args.check_input_dir(args.data, "--data")
    elif not zipfile.is_zipfile(args.data):  # the pack itself is checked member by member when it is read
        raise InputError(f"--data: {args.data} is neither a store directory nor a pack (`mnemo-mpc data pack`)")
    _args.check_output_dir(args.out, "--out")
    _args.check_device(args.device, auto=True)
    config = config_from_args(args)  # the configs' own checks (crop a multiple of the patch, ...)

    from mnemo_mpc.warmstart.train import train

    result = train(config, args.out, progress=not args.no_progress)
    h = result["history"]
    if h is not None:
        print(
            f"{result['train_worlds']} training worlds ({result['train_examples']} examples), "
            f"{result['val_worlds']} validation worlds; epoch {h['epoch']}: val loss {h['val_loss']:.3e}, "
            f"RMS error v {h['val_rms_v']:.4f} m/s, w {h['val_rms_w']:.4f} rad/s (best val loss "
            f"{result['best_val_loss']:.3e})"
        )
    print(f"wrote {args.out}")
    return 0
