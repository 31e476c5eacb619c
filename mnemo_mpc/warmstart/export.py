"""ONNX export of a trained warm-start model, with everything a runtime needs to check it fits the planner.

Graph: inputs `grid` (B, 2, S, S) float32 and `vector` (B, 2N + 7) float32 (`inputs` says what they hold), output
`controls` (B, N, 2) float32; the batch axis is dynamic. Metadata (`metadata_props`, JSON values under `mnemo_mpc.*`):
format, package version, the input spec (crop size, resolution, N, dt, normalisation scales), the robot (limits
and footprint), the model config and feature map, and the training data (worlds, examples, epochs, validation
error). `onnx.checker` must pass before the file is written (atomically).
"""

from __future__ import annotations

import datetime
import io
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mnemo_mpc import __version__
from mnemo_mpc.atomic import atomic_write_bytes
from mnemo_mpc.errors import InputError

FORMAT = "mnemo_mpc.warmstart_vit/1"
INPUTS = ("grid", "vector")
OUTPUT = "controls"
OPSET = 17


def metadata(record: dict[str, Any]) -> dict[str, str]:
    """The `mnemo_mpc.*` metadata of a trained model (`train.load_model`'s record)."""
    cfg = record["config"]
    model = cfg.model
    robot = record.get("robot") or {}
    model_fields = {k: v for k, v in asdict(model).items() if k not in ("inputs", "limits")}
    return {
        "mnemo_mpc.format": FORMAT,
        "mnemo_mpc.version": __version__,
        "mnemo_mpc.created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mnemo_mpc.inputs": json.dumps(asdict(model.inputs)),
        "mnemo_mpc.robot": json.dumps(robot),
        "mnemo_mpc.footprint": json.dumps(
            {"type": "disc", "radius": robot.get("radius"), "safety_margin": robot.get("safety_margin")}
        ),
        "mnemo_mpc.normalisation": json.dumps(
            {
                "grid": [
                    "clip(d, -0.25, clip_m) / clip_m",
                    "clip((d - radius - safety_margin) / margin_scale_m, -1, 1)",
                ],
                "vector": "v/v_max, w/w_max, subgoal xy/scale_m, cos, sin(dyaw), reference xy/scale_m (N), heading_on",
                "frame": "robot (forward, left); crop rows forward from -behind_m, columns left to right",
            }
        ),
        "mnemo_mpc.model": json.dumps(model_fields),
        "mnemo_mpc.feature_map": model.attention,
        "mnemo_mpc.training": json.dumps(
            {
                "data": os.path.basename(os.path.normpath(cfg.data)),
                "train_worlds": record.get("train_worlds"),
                "train_examples": record.get("train_examples"),
                "val_worlds": record.get("val_worlds"),
                "val_examples": record.get("val_examples"),
                "epoch": record.get("epoch"),
                "epochs": cfg.epochs,
                "val": record.get("val"),
                "seed": cfg.seed,
                "augment": cfg.augment,
            }
        ),
    }


def export(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], which: str = "best") -> dict[str, Any]:
    """Write the run's model as ONNX to `out`; returns the metadata and node count."""
    import onnx
    import torch

    from mnemo_mpc.warmstart.train import load_model

    model, record = load_model(run_dir, which)
    spec = record["config"].model.inputs
    grid = torch.zeros(1, 2, spec.size, spec.size)
    vector = torch.zeros(1, spec.vector_size)
    buf = io.BytesIO()
    torch.onnx.export(
        model,
        (grid, vector),
        buf,
        input_names=list(INPUTS),
        output_names=[OUTPUT],
        opset_version=OPSET,
        dynamo=False,
        dynamic_axes={"grid": {0: "batch"}, "vector": {0: "batch"}, OUTPUT: {0: "batch"}},
    )
    proto = onnx.load_from_string(buf.getvalue())
    meta = metadata(record)
    del proto.metadata_props[:]
    for k, v in meta.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    proto.doc_string = "spatial Mnemosyne ViT warm start for the mnemo_mpc SQP MPC (seed 002 §5.2)"
    try:
        onnx.checker.check_model(proto, full_check=True)
    except onnx.checker.ValidationError as exc:
        raise InputError(f"export {run_dir}: the exported graph fails onnx.checker ({exc})") from exc
    data = proto.SerializeToString()
    atomic_write_bytes(Path(out), data)
    return {"out": str(out), "bytes": len(data), "nodes": len(proto.graph.node), "metadata": meta}
