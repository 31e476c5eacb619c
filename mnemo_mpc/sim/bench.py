"""Simulator timing benchmark: per control step, the physics substeps, the lidar scan and the local-grid update.

    python -m mnemo_mpc.sim.bench --worlds 6 --steps 100 --out out/bench_sim.json

`step_cpu` is the process CPU time of a whole step: on a shared, oversubscribed machine the wall-clock figures include
time spent preempted, the CPU figure does not. Drives a fixed smooth command pattern (collisions are irrelevant to
timing; the robot just stops at walls) through generated worlds of every kind and writes median / p95 milliseconds
per stage with the configs used.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import platform
import time
from pathlib import Path

import numpy as np

from mnemo_mpc.atomic import atomic_write_json
from mnemo_mpc.planning.worlds import KINDS, WorldConfig, generate_world
from mnemo_mpc.sim.lidar import LidarConfig
from mnemo_mpc.sim.simulator import SimConfig, Simulator

log = logging.getLogger(__name__)


def run_benchmark(worlds: int, steps: int, beams: int, seed: int = 0) -> dict:
    """Time `steps` control steps in each of `worlds` generated worlds (kinds cycled)."""
    cfg = SimConfig(lidar=LidarConfig(num_beams=beams))
    stages: dict[str, list[float]] = {
        "physics": [],
        "lidar": [],
        "grid": [],
        "step_total": [],
        "step_cpu": [],
        "reset": [],
        "gen": [],
    }
    with Simulator(cfg) as sim:
        for i in range(worlds):
            t0 = time.perf_counter()
            world = generate_world(seed + i, WorldConfig(), kind=KINDS[i % len(KINDS)])
            t1 = time.perf_counter()
            sim.reset(world)
            t2 = time.perf_counter()
            stages["gen"].append(t1 - t0)
            stages["reset"].append(t2 - t1)
            for k in range(steps):
                t, c = time.perf_counter(), time.process_time()
                sim.step(0.4, 0.8 * np.sin(0.05 * k))
                stages["step_cpu"].append(time.process_time() - c)
                stages["step_total"].append(time.perf_counter() - t)
                stages["physics"].append(sim.timing.physics_s)
                stages["lidar"].append(sim.timing.lidar_s)
                stages["grid"].append(sim.timing.grid_s)
    summary = {
        name: {
            "median_ms": float(np.median(v) * 1e3),
            "p95_ms": float(np.percentile(v, 95) * 1e3),
            "mean_ms": float(np.mean(v) * 1e3),
            "n": len(v),
        }
        for name, v in stages.items()
    }
    return {
        "what": "mnemo_mpc.sim per-control-step timing (wall clock, single process)",
        "worlds": worlds,
        "steps_per_world": steps,
        "substeps_per_step": int(round(cfg.control_dt * cfg.physics_hz)),
        "sim_config": dataclasses.asdict(cfg),
        "timing": summary,
        "machine": {"python": platform.python_version(), "processor": platform.processor(), "node": platform.node()},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worlds", type=int, default=6)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--beams", type=int, default=360)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("out/bench_sim.json"))
    args = ap.parse_args(argv)
    result = run_benchmark(args.worlds, args.steps, args.beams, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(args.out, result)
    for name, s in result["timing"].items():
        log.warning("%-10s median %7.2f ms  p95 %7.2f ms", name, s["median_ms"], s["p95_ms"])
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    raise SystemExit(main())
