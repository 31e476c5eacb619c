"""Summary of an SQP dataset store (`mnemo-mpc data stats`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.dataset.store import DatasetStore


def _pct(values: np.ndarray, digits: int = 4) -> dict[str, float | None]:
    if values.size == 0:
        return {"mean": None, "p50": None, "p95": None, "max": None}
    return {
        "mean": round(float(values.mean()), digits),
        "p50": round(float(np.percentile(values, 50)), digits),
        "p95": round(float(np.percentile(values, 95)), digits),
        "max": round(float(values.max()), digits),
    }


def _disk_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(root):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def world_throughput(store: DatasetStore, paper_worlds: int = 2787, cores: int = 2) -> dict[str, Any]:
    """Collection speed from each world's own timing (generation + episode + expert solves + write; no pool
    start-up). Wall time depends on how busy the machine was; CPU time (the worker is single-threaded) is what an
    otherwise idle core would take. Returns `examples_per_s_per_worker` ({"wall", "cpu"}) and `projected_hours`
    ({"worlds": 2787, "workers": `cores`, "wall", "cpu"}: the paper's 2787 worlds, seed 002 §5.2, on `cores`
    workers); a figure with no timing recorded is None. `throughput_text` says it in one line."""
    entries = [store.world_entry(w) for w in store.world_ids]
    steps = np.array([e["steps"] for e in entries], dtype=float)
    rate: dict[str, float | None] = {}
    hours: dict[str, Any] = {"worlds": paper_worlds, "workers": cores}
    for key, label in (("wall_time_s", "wall"), ("cpu_time_s", "cpu")):
        t = np.array([e.get(key, np.nan) for e in entries], dtype=float)
        ok = np.isfinite(t) & (t > 0)
        rate[label] = round(float(steps[ok].sum() / t[ok].sum()), 3) if ok.any() else None
        hours[label] = round(float(t[ok].mean()) * paper_worlds / cores / 3600.0, 2) if ok.any() else None
    return {"examples_per_s_per_worker": rate, "projected_hours": hours}


def throughput_text(throughput: dict[str, Any]) -> str:
    """`world_throughput` in words, e.g. "60.1 examples/s per worker (wall clock), 61.2 (CPU time); 2787 worlds on 2
    workers: 1.45 h (wall clock), 1.43 h (CPU time)"."""
    rate, hours = throughput["examples_per_s_per_worker"], throughput["projected_hours"]

    def num(value: float | None, unit: str) -> str:
        return "n/a" if value is None else f"{value:g}{unit}"

    return (
        f"{num(rate['wall'], '')} examples/s per worker (wall clock), {num(rate['cpu'], '')} (CPU time); "
        f"{hours['worlds']} worlds on {hours['workers']} workers: {num(hours['wall'], ' h')} (wall clock), "
        f"{num(hours['cpu'], ' h')} (CPU time)"
    )


def dataset_stats(root: str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """Counts, episode outcomes, per-step solver statistics (expert and closed-loop MPC) and disk size.

    Every figure comes from verified data: the manifest is validated and sealed (`DatasetStore.open`), opening a
    world checks its metadata and the presence of every chunk, and the per-step arrays summarised here are read
    whole, so their chunk CRCs and decoded digests are checked (`DatasetError` naming world, array and chunk on
    damage). The grid's contents are not read here; `verify_store` (`mnemo-mpc data verify`) decodes everything.
    With `verify=False` only the manifest is read: the per-step statistics are then None, never guessed.
    """
    store = DatasetStore.open(root)
    cols: dict[str, list[np.ndarray]] = {
        k: [] for k in ("expert_iterations", "expert_time_s", "expert_success", "mpc_iterations", "mpc_time_s")
    }
    steps_per_world = []
    grid_shapes: set[tuple[int, ...]] = set()
    horizons: set[int] = set()
    for wid in store.world_ids:
        entry = store.world_entry(wid)
        steps_per_world.append(entry["steps"])
        if not verify:
            continue
        g = store.open_world(wid)
        if entry["steps"] == 0:
            continue
        for k in cols:
            cols[k].append(g[k][:])
        grid_shapes.add(tuple(int(s) for s in g["grid"].shape[1:]))
        horizons.add(int(g["expert_controls"].shape[1]))
    cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
    ok = cat["expert_success"].astype(bool)
    counts = store.manifest["counts"]
    spw = np.asarray(steps_per_world, dtype=float)
    per_step: dict[str, Any] = {
        "grid_shapes": sorted(list(s) for s in grid_shapes),
        "horizons": sorted(horizons),
        "expert_iterations": _pct(cat["expert_iterations"][ok].astype(float), 3),
        "expert_time_ms": _pct(cat["expert_time_s"][ok] * 1e3, 3),
        "mpc_iterations": _pct(cat["mpc_iterations"].astype(float), 3),
        "mpc_time_ms": _pct(cat["mpc_time_s"] * 1e3, 3),
    }
    if not verify:
        per_step = dict.fromkeys(per_step)
    return {
        "root": str(Path(root).resolve()),
        "schema_version": store.manifest["schema_version"],
        "package_version": store.manifest.get("package_version"),
        "verified": bool(verify),
        "worlds": counts["worlds"],
        "worlds_by_status": counts["worlds_by_status"],
        "examples": counts["examples"],
        "examples_expert_converged": counts["examples_expert_converged"],
        "steps_per_world": _pct(spw, 1),
        **per_step,
        "disk_bytes": _disk_bytes(Path(root)),
        "throughput": world_throughput(store),
        "config": store.manifest["config"],
    }
