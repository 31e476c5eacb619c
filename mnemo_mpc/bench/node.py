"""`mnemo-mpc bench node`: the ROS node core's control tick, timed on a realistic closed-loop scenario (issue 9).

The node (`mnemo_mpc.ros.node`) hands every message to a `NavAdapter` callback and runs `NavAdapter.tick` on its
timer; this benchmark drives the same adapter, without rclpy, through `mnemo_mpc.ros.hostile.run_fuzz` on the stream
of `mnemo_mpc.ros.stream`: a robot driving in generated worlds on a simulated clock (now advances by the control
period per tick, whatever the wall time), its odometry at 50 Hz and its local grid at 10 Hz as ROS 2 messages
(rosbags' classes), each episode's goal and global path. A tick is message-out work (controller step on the fitted
window, limiter, Twist and Path messages); the callbacks (message -> arrays, checks, pooling a fine grid) are timed
apart, and `period_ms` is one control period's callbacks plus its tick. `--fuzz` mixes in the hostile messages of the
fuzz test (malformed, huge, mis-stamped, clock resets) and reports the contract's violations beside the times.

Output: `tick_ms` {p50, p95, p99, max, mean}, `rate_hz_p50` = 1000 / tick_ms.p50, `tick_ms_by_status`,
`period_ms`, `controller_ms` and `solve_ms` (the controller step and the SQP inside the tick), `callback_ms` per
topic and over all, counts (messages, ticks, statuses, violations, ticks over the
period), `config` and `version`. `--controller mpc,mppi,dwa` (issue 30) runs the node core once per planner (the
node's `local_planner`) on the same scenario: each result under `planners`, and `table`, a row per planner.
"""

from __future__ import annotations

import argparse
import platform
from dataclasses import asdict, dataclass, replace
from typing import Any

from mnemo_mpc.errors import InputError


@dataclass(frozen=True)
class NodeBenchConfig:
    rate_hz: float | None = None  # None: the params' control_rate_hz (NavParams' default: 10 Hz)
    params_file: str | None = None  # robot profile / node parameter file (--params); None: the default robot
    ticks: int = 2000
    seed: int = 0
    fuzz: bool = False
    hostile_per_tick: float = 4.0  # with --fuzz
    controllers: tuple[str, ...] = ("mpc",)  # the node's local_planner, one run each over the same scenario


def quick_config() -> NodeBenchConfig:
    return NodeBenchConfig(ticks=300)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="300 control ticks instead of 2000")
    parser.add_argument("--ticks", type=int, default=None, help="control ticks to time (overrides --quick)")
    parser.add_argument(
        "--rate-hz",
        type=float,
        default=None,
        help="control_rate_hz (10 or 50 in the issue; default: --params' control_rate_hz, else 10)",
    )
    parser.add_argument(
        "--params",
        default=None,
        help="robot profile / node parameter file (config/robots/*.yaml): the robot, its limits and the node's rate",
    )
    parser.add_argument("--seed", type=int, default=0, help="scenario seed (worlds, message timing, hostile mix)")
    parser.add_argument("--fuzz", action="store_true", help="mix in the fuzz test's hostile messages")
    from mnemo_mpc.commands._args import add_controller_argument

    add_controller_argument(parser, several=True)


def config_from_args(args: argparse.Namespace) -> NodeBenchConfig:
    cfg = quick_config() if args.quick else NodeBenchConfig()
    from mnemo_mpc.commands._args import check_controller, load_params

    params = load_params(args)  # checked here: a bad file is one line naming --params, before any work
    cfg = replace(
        cfg,
        rate_hz=args.rate_hz,
        params_file=args.params,
        seed=args.seed,
        fuzz=bool(args.fuzz),
        controllers=check_controller(args, params),
    )
    if args.ticks is not None:
        cfg = replace(cfg, ticks=args.ticks)
    if cfg.ticks < 1 or not (cfg.rate_hz is None or cfg.rate_hz > 0):
        raise InputError(f"bench node: expected --ticks >= 1 and --rate-hz > 0, got {cfg.ticks}, {cfg.rate_hz}")
    return cfg


def run(cfg: NodeBenchConfig, progress: bool = True) -> dict[str, Any]:
    """One planner: its result (module docstring). Several (`--controller mpc,mppi,dwa`): each planner's result under
    `planners`, over the same scenario (worlds, goals, message timing), and `table`, a row per planner."""
    from mnemo_mpc.profile import NavParams

    params = NavParams.from_yaml(cfg.params_file) if cfg.params_file is not None else NavParams()
    if cfg.rate_hz is not None:
        params = replace(params, control_rate_hz=cfg.rate_hz)
    results = {name: _run_planner(cfg, replace(params, local_planner=name), progress) for name in cfg.controllers}
    if len(results) == 1:
        return next(iter(results.values()))
    first = next(iter(results.values()))
    return {
        "table": [_row(result) for result in results.values()],
        "planners": results,
        "config": {"bench": asdict(cfg)},
        "version": first["version"],
    }


def _row(result: dict[str, Any]) -> dict[str, Any]:
    """One planner's line of the several-planner table."""
    tick, counts = result["tick_ms_with_controller"], result["counts"]
    return {
        "controller": result["controller"],
        "tick_ms_p50": tick["p50"],
        "tick_ms_p99": tick["p99"],
        "tick_ms_max": tick["max"],
        "controller_ms_p99": result["controller_ms"]["p99"],
        "ticks_over_period": result["ticks_over_period"],
        "control_period_ms": result["control_period_ms"],
        "goals_reached": counts["goals_reached"],
        "episodes": counts["episodes"],
        "violations": sum(counts["violations"].values()) if counts["violations"] else 0,
    }


def _run_planner(cfg: NodeBenchConfig, params: Any, progress: bool) -> dict[str, Any]:
    import casadi
    import numpy as np

    from mnemo_mpc import __version__
    from mnemo_mpc.ros.hostile import FuzzConfig, run_fuzz
    from mnemo_mpc.sim.episode import percentiles

    if cfg.fuzz:
        mix: dict[str, Any] = {"hostile_per_tick": cfg.hostile_per_tick}
    else:  # the realistic stream alone: no hostile messages, no clock resets, no sensor dropouts
        mix = {"hostile_per_tick": 0.0, "huge_grids": 0, "clock_resets": 0, "dropouts": 0}
    fuzz = FuzzConfig(seed=cfg.seed, messages=10**9, max_ticks=cfg.ticks, **mix)  # bounded by ticks
    report = run_fuzz(fuzz, params, progress=progress)
    timing = report.timing()
    tick, with_controller = timing["tick_ms"], timing["tick_ms_with_controller"]
    all_callbacks = [ms for values in report.callback_ms.values() for ms in values]
    summary = report.summary()
    return {
        "controller": params.local_planner,
        "tick_ms": tick,
        "rate_hz_p50": 1e3 / tick["p50"] if tick["p50"] > 0 else None,
        # with --fuzz most ticks may be stale-input stops that skip the controller: the planning ticks alone
        "tick_ms_with_controller": with_controller,
        "rate_hz_p50_with_controller": 1e3 / with_controller["p50"] if with_controller["p50"] else None,
        "tick_ms_by_status": timing["tick_ms_by_status"],
        "period_ms": timing["period_ms"],
        "controller_ms": timing["controller_ms"],
        "solve_ms": timing["solve_ms"],
        "callback_ms": {"all": percentiles(all_callbacks), **timing["callback_ms"]},
        "control_period_ms": 1e3 / params.control_rate_hz,
        "ticks_over_period": summary["ticks_over_period"],
        "counts": {
            k: summary[k]
            for k in (
                "messages",
                "ticks",
                "published",
                "moving_ticks",
                "stale_ticks",
                "episodes",
                "goals_reached",
                "own_path_episodes",
                "own_path_ticks",
                "far_goal_ticks",
                "rejected_messages",
            )
        }
        | {"statuses": summary["statuses"], "labels": summary["labels"], "violations": summary["violations"]},
        "slowest_ticks": summary["slowest_ticks"],
        "violation_examples": [str(v) for v in report.examples[:20]],
        "warm_up_s": report.warm_up_s,
        "wall_s": report.wall_s,
        "config": {"bench": asdict(cfg), "fuzz": asdict(fuzz), "params": asdict(params)},
        "version": {
            "mnemo_mpc": __version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "casadi": casadi.__version__,
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
        },
    }


def report(result: dict[str, Any]) -> str:
    if "planners" in result:
        head = "planner  ticks  tick ms p50 / p99 / max (planning ticks)  over the period  goals  violations"
        rows = [
            f"{r['controller']:7s}  {result['planners'][r['controller']]['counts']['ticks']:5d}  "
            f"{r['tick_ms_p50']:.2f} / {r['tick_ms_p99']:.2f} / {r['tick_ms_max']:.2f}"
            f"{'':22s}{r['ticks_over_period']:5d} of {r['control_period_ms']:.0f} ms  "
            f"{r['goals_reached']}/{r['episodes']}  {r['violations']}"
            for r in result["table"]
        ]
        return "\n\n".join([*(_report_one(r) for r in result["planners"].values()), "\n".join([head, *rows])])
    return _report_one(result)


def _report_one(result: dict[str, Any]) -> str:
    t, p, c = result["tick_ms"], result["period_ms"], result["callback_ms"]["all"]
    counts = result["counts"]
    lines = [
        f"node core ({result.get('controller', 'mpc')}) @ {result['config']['params']['control_rate_hz']:g} Hz"
        + (" (fuzz mix)" if result["config"]["bench"]["fuzz"] else "")
        + f": {counts['ticks']} ticks, {counts['messages']} messages, statuses {counts['statuses']}",
        f"tick ms   p50 {t['p50']:.2f}  p95 {t['p95']:.2f}  p99 {t['p99']:.2f}  max {t['max']:.2f}  "
        f"-> {result['rate_hz_p50']:.0f} Hz at p50; {result['ticks_over_period']} ticks over the "
        f"{result['control_period_ms']:.0f} ms period",
        *(
            [
                f"ticks that ran the controller: p50 {wc['p50']:.2f}  p99 {wc['p99']:.2f}  max {wc['max']:.2f} "
                f"-> {result['rate_hz_p50_with_controller']:.0f} Hz at p50"
            ]
            if (wc := result["tick_ms_with_controller"])["p50"] is not None
            else []
        ),
        f"period ms p50 {p['p50']:.2f}  p99 {p['p99']:.2f}  max {p['max']:.2f} (callbacks + tick)",
        *(
            f"{name} ms p50 {v['p50']:.2f}  p99 {v['p99']:.2f}  max {v['max']:.2f} (inside the tick)"
            for name, v in (("controller", result["controller_ms"]), ("solve", result["solve_ms"]))
            if v["p50"] is not None
        ),
        f"callback ms p50 {c['p50']:.3f}  p99 {c['p99']:.3f}  max {c['max']:.2f}",
        f"violations: {counts['violations'] or 'none'}",
    ]
    return "\n".join(lines)
