"""Simulator timing benchmark: per control step, the physics substeps, the lidar scan and the local-grid update.

    mnemo-mpc bench sim --worlds 6 --steps 100 --out out/bench_sim.json

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
from dataclasses import dataclass

import numpy as np

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimBenchConfig:
    worlds: int = 6
    steps: int = 100
    beams: int = 360
    seed: int = 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of `mnemo-mpc bench sim` (import-light: the simulator is imported only when run)."""
    d = SimBenchConfig()
    p.add_argument("--worlds", type=int, default=d.worlds, help="generated worlds (kinds cycled)")
    p.add_argument("--steps", type=int, default=d.steps, help="control steps per world")
    p.add_argument("--beams", type=int, default=d.beams, help="lidar beams")
    p.add_argument("--seed", type=int, default=d.seed, help="first world seed")


def config_from_args(args: argparse.Namespace) -> SimBenchConfig:
    return SimBenchConfig(worlds=args.worlds, steps=args.steps, beams=args.beams, seed=args.seed)


def run(config: SimBenchConfig, progress: bool = True) -> dict:
    return run_benchmark(config.worlds, config.steps, config.beams, config.seed)


def run_benchmark(worlds: int, steps: int, beams: int, seed: int = 0) -> dict:
    """Time `steps` control steps in each of `worlds` generated worlds (kinds cycled)."""
    from mnemo_mpc.sim.lidar import LidarConfig
    from mnemo_mpc.sim.simulator import SimConfig, Simulator
    from mnemo_mpc.sim.worlds import KINDS, WorldConfig, generate_world

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
