"""`mnemo-mpc eval (--worlds N --seed S [--world-kinds K,...] [--moving-obstacles M] | --map MAP.yaml --start x,y,yaw
--goal x,y,yaw | --scenarios FILE.json) --out FILE.json`: closed-loop navigation episodes and their success /
collision / timeout rates, collisions by cause (the robot drove into it / a moving obstacle ran into the robot), time
ratio (time over global path length / v_max) and minimum clearance.

A scenarios file is a JSON list of {"map", "start", "goal", "goal_tolerance_m", "time_limit_s"} with map paths
relative to the file (the last two keys are optional).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mnemo_mpc.commands import _args
from mnemo_mpc.errors import InputError
from mnemo_mpc.profile import MOVING_PREDICTION
from mnemo_mpc.warmstart import MODES, SQP_MODES

# Keys of one scenario: the required ones, then the optional ones ("name" and "source" describe it for people).
SCENARIO_KEYS = ("map", "start", "goal")
SCENARIO_OPTIONAL_KEYS = ("goal_tolerance_m", "time_limit_s", "name", "source")
MAX_SCENARIOS_BYTES = 16 << 20  # a scenarios file lists maps by path; megabytes of JSON are not one


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("eval", help="closed-loop evaluation over generated worlds, a map, or a scenarios file")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--worlds", type=_args.count, help="number of generated worlds, seeds S..S+N-1")
    src.add_argument("--map", help="ROS map_server YAML (with --start and --goal)")
    src.add_argument("--scenarios", help="JSON list of {map, start, goal, goal_tolerance_m, time_limit_s}")
    p.add_argument("--seed", type=_args.seed, default=1000, help="first world seed with --worlds (default 1000)")
    _args.add_world_arguments(p, " with --worlds")
    p.add_argument("--start", type=_args.pose, help="x,y,yaw with --map")
    p.add_argument("--goal", type=_args.pose, help="x,y,yaw with --map")
    p.add_argument("--goal-tolerance", type=_args.distance_m, default=0.25, help="metres (default 0.25)")
    p.add_argument(
        "--time-limit", type=_args.duration_s, default=None, help="seconds per episode (default: from path length)"
    )
    _args.add_controller_argument(p, several=True)
    add_warmstart_arguments(p)
    _args.add_params_argument(p)
    _args.add_realism_argument(p)
    p.add_argument(
        "--costmap",
        choices=("raw", "inflated"),
        default="raw",
        help="the grid the planner gets: the fused lidar occupancy (raw, default), or a Nav2 local costmap of it "
        "(inflated: Nav2's inflation layer with its defaults, read with the profile's Nav2 costmap_semantics, else "
        "nav2_costmap, and its costmap_cost_weight; docs/costmap.md)",
    )
    p.add_argument(
        "--no-global-path",
        action="store_true",
        help="give the controller no global path: it plans its own on what it has seen, with recoveries",
    )
    p.add_argument(
        "--plain-controller",
        action="store_true",
        help="the controller without the drive's compensation and footprint clearing (commands assumed to act at "
        "once, the grid as given): the baseline the realistic rows are compared with",
    )
    p.add_argument(
        "--moving-prediction",
        choices=MOVING_PREDICTION,
        default=None,
        help="moving obstacles tracked and met as predicted over the horizon (track), or only detected, the room "
        "they can cover marked occupied (reach) (default: the profile's moving_prediction, reach)",
    )
    p.add_argument("--out", required=True, help="result JSON")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=handler)


def add_warmstart_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--warmstart",
        choices=MODES,
        default=None,
        help="SQP start: hold the pose, the shifted previous plan, the learned model, or the shift where there is "
        "one and the learned start where there is none (default: hybrid when a shipped model fits the robot, else "
        "shift)",
    )
    p.add_argument("--model", default=None, help="warm-start model (ONNX); default: a shipped one that fits the robot")
    p.add_argument(
        "--sqp-mode",
        choices=SQP_MODES,
        default=None,
        help="SQP iterations per tick: to convergence (full), or one (rti: real-time iteration, its iterate sent when "
        "collision-free) (default: the profile's sqp_mode, full)",
    )


def warmstart_controller(args: argparse.Namespace, setup: Any, **config: Any) -> Any:
    """The profile's Controller (`ClosedLoopSetup.controller`) with the warm start the flags ask for (see
    `add_warmstart_arguments`; without them, the profile's `warm_start`)."""
    if getattr(args, "sqp_mode", None) is not None:
        config["sqp_mode"] = args.sqp_mode
    return setup.controller(args.warmstart, args.model, "mpc", **config)


def build_controller(args: argparse.Namespace, setup: Any, name: str, **config: Any) -> Any:
    """The planner `name` for the profile `setup`: "mpc" with the warm start the flags ask for
    (`warmstart_controller`), or a peer (`mnemo_mpc.peers.make_controller`) on the same robot, MPC horizon and
    controller settings; `config` overrides ControllerConfig fields for either."""
    if name == "mpc":
        return warmstart_controller(args, setup, **config)
    return setup.controller(planner=name, **config)


def _pose(value: Any, name: str) -> list[float]:
    if value is None:
        raise InputError(f"{name}: required with --map (x,y,yaw)")
    return _args.parse_pose(value, name)


def _map_file(path: Path, name: str) -> Path:
    return _args.check_input_file(path, name, what="map file")


def load_scenarios(path: str | Path) -> list[dict[str, Any]]:
    """Parse and check a scenarios file, every field of every scenario, before any episode runs: a wrong value is an
    InputError naming the file, the scenario's index and the field. Map paths are resolved relative to the file."""
    import json

    path = _args.check_input_file(path, "--scenarios")
    if path.stat().st_size > MAX_SCENARIOS_BYTES:
        raise InputError(f"--scenarios: {path} is larger than {MAX_SCENARIOS_BYTES >> 20} MiB; not a scenarios file")
    try:
        items = json.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise InputError(f"--scenarios: cannot read {path} ({exc})") from exc
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise InputError(f"--scenarios: {path} is not valid JSON ({exc})") from exc
    if not isinstance(items, list) or not items:
        raise InputError(f"--scenarios: {path} must hold a non-empty JSON list of scenarios")
    out = []
    for i, item in enumerate(items):
        where = f"--scenarios: {path} item {i}"
        if not isinstance(item, dict) or not set(SCENARIO_KEYS) <= set(item):
            raise InputError(f"{where}: expected an object with map, start and goal")
        unknown = sorted(set(item) - set(SCENARIO_KEYS) - set(SCENARIO_OPTIONAL_KEYS))
        if unknown:
            allowed = ", ".join(SCENARIO_KEYS + SCENARIO_OPTIONAL_KEYS)
            raise InputError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))}; expected {allowed}")
        if not isinstance(item["map"], str) or not item["map"]:
            raise InputError(f"{where} map: expected a map YAML path (a string), got {item['map']!r}")
        for key in ("name", "source"):
            if key in item and not isinstance(item[key], str):
                raise InputError(f"{where} {key}: expected a string, got {item[key]!r}")
        tolerance, time_limit = item.get("goal_tolerance_m"), item.get("time_limit_s")
        out.append(
            {
                "map": _map_file(path.parent / item["map"], f"{where} map"),
                "start": _pose(item["start"], f"{where} start"),
                "goal": _pose(item["goal"], f"{where} goal"),
                "goal_tolerance_m": None
                if tolerance is None
                else _args.number(tolerance, f"{where} goal_tolerance_m", low=0, high=_args.MAX_COORDINATE_M),
                "time_limit_s": None
                if time_limit is None
                else _args.number(time_limit, f"{where} time_limit_s", low=0, high=_args.MAX_TIME_S),
            }
        )
    return out


def handler(args: argparse.Namespace) -> int:
    # Every argument and file is checked before the simulator and the solver are loaded.
    _args.check_output_file(args.out, "--out")
    _args.check_warmstart(args)
    params = _args.load_params(args)
    names = _args.check_controller(args, params)
    if args.map is None and (args.start is not None or args.goal is not None):
        raise InputError(f"{'--start' if args.start is not None else '--goal'}: only with --map")
    if args.worlds is None and (args.world_kinds is not None or args.moving_obstacles or args.moving_kind != "patrol"):
        wrong = "--world-kinds" if args.world_kinds is not None else "--moving-obstacles"
        raise InputError(f"{wrong if args.moving_kind == 'patrol' else '--moving-kind'}: only with --worlds")
    scen: list[dict[str, Any]] = []
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
    elif args.scenarios is not None:
        scen = load_scenarios(args.scenarios)

    import numpy as np

    from mnemo_mpc.atomic import atomic_write_json
    from mnemo_mpc.sim.profile import closed_loop_setup

    # One profile (--params, else the default robot) sizes the robot, the MPC step, the simulator and the worlds.
    setup = closed_loop_setup(
        params,
        real_time=True,
        realism=args.realism,
        costmap=args.costmap,
        moving_obstacles=args.moving_obstacles,
        moving_kind=args.moving_kind,
    )

    # Each job: (label, make_world callable, goal tolerance, time limit).
    jobs: list[tuple[str, Any, float, float | None]] = []
    if args.worlds is not None:
        from mnemo_mpc.sim.worlds import generate_world

        kinds = args.world_kinds or (None,)
        world_cfg = setup.world
        # Every world is generated (and its kind's passages checked) before the first episode runs.
        for i, seed in enumerate(range(args.seed, args.seed + args.worlds)):
            world = generate_world(seed, world_cfg, kind=kinds[i % len(kinds)])
            jobs.append((f"seed {seed}", lambda w=world: w, args.goal_tolerance, args.time_limit))
    else:
        from mnemo_mpc.sim.world import load_map_world

        for sc in scen:
            jobs.append(
                (
                    str(sc["map"]),
                    lambda sc=sc: load_map_world(
                        sc["map"],
                        np.array(sc["start"]),
                        np.array(sc["goal"]),
                        robot_radius_m=setup.world.robot_radius_m,
                        safety_margin_m=setup.world.safety_margin_m,
                    ),
                    sc["goal_tolerance_m"] or args.goal_tolerance,
                    sc["time_limit_s"] or args.time_limit,
                )
            )
        # Load every map up front so a bad map or an infeasible start fails before any episode runs.
        loaded = [make() for _, make, _, _ in jobs]
        jobs = [(label, (lambda w=w: w), tol, tl) for (label, _, tol, tl), w in zip(jobs, loaded, strict=True)]

    runs = {}
    for name in names:
        runs[name] = evaluate(args, setup, jobs, name)
        if len(names) > 1:
            print(f"--- {name}")
            if len(runs) < len(names):
                # The planners done so far, marked incomplete: a run of several (the Jackal's three took 1 h 43 min)
                # interrupted later keeps them. The whole table replaces it at the end.
                atomic_write_json(args.out, _peer_json(runs, complete=False))
        report(runs[name])
    if len(names) == 1:
        atomic_write_json(args.out, runs[names[0]])
        print(f"wrote {args.out}")
        return 0
    from mnemo_mpc.commands.table import plot_table, write_table

    result = _peer_json(runs, complete=True)
    rows = result["table"]
    plot = Path(args.out).with_suffix(".png")
    atomic_write_json(args.out, result)
    print(write_table(rows))
    plot_table(rows, plot)
    print(f"wrote {args.out} and {plot}")
    return 0


def _peer_json(runs: dict[str, dict[str, Any]], complete: bool) -> dict[str, Any]:
    """The JSON of a run of several planners: their table and each one's summary; `complete` False while some are
    still to run."""
    from mnemo_mpc import __version__
    from mnemo_mpc.commands.table import peer_table

    return {
        "version": __version__,
        "controllers": list(runs),
        "complete": complete,
        "table": peer_table(runs),
        "runs": runs,
    }


def evaluate(args: argparse.Namespace, setup: Any, jobs: list, name: str) -> dict[str, Any]:
    """Every job (label, make_world, goal tolerance, time limit) driven by the planner `name`: the summary JSON of one
    planner (rates, time ratio, clearance, step time per family, config, episodes)."""
    import dataclasses

    import numpy as np
    from tqdm import tqdm

    from mnemo_mpc import __version__
    from mnemo_mpc.commands._logs import episode_notes
    from mnemo_mpc.sim.episode import EpisodeConfig, count_starts, percentiles, run_episode, solve_steps
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.tracking_eval import TrackerObserver, summarise

    episodes, all_iters, all_times, starts = [], [], [], {}
    step_ms_by_family: dict[str, list[float]] = {}
    plain = {"actuation": None, "clear_footprint": False} if args.plain_controller else {}
    if args.moving_prediction is not None:
        from mnemo_mpc.nav.prediction import PredictionConfig

        plain["tracking"] = PredictionConfig() if args.moving_prediction == "track" else None
    controller = build_controller(
        args, setup, name, goal_tolerance_m=setup.goal_tolerance(args.goal_tolerance), **plain
    )
    tracking = controller.config.tracking is not None
    track_records: list[dict[str, Any]] = []
    # The controller's per-step notes (starts blocked by moving obstacles, recoveries) are counted, not printed into
    # the progress bar; one line sums them up after the episodes (`_logs.episode_notes`; `mnemo-mpc -v` prints each).
    with episode_notes(verbose=getattr(args, "verbose", False)), Simulator(setup.sim) as sim:
        for label, make_world, tol, time_limit in tqdm(jobs, unit="episode", desc=name, disable=args.no_progress):
            world = make_world()
            controller.config = dataclasses.replace(controller.config, goal_tolerance_m=setup.goal_tolerance(tol))
            cfg = EpisodeConfig(
                goal_tolerance_m=tol, time_limit_s=time_limit, keep_plan_every=0, global_path=not args.no_global_path
            )
            # The controller's own tracks, scored against the world's moving obstacles (`sim.tracking_eval`)
            observer = TrackerObserver(None, sim, world) if tracking else None
            result = run_episode(world, sim=sim, controller=controller, config=cfg, observer=observer)
            if observer is not None:
                track_records.append(result.record)
            m = dict(result.metrics, source=label)
            episodes.append(m)
            solves = solve_steps(result.steps)
            all_iters += [s["iterations"] for s in solves]
            all_times += [s["solve_time_s"] * 1e3 for s in solves]
            count_starts(result.steps, starts)
            family = step_ms_by_family.setdefault(world.kind if args.worlds is not None else "map", [])
            family += [s["step_time_s"] * 1e3 for s in result.steps]
            if args.no_progress:
                print(f"{label}: {m['outcome']} {m['time_s']:.1f}s {m['path_length_m']:.2f}m")

    n = len(episodes)
    ok = [e for e in episodes if e["success"]]
    clearances = [e["min_clearance_m"] for e in episodes if e["min_clearance_m"] is not None]
    summary = {
        "version": __version__,
        "controller": name,
        "source": {
            "worlds": args.worlds,
            "seed": args.seed,
            "world_kinds": [k or "any" for k in args.world_kinds or (None,)] if args.worlds is not None else None,
            "moving_obstacles": args.moving_obstacles if args.worlds is not None else None,
            "moving_kind": args.moving_kind if args.worlds is not None else None,
            "global_path": not args.no_global_path,
            "plain_controller": args.plain_controller,
            # the grid the planner got and how it read it (issue 29; the MPC's weight is config.mpc.costmap_cost_weight)
            "costmap": getattr(args, "costmap", "raw"),
            "costmap_semantics": setup.profile.params.costmap_semantics,
            "moving_prediction": "track" if controller.config.tracking is not None else "reach",
            "map": args.map,
            "scenarios": args.scenarios,
        },
        "n_episodes": n,
        "success_rate": sum(e["success"] for e in episodes) / n,
        "collision_rate": sum(e["collision"] for e in episodes) / n,
        "timeout_rate": sum(e["timeout"] for e in episodes) / n,
        "mean_time_s": float(np.mean([e["time_s"] for e in ok])) if ok else None,
        "mean_path_length_m": float(np.mean([e["path_length_m"] for e in ok])) if ok else None,
        "robot_caused_collision_rate": sum(e["collisions_robot_caused"] for e in episodes) / n,
        "obstacle_caused_collision_rate": sum(e["collisions_obstacle_caused"] for e in episodes) / n,
        # Successful episodes' time over global path length / v_max, and every episode's minimum clearance.
        "time_ratio": percentiles([e["time_ratio"] for e in ok if e["time_ratio"] is not None], 3),
        "min_clearance_m": percentiles(clearances, 4),
        "min_clearance_p5_m": _p5(clearances),
        "min_clearance_min_m": round(min(clearances), 4) if clearances else None,
        "warmstart": controller.config.warm_start if name == "mpc" else None,
        "sqp_mode": controller.config.sqp_mode if name == "mpc" else None,
        "model": getattr(controller.warm_start_provider, "describe", lambda: None)(),
        "starts_used": starts,
        "step_iterations": percentiles(all_iters, 3),
        "step_solve_time_ms": percentiles(all_times, 3),
        # The whole control step per world family against the period (issue 10: p99 <= 50 %, max <= 100 %).
        "period_ms": round(controller.mpc_config.dt * 1e3, 3),
        "step_time_ms_by_family": {k: percentiles(v, 3) for k, v in sorted(step_ms_by_family.items())},
        "step_time_ms": percentiles([t for v in step_ms_by_family.values() for t in v], 3),  # every step, pooled
        "overrun_steps": sum(e["overrun_steps"] for e in episodes),
        "recoveries": sum(e["recoveries"] for e in episodes),
        "failed_rate": sum(e["failed"] for e in episodes) / n,
        "realism": setup.realism.to_dict(),
        "failed_worlds": [e["world"] for e in episodes if not e["success"]],
        # The local grid against the world near obstacles (`sim.episode.GridError`; positive: walls shown nearer):
        # the median over episodes of each one's p50 and p95, and the extremes
        "grid_error_m": _error_summary([e["grid_error_m"] for e in episodes], ("p50", "p95")),
        # The field the MPC planned on, the same way (its surface points included); negative: a wall believed farther
        "field_error_m": _error_summary([e["field_error_m"] for e in episodes], ("p50", "p5")),
        "first_move_s": percentiles([e["first_move_s"] for e in episodes if e["first_move_s"] is not None], 3),
        "never_moved": sum(e["first_move_s"] is None for e in episodes),
        # With --moving-prediction track: the controller's confirmed tracks against the world's moving obstacles
        # (false tracks per 1,000 steps, obstacles tracked, velocity error); None without tracking.
        "tracking": summarise(track_records) if tracking else None,
        "config": {
            "params": args.params,
            "planner": getattr(controller, "describe", lambda: {"controller": name})(),
            "robot": dataclasses.asdict(controller.robot),
            "mpc": dataclasses.asdict(controller.mpc_config),
            "controller": dataclasses.asdict(controller.config),
            "sim": dataclasses.asdict(setup.sim),
            "realism": setup.realism.to_dict(),
            "world": dataclasses.asdict(setup.world) if args.worlds is not None else None,
        },
        "episodes": episodes,
    }
    return summary


def report(summary: dict[str, Any]) -> None:
    """The console lines of one planner's summary."""
    print(
        f"{summary['n_episodes']} episodes ({summary['controller']}): success_rate {summary['success_rate']:.3f}, "
        f"collision_rate {summary['collision_rate']:.3f}, timeout_rate {summary['timeout_rate']:.3f} "
        f"({summary['warmstart']} starts: {summary['starts_used']}), mean time "
        f"{'n/a' if summary['mean_time_s'] is None else format(summary['mean_time_s'], '.2f')} s; "
        f"iterations mean {summary['step_iterations']['mean']} p50 {summary['step_iterations']['p50']} "
        f"p95 {summary['step_iterations']['p95']}, "
        f"solve ms p50 {summary['step_solve_time_ms']['p50']} p95 {summary['step_solve_time_ms']['p95']}"
    )
    print(
        f"collisions caused by the robot {summary['robot_caused_collision_rate']:.3f}, by an obstacle "
        f"{summary['obstacle_caused_collision_rate']:.3f}; time ratio p50 {summary['time_ratio']['p50']}; "
        f"min clearance p50 {summary['min_clearance_m']['p50']} m, min {summary['min_clearance_min_m']} m"
    )
    ge = summary["grid_error_m"]
    print(f"local grid vs world near obstacles: walls nearer by p50 {ge['p50']} p95 {ge['p95']} m (min {ge['min']} m)")
    fe = summary["field_error_m"]
    print(f"the field the MPC planned on vs world: walls nearer by p50 {fe['p50']}, p5 {fe['p5']}, min {fe['min']} m")
    pct = summary["step_time_ms"]
    print(f"step time, every step: p50 {pct['p50']} p99 {pct['p99']} ms, max {pct['max']} ms")
    for family, pct in summary["step_time_ms_by_family"].items():
        print(f"step time {family}: p99 {pct['p99']} ms, max {pct['max']} ms (period {summary['period_ms']} ms)")
    tr = summary.get("tracking")
    if tr:
        print(
            f"tracking: {tr['false_tracks']} false tracks in {tr['steps']} steps "
            f"({tr['false_tracks_per_1000_steps']} per 1,000); obstacles tracked {tr['obstacles_tracked_fraction']}, "
            f"velocity error p50 {tr['velocity_error_m_s']['p50']} m/s"
        )
    if summary["failed_worlds"]:
        print(f"not successful: {', '.join(summary['failed_worlds'])}")


def _error_summary(per_episode: list[dict], medians: tuple[str, ...]) -> dict[str, float | None]:
    """The median over episodes of each of their `medians` percentiles, and the extremes they reached."""
    import numpy as np

    def over(key: str, how) -> float | None:
        values = [e[key] for e in per_episode if e.get(key) is not None]
        return round(float(how(values)), 4) if values else None

    return {**{key: over(key, np.median) for key in medians}, "min": over("min", min), "max": over("max", max)}


def _p5(values: list[float]) -> float | None:
    import numpy as np

    return round(float(np.percentile(values, 5)), 4) if values else None
