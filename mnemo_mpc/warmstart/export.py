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
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mnemo_mpc import __version__
from mnemo_mpc.atomic import atomic_write_bytes
from mnemo_mpc.errors import InputError
from mnemo_mpc.warmstart.inputs import FORMAT, INPUTS, OUTPUT

OPSET = 17
PARITY_TOL = 1e-4  # max |onnxruntime - torch| on the controls (m/s, rad/s)


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


def graph_bytes(model: Any) -> bytes:
    """The model's ONNX graph (dynamic batch, no metadata): what `export` writes and `bench model` times."""
    import torch

    spec = model.cfg.inputs
    grid = torch.zeros(1, 2, spec.size, spec.size)
    vector = torch.zeros(1, spec.vector_size)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        # The tracer flags Python floats taken from shapes and fixed buffers: constants of the graph, as intended.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter, chosen for opset 17
        torch.onnx.export(
            model.eval(),
            (grid, vector),
            buf,
            input_names=list(INPUTS),
            output_names=[OUTPUT],
            opset_version=OPSET,
            dynamo=False,
            dynamic_axes={"grid": {0: "batch"}, "vector": {0: "batch"}, OUTPUT: {0: "batch"}},
        )
    return buf.getvalue()


def export(run_dir: str | os.PathLike[str], out: str | os.PathLike[str], which: str = "best") -> dict[str, Any]:
    """Write the run's model as ONNX to `out`; returns the metadata and node count."""
    import onnx

    from mnemo_mpc.warmstart.train import load_model

    model, record = load_model(run_dir, which)
    graph = graph_bytes(model)
    proto = onnx.load_from_string(graph)
    meta = metadata(record)
    check = parity(model, graph, record)
    if check["max_abs"] > PARITY_TOL:
        raise InputError(
            f"export {run_dir}: onnxruntime and torch differ by {check['max_abs']:.2e} (> {PARITY_TOL}) on "
            f"{check['examples']} {check['inputs']} examples"
        )
    meta["mnemo_mpc.parity"] = json.dumps(check)
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
    return {"out": str(out), "bytes": len(data), "nodes": len(proto.graph.node), "metadata": meta, "parity": check}


def parity(model: Any, graph: bytes, record: dict[str, Any], examples: int = 1024) -> dict[str, Any]:
    """Max |onnxruntime - torch| over the controls of up to `examples` validation examples of the run's store (its
    input cache), or of random inputs when the store is not on this machine."""
    import numpy as np
    import onnxruntime as ort
    import torch

    from mnemo_mpc.warmstart import data as wdata

    cfg = record["config"]
    spec = model.cfg.inputs
    try:
        if Path(cfg.data).is_file():  # a training pack (`warmstart.pack`)
            from mnemo_mpc.warmstart.pack import read_pack

            arrays = read_pack(cfg.data).val
        else:
            _, val_ids = wdata.world_split(cfg.data, cfg.val_fraction, cfg.seed, cfg.max_train_worlds)
            arrays = wdata.load(wdata.cache_dir(cfg.data, spec), val_ids[: max(1, examples // 100)])
        grid, vector, inputs = arrays.grid[:examples].astype(np.float32), arrays.vector[:examples], "validation"
    except Exception:  # noqa: BLE001 - any missing/unreadable store: fall back to random inputs, and say so
        rng = np.random.default_rng(0)
        grid = rng.uniform(-0.25, 1.0, (examples, 2, spec.size, spec.size)).astype(np.float32)
        vector = rng.normal(size=(examples, spec.vector_size)).astype(np.float32)
        inputs = "random (store not found)"
    sess = ort.InferenceSession(graph, providers=["CPUExecutionProvider"])
    worst = 0.0
    for i in range(0, len(grid), 256):
        g, v = grid[i : i + 256], vector[i : i + 256]
        with torch.no_grad():
            want = model(torch.from_numpy(g), torch.from_numpy(v)).numpy()
        worst = max(worst, float(np.abs(sess.run([OUTPUT], {"grid": g, "vector": v})[0] - want).max()))
    return {"max_abs": worst, "examples": int(len(grid)), "inputs": inputs, "provider": "CPUExecutionProvider"}
