"""Side by side: training runs of the warm-start ViT (learning curves, feature maps, ablations).

Each run directory (`mnemo-mpc train --out RUN`) gives one row: what it was trained on (worlds, examples), what
differs in its config, its best validation loss and RMS control errors (m/s, rad/s), the epoch they came from and
the training wall time (sum of epoch times, resumes included). Runs share a validation split when they share
`data`, `seed` and `val_fraction` (`data.world_split`), which is what makes their rows comparable; `compare` says
when they do not.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

from mnemo_mpc.atomic import atomic_write_bytes
from mnemo_mpc.errors import InputError

SPLIT_KEYS = ("data", "seed", "val_fraction")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def run_row(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    run = Path(run_dir)
    try:
        config = json.loads((run / "config.json").read_text())
        history = json.loads((run / "history.json").read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{run}: not a finished training run (config.json / history.json: {exc})") from exc
    if not history:
        raise InputError(f"{run}/history.json: no finished epoch")
    best = min(history, key=lambda h: h["val_loss"])
    summary: dict[str, Any] = {}  # data sizes: best.pt has them from the first epoch on
    if (run / "best.pt").is_file():
        import torch

        record = torch.load(run / "best.pt", map_location="cpu", weights_only=False)
        summary = {k: record.get(k) for k in ("train_worlds", "train_examples", "val_worlds")}
    return {
        "run": str(run),
        "config": _flatten(config),
        "train_worlds": summary.get("train_worlds"),
        "train_examples": summary.get("train_examples"),
        "val_worlds": summary.get("val_worlds"),
        "epochs": len(history),
        "best_epoch": best["epoch"],
        "val_loss": best["val_loss"],
        "val_rms_v": best["val_rms_v"],
        "val_rms_w": best["val_rms_w"],
        "final_val_loss": history[-1]["val_loss"],
        "train_wall_s": float(sum(h["epoch_s"] for h in history)),
    }


def compare(run_dirs: list[str]) -> dict[str, Any]:
    """Rows of `run_row`, with `differs`: the config keys that are not the same in every run."""
    if not run_dirs:
        raise InputError("compare: no run directories given")
    rows = [run_row(r) for r in run_dirs]
    keys = sorted(set().union(*(r["config"] for r in rows)))
    differs = [k for k in keys if len({json.dumps(r["config"].get(k)) for r in rows}) > 1]
    for r in rows:
        r["differs"] = {k: r["config"].get(k) for k in differs}
    split = {k: {json.dumps(r["config"].get(k)) for r in rows} for k in SPLIT_KEYS}
    return {
        "runs": rows,
        "differs": differs,
        "same_validation_split": all(len(v) == 1 for v in split.values()),
    }


def plot(result: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Validation loss and RMS errors against training worlds, one labelled point per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in result["runs"] if r["train_worlds"]]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    for r in rows:
        name = Path(r["run"]).name
        ax[0].loglog(r["train_worlds"], r["val_loss"], "o")
        ax[0].annotate(name, (r["train_worlds"], r["val_loss"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax[1].loglog(r["train_worlds"], r["val_rms_v"], "s", color="tab:blue")
        ax[1].loglog(r["train_worlds"], r["val_rms_w"], "^", color="tab:orange")
        ax[1].annotate(name, (r["train_worlds"], r["val_rms_w"]), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax[0].set_ylabel("best validation loss")
    ax[1].set_ylabel("validation RMS error: v m/s (■), w rad/s (▲)")
    for a in ax:
        a.set_xlabel("training worlds")
        a.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
