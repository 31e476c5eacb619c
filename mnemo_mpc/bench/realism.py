"""`mnemo-mpc bench realism`: success and collisions against command latency x actuator lag (issue 24), today's
controller beside the compensating one, on the same worlds.

Every cell of the grid latency in {0, 1, 2, 3} control periods x lag_v in {0, 0.1, 0.2, 0.3} s (lag_w = 0.75 lag_v)
runs the same generated worlds with a simulated robot that has that latency and lag and is otherwise ideal (slip,
odometry and the lidar as the `--realism ideal` robot, so the sweep isolates the two effects), twice:

* `plain`: the controller as it was before issue 24 -- commands assumed to act at once, exactly as planned, and the
  grid planned on as given (`ControllerConfig(actuation=None, clear_footprint=False)`);
* `compensated`: the controller told the drive's latency and lags (`ActuationModel`: the prediction over the latency
  and the lag inversion of `mnemo_mpc.nav.actuation`), with its own cells cleared -- what a user gets after
  `mnemo-mpc identify` has written the values into the profile.

Output: `cells` (one row per latency x lag x controller: success, collision, robot-caused collision and timeout rates,
time ratio p50, failed worlds), the config and version; `after_run` draws success and collision heat maps (PNG).
Episodes run in a process pool (`--workers`), one cell per task.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
from dataclasses import asdict, dataclass, replace
from typing import Any

from mnemo_mpc.errors import InputError

CONTROLLERS = ("plain", "compensated")
KINDS = ("rooms", "corridor", "doors", "clutter", "open", "mixed", "dense")


@dataclass(frozen=True)
class RealismBenchConfig:
    params_file: str | None = None  # robot profile (--params); None: the built-in robot
    worlds: int = 14
    seed: int = 1000
    latency_periods: tuple[float, ...] = (0.0, 1.0, 2.0, 3.0)
    lags_s: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3)
    lag_w_ratio: float = 0.75
    kinds: tuple[str, ...] = KINDS
    global_path: bool = True
    workers: int = 2


def quick_config() -> RealismBenchConfig:
    return RealismBenchConfig(worlds=3, latency_periods=(0.0, 2.0), lags_s=(0.0, 0.2))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="3 worlds, latency {0, 2} periods x lag {0, 0.2} s")
    parser.add_argument("--worlds", type=int, default=None, help="generated worlds per cell (default 14)")
    parser.add_argument("--seed", type=int, default=1000, help="first world seed")
    parser.add_argument("--params", default=None, help="robot profile (config/robots/*.yaml); default: built-in robot")
    parser.add_argument("--workers", type=int, default=None, help="processes (default: 2, at most the CPUs)")
    parser.add_argument(
        "--no-global-path", action="store_true", help="mapless: the controller plans its own path (with recoveries)"
    )
    parser.add_argument("--plot", default=None, help="PNG of the success and collision maps (default: OUT.png)")
    from mnemo_mpc.commands._args import world_kinds

    parser.add_argument(
        "--world-kinds",
        type=world_kinds,
        default=None,
        help="world kinds taken in turn, comma-separated (default: rooms,corridor,doors,clutter,open,mixed,dense)",
    )


def config_from_args(args: argparse.Namespace) -> RealismBenchConfig:
    cfg = quick_config() if args.quick else RealismBenchConfig()
    cfg = replace(cfg, seed=args.seed, params_file=args.params, global_path=not args.no_global_path)
    if args.worlds is not None:
        cfg = replace(cfg, worlds=args.worlds)
    if args.workers is not None:
        cfg = replace(cfg, workers=args.workers)
    if args.world_kinds is not None:
        kinds = args.world_kinds
        if any(k is None for k in kinds):
            raise InputError("--world-kinds: name the kinds (no 'any')")
        cfg = replace(cfg, kinds=tuple(kinds))
    if cfg.workers < 1 or cfg.worlds < 1:
        raise InputError("bench realism: --worlds and --workers must be >= 1")
    if cfg.params_file is not None:
        _params(cfg)  # a bad profile fails before any episode
    return cfg


def _params(cfg: RealismBenchConfig) -> Any:
    from mnemo_mpc.profile import NavParams

    if cfg.params_file is None:
        return None
    try:
        return NavParams.from_yaml(cfg.params_file)
    except InputError as exc:
        raise InputError(f"--params: {exc}") from None


def run_cell(cfg: RealismBenchConfig, latency_periods: float, lag_s: float, controller: str) -> dict[str, Any]:
    """One cell: the worlds with this latency and lag, driven by `controller` (module docstring)."""
    import numpy as np

    from mnemo_mpc.nav.actuation import ActuationModel
    from mnemo_mpc.sim.episode import EpisodeConfig, percentiles, run_episode
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.realism import Realism
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.worlds import generate_world

    setup = closed_loop_setup(_params(cfg), real_time=True, realism="ideal")
    dt = setup.mpc.dt
    latency, lag_w = latency_periods * dt, cfg.lag_w_ratio * lag_s
    realism = Realism(level="profile", latency_s=latency, lag_v_s=lag_s, lag_w_s=lag_w)
    sim_cfg = dataclasses.replace(setup.sim, realism=realism)
    tol = {"goal_tolerance_m": EpisodeConfig().goal_tolerance_m}  # as eval: the robot knows its pose here
    if controller == "plain":
        ctrl = setup.controller("shift", None, "mpc", actuation=None, clear_footprint=False, **tol)
    else:
        ctrl = setup.controller("shift", None, "mpc", actuation=ActuationModel(latency, lag_s, lag_w), **tol)
    episodes = []
    with Simulator(sim_cfg) as sim:
        for i, seed in enumerate(range(cfg.seed, cfg.seed + cfg.worlds)):
            world = generate_world(seed, setup.world, kind=cfg.kinds[i % len(cfg.kinds)])
            m = run_episode(
                world, sim=sim, controller=ctrl, config=EpisodeConfig(keep_plan_every=0, global_path=cfg.global_path)
            ).metrics
            episodes.append(m)
    n = len(episodes)
    ratios = [e["time_ratio"] for e in episodes if e["time_ratio"] is not None]
    return {
        "latency_periods": latency_periods,
        "latency_s": round(latency, 4),
        "lag_v_s": lag_s,
        "lag_w_s": round(lag_w, 4),
        "controller": controller,
        "episodes": n,
        "success_rate": sum(e["success"] for e in episodes) / n,
        "collision_rate": sum(e["collision"] for e in episodes) / n,
        "robot_caused_collision_rate": sum(e["collisions_robot_caused"] for e in episodes) / n,
        "timeout_rate": sum(e["timeout"] for e in episodes) / n,
        "time_ratio_p50": percentiles(ratios, 3)["p50"],
        "min_clearance_min_m": float(np.min([e["min_clearance_m"] for e in episodes])),
        "failed_worlds": [e["world"] for e in episodes if not e["success"]],
    }


def _cell_task(args: tuple) -> dict[str, Any]:
    from mnemo_mpc.planning.mpc import single_threaded_blas

    single_threaded_blas()
    return run_cell(*args)


def run(cfg: RealismBenchConfig, progress: bool = True) -> dict[str, Any]:
    import multiprocessing as mp

    from tqdm import tqdm

    from mnemo_mpc import __version__

    tasks = [(cfg, lat, lag, ctrl) for lat in cfg.latency_periods for lag in cfg.lags_s for ctrl in CONTROLLERS]
    workers = max(1, min(cfg.workers, len(tasks), os.cpu_count() or 1))
    cells: list[dict[str, Any]] = []
    with tqdm(total=len(tasks), unit="cell", disable=not progress) as bar:
        if workers == 1:
            for t in tasks:
                cells.append(run_cell(*t))
                bar.update()
        else:
            with mp.get_context("spawn").Pool(workers) as pool:
                for cell in pool.imap_unordered(_cell_task, tasks):
                    cells.append(cell)
                    bar.update()
    cells.sort(key=lambda c: (c["latency_periods"], c["lag_v_s"], CONTROLLERS.index(c["controller"])))
    return {
        "benchmark": "realism",
        "version": __version__,
        "config": asdict(cfg),
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count()},
        "cells": cells,
    }


def report(result: dict[str, Any]) -> str:
    lines = ["latency [periods]  lag_v [s]  plain: success / collisions   compensated: success / collisions"]
    by = {(c["latency_periods"], c["lag_v_s"], c["controller"]): c for c in result["cells"]}
    for lat, lag in sorted({(c["latency_periods"], c["lag_v_s"]) for c in result["cells"]}):
        p, q = by[(lat, lag, "plain")], by[(lat, lag, "compensated")]
        lines.append(
            f"{lat:17g}  {lag:9g}  {p['success_rate']:14.2f} / {p['collision_rate']:.2f}"
            f"   {q['success_rate']:20.2f} / {q['collision_rate']:.2f}"
        )
    return "\n".join(lines)


def after_run(result: dict[str, Any], args: argparse.Namespace) -> list[str]:
    import io
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from mnemo_mpc.atomic import atomic_write_bytes

    out = Path(args.plot) if getattr(args, "plot", None) else Path(args.out).with_suffix(".png")
    cells = result["cells"]
    lats = sorted({c["latency_periods"] for c in cells})
    lags = sorted({c["lag_v_s"] for c in cells})
    by = {(c["latency_periods"], c["lag_v_s"], c["controller"]): c for c in cells}
    fig, axes = plt.subplots(2, 2, figsize=(10, 8), constrained_layout=True)
    for row, (key, title, cmap) in enumerate(
        (("success_rate", "success rate", "Greens"), ("collision_rate", "collision rate", "Reds"))
    ):
        for col, ctrl in enumerate(CONTROLLERS):
            ax = axes[row, col]
            grid = np.array([[by[(lat, lag, ctrl)][key] for lag in lags] for lat in lats])
            ax.imshow(grid, cmap=cmap, vmin=0, vmax=1, origin="lower", aspect="auto")
            for i in range(len(lats)):
                for j in range(len(lags)):
                    color = "white" if grid[i, j] > 0.6 else "black"  # readable on the dark end of the map
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=10, color=color)
            ax.set_xticks(range(len(lags)), [f"{v:g}" for v in lags])
            ax.set_yticks(range(len(lats)), [f"{v:g}" for v in lats])
            ax.set_xlabel("actuator lag, v [s] (w: 0.75x)")
            ax.set_ylabel("command latency [control periods]")
            ax.set_title(f"{title}: {ctrl} controller")
    cfg = result["config"]
    fig.suptitle(
        f"{cfg['params_file'] or 'built-in robot'}, {cfg['worlds']} worlds per cell from seed {cfg['seed']}"
        + ("" if cfg["global_path"] else ", mapless")
    )
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())
    return [str(out)]
