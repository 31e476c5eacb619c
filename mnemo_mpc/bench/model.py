"""Warm-start model latency under onnxruntime: batch size, sequence length, feature map (seed 002 §5.2).

Each point exports a freshly initialised `SpatialMnemosyneViT` (latency does not depend on the weights) to ONNX
(`warmstart.export.graph_bytes`) and times `InferenceSession.run` on the CPU provider with one intra-op thread (the
runtime's setting: the planner owns the other core). Two sweeps:

* **batch**: the default model (5x5 patches of a 40x40 crop = 64 tokens, width 64) at batch 1..64, per feature map;
* **sequence length**: the crop grows (20..160 cells, 16..1024 tokens) at batch 1, for the linear-attention feature
  maps and exact softmax attention. Compact associative memory costs O(L r d) per layer against softmax's O(L² d),
  so `growth` (time at the longest sequence over the time at a quarter of it) should be ≈ 4 for the linear maps and
  grow towards 16 for softmax once attention dominates.

With `--model FILE.onnx` the shipped model's batch-1 latency is timed too, through `WarmStartModel` (the node's
path: input features from a distance field, then the session).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import time
from dataclasses import asdict, dataclass
from typing import Any

from mnemo_mpc.errors import InputError

LINEAR = ("favor_plus", "hyperbolic", "favor_plus_plus")


@dataclass(frozen=True)
class ModelBenchConfig:
    batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    crops: tuple[int, ...] = (20, 40, 80, 120, 160)  # x 5x5 patches: 16, 64, 256, 576, 1024 tokens
    attentions: tuple[str, ...] = (*LINEAR, "softmax")
    repeats: int = 300
    warmup: int = 20
    threads: int = 1
    model: str | None = None


def quick_config() -> ModelBenchConfig:
    return ModelBenchConfig(batches=(1, 8, 64), crops=(20, 40, 80), repeats=50, warmup=5)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer points and repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per point (default 300)")
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads (default 1)")
    parser.add_argument("--model", default=None, help="also time this exported model (ONNX) end to end")


def config_from_args(args: argparse.Namespace) -> ModelBenchConfig:
    cfg = quick_config() if args.quick else ModelBenchConfig()
    cfg = dataclasses.replace(cfg, threads=args.threads, model=args.model)
    if args.repeats is not None:
        cfg = dataclasses.replace(cfg, repeats=args.repeats)
    if cfg.repeats < 1 or cfg.threads < 1:
        raise InputError(f"bench model: --repeats and --threads must be >= 1, got {cfg.repeats}, {cfg.threads}")
    return cfg


def _stats(times_s: list[float]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(times_s) * 1e3
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)), "min": float(a.min())}


def _session(attention: str, crop: int, threads: int) -> tuple[Any, Any]:
    import onnxruntime as ort

    from mnemo_mpc.warmstart.export import graph_bytes
    from mnemo_mpc.warmstart.inputs import InputSpec
    from mnemo_mpc.warmstart.model import SpatialMnemosyneViT, ViTConfig

    cfg = ViTConfig(inputs=InputSpec(size=crop), attention=attention)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(graph_bytes(SpatialMnemosyneViT(cfg)), opts, providers=["CPUExecutionProvider"])
    return sess, cfg


def _time(sess: Any, cfg: Any, batch: int, cfg_bench: ModelBenchConfig) -> dict[str, float]:
    import numpy as np

    rng = np.random.default_rng(0)
    s = cfg.inputs
    feeds = {
        "grid": rng.uniform(-0.25, 1.0, (batch, 2, s.size, s.size)).astype(np.float32),
        "vector": rng.normal(size=(batch, s.vector_size)).astype(np.float32),
    }
    for _ in range(cfg_bench.warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(cfg_bench.repeats):
        t = time.perf_counter()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t)
    out = _stats(times)
    out["per_example_p50"] = out["p50"] / batch
    return out


def _shipped(path: str, cfg: ModelBenchConfig) -> dict[str, Any]:
    """The node's path for one step: features from a distance field, then the session (batch 1)."""
    import numpy as np

    from mnemo_mpc.nav.controller import WarmStartContext
    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.robot import RobotModel
    from mnemo_mpc.sim.worlds import generate_world
    from mnemo_mpc.warmstart.runtime import WarmStartModel, read_metadata

    _, info = read_metadata(path)
    robot = RobotModel(**{k: v for k, v in info.robot.items() if k in {f.name for f in dataclasses.fields(RobotModel)}})
    model = WarmStartModel(path, robot, info.inputs.N, info.inputs.dt, threads=cfg.threads)
    world = generate_world(2000)
    field = DistanceField(world.grid)
    pose = np.asarray(world.start, dtype=float)
    ref = np.linspace(pose[:2], np.asarray(world.goal[:2], dtype=float), info.inputs.N + 1)
    ctx = WarmStartContext(field, pose, np.zeros(2), np.asarray(world.goal, dtype=float), ref)
    for _ in range(cfg.warmup):
        model(ctx)
    features, inference, total = [], [], []
    for _ in range(cfg.repeats):
        t = time.perf_counter()
        model(ctx)
        total.append(time.perf_counter() - t)
        features.append(model.last_features_s)
        inference.append(model.last_inference_s)
    return {
        "path": path,
        "provider": model.provider,
        "features_ms": _stats(features),
        "inference_ms": _stats(inference),
        "total_ms": _stats(total),
    }


def run(cfg: ModelBenchConfig, progress: bool = True) -> dict:
    import onnxruntime as ort
    from tqdm import tqdm

    points = [("batch", a, 40, b) for a in cfg.attentions for b in cfg.batches]
    points += [("sequence", a, c, 1) for a in cfg.attentions for c in cfg.crops]
    sessions: dict[tuple[str, int], Any] = {}
    batch: dict[str, dict[str, Any]] = {a: {} for a in cfg.attentions}
    sequence: dict[str, dict[str, Any]] = {a: {} for a in cfg.attentions}
    t0 = time.perf_counter()
    for sweep, attention, crop, b in tqdm(points, desc="bench model", disable=not progress):
        if (attention, crop) not in sessions:
            sessions[(attention, crop)] = _session(attention, crop, cfg.threads)
        sess, mcfg = sessions[(attention, crop)]
        timing = _time(sess, mcfg, b, cfg)
        if sweep == "batch":
            batch[attention][str(b)] = timing
        else:
            sequence[attention][str(mcfg.tokens)] = dict(timing, crop=crop)
    growth = {}
    for attention, by in sequence.items():
        tokens = sorted(int(t) for t in by)
        longest = tokens[-1]
        quarter = [t for t in tokens if t * 4 <= longest]
        if quarter:
            ref = quarter[-1]
            growth[attention] = {
                "tokens": [ref, longest],
                "ratio": by[str(longest)]["p50"] / by[str(ref)]["p50"],
                "token_ratio": longest / ref,
            }
    result: dict[str, Any] = {
        "config": dict(asdict(cfg), onnxruntime=ort.__version__, python=platform.python_version()),
        "batch": batch,
        "sequence": sequence,
        "growth": growth,
    }
    if cfg.model:
        result["model"] = _shipped(cfg.model, cfg)
    result["config"]["wall_s"] = time.perf_counter() - t0
    return result


def report(result: dict) -> str:
    lines = ["batch sweep (40x40 crop, 64 tokens), ms p50 per call:"]
    batches = next(iter(result["batch"].values())).keys()
    lines.append(f"{'attention':16s} " + " ".join(f"{'B=' + b:>7s}" for b in batches))
    for a, by in result["batch"].items():
        lines.append(f"{a:16s} " + " ".join(f"{by[b]['p50']:7.3f}" for b in batches))
    lines.append("sequence sweep (batch 1), ms p50:")
    tokens = next(iter(result["sequence"].values())).keys()
    lines.append(f"{'attention':16s} " + " ".join(f"{'L=' + t:>7s}" for t in tokens))
    for a, by in result["sequence"].items():
        g = result["growth"].get(a)
        tail = f"   x{g['ratio']:.1f} for x{g['token_ratio']:.0f} tokens" if g else ""
        lines.append(f"{a:16s} " + " ".join(f"{by[t]['p50']:7.3f}" for t in tokens) + tail)
    m = result.get("model")
    if m:
        lines.append(
            f"shipped model {m['path']} on {m['provider']}: features p50 {m['features_ms']['p50']:.3f} ms, "
            f"inference p50 {m['inference_ms']['p50']:.3f} / p95 {m['inference_ms']['p95']:.3f} ms, "
            f"total p50 {m['total_ms']['p50']:.3f} ms"
        )
    return "\n".join(lines)
