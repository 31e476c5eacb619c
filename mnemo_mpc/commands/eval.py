"""`mnemo-mpc eval (--worlds N --seed S | --map MAP.yaml --start x,y,yaw --goal x,y,yaw | --scenarios FILE.json)
--out FILE.json`: closed-loop navigation episodes and their success / collision / timeout rates.

A scenarios file is a JSON list of {"map", "start", "goal", "goal_tolerance_m", "time_limit_s"} with map paths
relative to the file (the last two keys are optional).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mnemo_mpc.errors import InputError
from mnemo_mpc.warmstart import MODES


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="closed-loop evaluation over generated worlds, a map, or a scenarios file")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--worlds", type=int, help="number of generated worlds, seeds S..S+N-1")
    src.add_argument("--map", help="ROS map_server YAML (with --start and --goal)")
    src.add_argument("--scenarios", help="JSON list of {map, start, goal, goal_tolerance_m, time_limit_s}")
    p.add_argument("--seed", type=int, default=1000, help="first world seed with --worlds (default 1000)")
    p.add_argument("--start", help="x,y,yaw with --map")
    p.add_argument("--goal", help="x,y,yaw with --map")
    p.add_argument("--goal-tolerance", type=float, default=0.25, help="metres (default 0.25)")
    p.add_argument("--time-limit", type=float, default=None, help="seconds per episode (default: from path length)")
    add_warmstart_arguments(p)
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=handler)


def add_warmstart_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--warmstart",
        choices=MODES,
        default=None,
        help="SQP start: hold the pose, the shifted previous plan, the learned model, or the better of the last two "
        "(default: hybrid when a shipped model fits the robot, else shift)",
    )
    p.add_argument("--model", default=None, help="warm-start model (ONNX); default: a shipped one that fits the robot")


def warmstart_controller(args: argparse.Namespace, robot: Any = None, mpc_config: Any = None, **config: Any) -> Any:
    """A Controller with the warm start the flags ask for (see `add_warmstart_arguments`)."""
    from mnemo_mpc.nav.controller import Controller, ControllerConfig
    from mnemo_mpc.planning.mpc import MPCConfig
    from mnemo_mpc.planning.robot import RobotModel
    from mnemo_mpc.warmstart.runtime import resolve

    robot, mpc_config = robot or RobotModel(), mpc_config or MPCConfig()
    mode, provider = resolve(args.warmstart, args.model, robot, mpc_config.N, mpc_config.dt)
    return Controller(robot, mpc_config, ControllerConfig(warm_start=mode, **config), provider)


def _pose(text: str | list | None, name: str) -> list[float]:
    from mnemo_mpc.sim.world import parse_pose

    if text is None:
        raise InputError(f"{name}: required with --map (x,y,yaw)")
    return parse_pose(text, name).tolist()


def _map_file(path: Path, name: str) -> Path:
    if not path.is_file():
        raise InputError(f"{name}: map file not found: {path}")
    return path


def load_scenarios(path: str | Path) -> list[dict[str, Any]]:
    """Parse and check a scenarios file; map paths are resolved relative to it."""
    import json

    path = Path(path)
    try:
        items = json.loads(path.read_text())
    except OSError as exc:
        raise InputError(f"--scenarios: cannot read {path} ({exc})") from exc
    except ValueError as exc:
        raise InputError(f"--scenarios: {path} is not valid JSON ({exc})") from exc
    if not isinstance(items, list) or not items:
        raise InputError(f"--scenarios: {path} must hold a non-empty JSON list of scenarios")
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not {"map", "start", "goal"} <= set(item):
            raise InputError(f"--scenarios: {path} item {i}: expected an object with map, start and goal")
        out.append(
            {
                "map": _map_file(path.parent / item["map"], f"{path} item {i} map"),
                "start": _pose(item["start"], f"{path} item {i} start"),
                "goal": _pose(item["goal"], f"{path} item {i} goal"),
                "goal_tolerance_m": item.get("goal_tolerance_m"),
                "time_limit_s": item.get("time_limit_s"),
            }
        )
    return out


def handler(args: argparse.Namespace) -> int:
    import dataclasses

    import numpy as np
    from tqdm import tqdm

    from mnemo_mpc import __version__
    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.sim.episode import EpisodeConfig, percentiles, run_episode
    from mnemo_mpc.sim.simulator import Simulator

    # Each job: (label, make_world callable, goal tolerance, time limit).
    jobs: list[tuple[str, Any, float, float | None]] = []
    if args.worlds is not None:
        if args.worlds < 1:
            raise InputError(f"--worlds: expected >= 1, got {args.worlds}")
        from mnemo_mpc.planning.worlds import generate_world

        for seed in range(args.seed, args.seed + args.worlds):
            jobs.append((f"seed {seed}", lambda s=seed: generate_world(s), args.goal_tolerance, args.time_limit))
    else:
        from mnemo_mpc.sim.world import load_map_world

        if args.map is not None:
            scen = [
                {
                    "map": _map_file(Path(args.map), "--map"),
                    "start": _pose(args.start, "--start"),
                    "goal": _pose(args.goal, "--goal"),
                    "goal_tolerance_m": None,
                    "time_limit_s": None,
                }
            ]
        else:
            scen = load_scenarios(args.scenarios)
        for sc in scen:
            jobs.append(
                (
                    str(sc["map"]),
                    lambda sc=sc: load_map_world(sc["map"], np.array(sc["start"]), np.array(sc["goal"])),
                    sc["goal_tolerance_m"] or args.goal_tolerance,
                    sc["time_limit_s"] or args.time_limit,
                )
            )
        # Load every map up front so a bad map or an infeasible start fails before any episode runs.
        loaded = [make() for _, make, _, _ in jobs]
        jobs = [(label, (lambda w=w: w), tol, tl) for (label, _, tol, tl), w in zip(jobs, loaded, strict=True)]

    episodes, all_iters, all_times, starts = [], [], [], {}
    controller = warmstart_controller(args, goal_tolerance_m=args.goal_tolerance)
    with Simulator() as sim:
        for label, make_world, tol, time_limit in tqdm(jobs, unit="episode", disable=args.no_progress):
            world = make_world()
            controller.config = dataclasses.replace(controller.config, goal_tolerance_m=tol)
            cfg = EpisodeConfig(goal_tolerance_m=tol, time_limit_s=time_limit, keep_plan_every=0)
            result = run_episode(world, sim=sim, controller=controller, config=cfg)
            m = dict(result.metrics, source=label)
            episodes.append(m)
            all_iters += [s["iterations"] for s in result.steps if s["status"] == "planned" or s["iterations"]]
            all_times += [s["solve_time_s"] * 1e3 for s in result.steps if s["status"] == "planned" or s["iterations"]]
            for s in result.steps:
                starts[s["start"]] = starts.get(s["start"], 0) + 1
            if args.no_progress:
                print(f"{label}: {m['outcome']} {m['time_s']:.1f}s {m['path_length_m']:.2f}m")

    n = len(episodes)
    ok = [e for e in episodes if e["success"]]
    summary = {
        "version": __version__,
        "source": {"worlds": args.worlds, "seed": args.seed, "map": args.map, "scenarios": args.scenarios},
        "n_episodes": n,
        "success_rate": sum(e["success"] for e in episodes) / n,
        "collision_rate": sum(e["collision"] for e in episodes) / n,
        "timeout_rate": sum(e["timeout"] for e in episodes) / n,
        "mean_time_s": float(np.mean([e["time_s"] for e in ok])) if ok else None,
        "mean_path_length_m": float(np.mean([e["path_length_m"] for e in ok])) if ok else None,
        "warmstart": controller.config.warm_start,
        "model": getattr(controller.warm_start_provider, "describe", lambda: None)(),
        "starts_used": starts,
        "step_iterations": percentiles(all_iters, 3),
        "step_solve_time_ms": percentiles(all_times, 3),
        "config": {
            "robot": dataclasses.asdict(controller.robot),
            "mpc": dataclasses.asdict(controller.mpc_config),
            "controller": dataclasses.asdict(controller.config),
        },
        "episodes": episodes,
    }
    atomic_write_json(args.out, summary)
    print(
        f"{n} episodes: success_rate {summary['success_rate']:.3f}, collision_rate {summary['collision_rate']:.3f}, "
        f"timeout_rate {summary['timeout_rate']:.3f} ({summary['warmstart']} starts: {starts}), mean time "
        f"{'n/a' if summary['mean_time_s'] is None else format(summary['mean_time_s'], '.2f')} s; "
        f"iterations mean {summary['step_iterations']['mean']} p50 {summary['step_iterations']['p50']} "
        f"p95 {summary['step_iterations']['p95']}, "
        f"solve ms p50 {summary['step_solve_time_ms']['p50']} p95 {summary['step_solve_time_ms']['p95']}"
    )
    print(f"wrote {args.out}")
    return 0
