"""Warm-start pipeline benchmark: what each start costs on the problems the robot meets (seed 002 §5.2).

Closed-loop episodes in generated worlds whose seeds no training store uses (`seed` + i; `collect` draws from
1,000,000 up, `eval` from 1000) run in the simulator, driven by the shift-started MPC so that every mode faces the
same problems. At every `stride`-th step (and the first) the step's problem (local grid, pose, velocity, sub-goal,
reference) is solved once per start:

* **fresh** (first step, new goal, map change, after a fallback: no previous solution): `cold` (hold the pose),
  `learned` (the model's prediction), `hybrid` (learned vs cold on the NLP's merit); `shift` has nothing to shift
  and falls back to cold, so its fresh figures are cold's;
* **steady** (mid-run): `cold`, `shift` (previous solution shifted, with its multipliers), `learned`, `hybrid`
  (shift vs learned on the merit, the learned start taking the shift's multipliers; `nav.controller.choose_start`).

Each summary has the SQP benchmark's keys (iterations, time, time per iteration, success, feasibility) plus
`inference_ms` (input features + model + rollout into a start) and `total_ms` (inference + candidate merit +
solve); `learned` also has the prediction's RMS error against the step's optimum (the cold solve's), to place the
model on `bench sqp`'s accuracy curve.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.warmstart import MODES

HARD_COLD_ITERATIONS = 4


@dataclass(frozen=True)
class PipelineConfig:
    worlds: int = 20
    seed: int = 2000
    stride: int = 3  # record every stride-th step (and the first)
    max_steps: int = 400
    model: str | None = None  # default: a shipped model that fits the robot
    clock: str = "wall"
    mpc: Any = field(default_factory=lambda: _mpc_config(fallback=None))
    realism: str = "profile"  # the simulated robot (mnemo_mpc.sim.realism.LEVELS); the built-in robot's profile: ideal


def _mpc_config(**kw: Any) -> Any:
    from mnemo_mpc.planning.mpc import MPCConfig

    return MPCConfig(**kw)


def quick_config() -> PipelineConfig:
    return PipelineConfig(worlds=4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="4 worlds instead of 20")
    parser.add_argument("--worlds", type=int, default=None, help="number of held-out worlds")
    parser.add_argument("--seed", type=int, default=2000, help="first world seed (held out from training)")
    parser.add_argument("--stride", type=int, default=None, help="record every k-th step (default 3)")
    parser.add_argument("--model", default=None, help="warm-start model (ONNX); default: a shipped one")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    from mnemo_mpc.commands._args import add_realism_argument

    add_realism_argument(parser)


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    cfg = quick_config() if args.quick else PipelineConfig()
    cfg = replace(cfg, seed=args.seed, model=args.model, clock=args.clock, realism=args.realism)
    if args.worlds is not None:
        cfg = replace(cfg, worlds=args.worlds)
    if args.stride is not None:
        cfg = replace(cfg, stride=args.stride)
    if cfg.worlds < 1 or cfg.stride < 1:
        raise InputError(f"bench pipeline: --worlds and --stride must be >= 1, got {cfg.worlds}, {cfg.stride}")
    return cfg


@dataclass
class Solve:
    result: Any  # PlanResult
    inference_s: float = 0.0
    select_s: float = 0.0
    start_used: str = ""


def _percentiles(values: list[float], keys: tuple[str, ...]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(values, dtype=float)
    return {k: float(np.percentile(a, float(k[1:]))) for k in keys}


def summarize(solves: list[Solve], clock: str) -> dict[str, Any]:
    """bench sqp's summary of the solves, plus inference and total times and which start hybrid chose."""
    from mnemo_mpc.bench.sqp import summarize as sqp_summary

    if not solves:
        raise MnemoError("bench pipeline: no solves recorded for a mode")
    out = sqp_summary([(s.result, None) for s in solves], clock)
    solve_ms = [(s.result.cpu_time_s if clock == "cpu" else s.result.time_s) * 1e3 for s in solves]
    inference_ms = [s.inference_s * 1e3 for s in solves]
    total = [a + b + s.select_s * 1e3 for a, b, s in zip(solve_ms, inference_ms, solves, strict=True)]
    out["inference_ms"] = _percentiles(inference_ms, ("p50", "p95"))
    out["total_ms"] = _percentiles(total, ("p50", "p95", "p99"))
    used: dict[str, int] = {}
    for s in solves:
        used[s.start_used] = used.get(s.start_used, 0) + 1
    out["starts_used"] = used
    return out


def run(cfg: PipelineConfig, progress: bool = True) -> dict:
    import casadi
    import numpy as np
    from tqdm import tqdm

    from mnemo_mpc.nav.controller import Controller, ControllerConfig, WarmStartContext, choose_start
    from mnemo_mpc.planning.global_path import plan_global_path
    from mnemo_mpc.planning.robot import RobotModel
    from mnemo_mpc.planning.worlds import generate_world
    from mnemo_mpc.sim.realism import realism_for
    from mnemo_mpc.sim.simulator import SimConfig, Simulator
    from mnemo_mpc.warmstart.runtime import WarmStartModel, find_model

    robot = RobotModel()
    path = cfg.model or find_model(robot, cfg.mpc.N, cfg.mpc.dt)
    if path is None:
        raise InputError("bench pipeline: no warm-start model fits the robot (give --model FILE.onnx)")
    model = WarmStartModel(path, robot, cfg.mpc.N, cfg.mpc.dt)
    driver = Controller(robot, cfg.mpc, ControllerConfig(warm_start="shift"))
    acc: dict[str, dict[str, list[Solve]]] = {m: {"fresh": [], "steady": []} for m in MODES}
    errors: list[np.ndarray] = []
    t0 = time.perf_counter()
    with Simulator(SimConfig(realism=realism_for(None, cfg.realism))) as sim:
        for i in tqdm(range(cfg.worlds), desc="bench pipeline", disable=not progress):
            world = generate_world(cfg.seed + i)
            gpath = plan_global_path(world.grid, world.start[:2], world.goal[:2], robot)
            goal = np.asarray(world.goal, dtype=float)
            driver.reset()
            obs = sim.reset(world)
            for k in range(cfg.max_steps):
                prev = driver._last_plan if driver._plan_age == 0 else None
                out = driver.step(obs.local_grid, obs.pose, obs.velocity, goal, global_path=gpath)
                if out.status == "goal_reached" or obs.collision:
                    break
                if (k == 0 or k % cfg.stride == 0) and out.field is not None and out.solve_error is None:
                    mpc = driver.mpc(out.field.shape)
                    start = out.start_state  # what the step planned from (the prediction over the latency)
                    ctx = WarmStartContext(out.field, start[:3], start[3:], out.subgoal, out.reference)
                    _record(mpc, model, ctx, prev, acc, errors, choose_start)
                obs = sim.step(float(out.command[0]), float(out.command[1]))
    modes = {m: {kind: summarize(v, cfg.clock) for kind, v in acc[m].items() if v} for m in MODES}
    modes["shift"]["fresh"] = dict(modes["cold"]["fresh"], note="no previous solution: falls back to cold")
    # The hard fresh steps: those where the cold start needs >= 4 iterations (the paper's cold average is 4.78).
    hard = [i for i, s in enumerate(acc["cold"]["fresh"]) if s.result.iterations >= HARD_COLD_ITERATIONS]
    for m in ("cold", "learned", "hybrid"):
        its = [acc[m]["fresh"][i].result.iterations for i in hard]
        modes[m]["fresh"]["where_cold_needs_4_or_more"] = {
            "n": len(hard),
            "iterations_mean": float(np.mean(its)) if its else None,
        }
    if errors:
        e = np.concatenate(errors)
        modes["learned"]["fresh"]["prediction_rms_error"] = {
            "v": float(np.sqrt(np.mean(e[:, 0] ** 2))),
            "w": float(np.sqrt(np.mean(e[:, 1] ** 2))),
        }
    config = asdict(cfg)
    config.update(
        {
            "model": model.describe(),
            "recorded_steps": {kind: len(acc["cold"][kind]) for kind in ("fresh", "steady")},
            "paper": {
                "source": "seed 002 §5.2",
                "cold_iterations": 4.78,
                "cold_time_s": 0.12,
                "learned_iterations": 1,
                "learned_total_time_s": 0.048,
                "inference_s": 0.011,
            },
            "casadi": casadi.__version__,
            "python": platform.python_version(),
            "wall_s": time.perf_counter() - t0,
        }
    )
    return {"config": config, "modes": modes}


def _record(mpc: Any, model: Any, ctx: Any, prev: Any, acc: dict, errors: list, choose_start: Any) -> None:
    """Solve one recorded step's problem from every start (module docstring)."""

    def solve(start: Any, label: str) -> Any:
        return mpc.solve(
            ctx.field, ctx.pose, ctx.velocity, ctx.subgoal, ctx.reference, warm_start=start, start_label=label
        )

    t = time.perf_counter()
    learned = model(ctx)  # input features, the session, and the rollout of the predicted controls into a start
    infer_s = time.perf_counter() - t
    cold = Solve(solve(None, "cold"), start_used="cold")
    acc["cold"]["fresh"].append(cold)
    acc["learned"]["fresh"].append(Solve(solve(learned, "learned"), infer_s, 0.0, "learned"))
    if cold.result.success:
        errors.append(learned.controls - cold.result.controls)
    t = time.perf_counter()
    start, name = choose_start(mpc, ctx, None, learned)
    acc["hybrid"]["fresh"].append(Solve(solve(start, "hybrid"), infer_s, time.perf_counter() - t, name))
    if prev is None:
        return
    shift = prev.shifted()
    acc["cold"]["steady"].append(cold)
    acc["shift"]["steady"].append(Solve(solve(shift, "shift"), start_used="shift"))
    acc["learned"]["steady"].append(acc["learned"]["fresh"][-1])
    t = time.perf_counter()
    start, name = choose_start(mpc, ctx, shift, learned)
    acc["hybrid"]["steady"].append(Solve(solve(start, "hybrid"), infer_s, time.perf_counter() - t, name))


def report(result: dict) -> str:
    lines = [
        f"{'mode':8s} {'steps':6s} {'it mean':>7s} {'p50':>4s} {'p95':>4s} {'solve p50':>9s} {'infer p50':>9s} "
        f"{'total p50':>9s} {'p95':>6s} {'p99':>6s} {'success':>7s} {'feasible':>8s}"
    ]
    for mode, by in result["modes"].items():
        for kind, s in by.items():
            lines.append(
                f"{mode:8s} {kind:6s} {s['iterations']['mean']:7.2f} {s['iterations']['p50']:4.0f} "
                f"{s['iterations']['p95']:4.0f} {s['time_ms']['p50']:9.2f} {s['inference_ms']['p50']:9.3f} "
                f"{s['total_ms']['p50']:9.2f} {s['total_ms']['p95']:6.2f} {s['total_ms']['p99']:6.2f} "
                f"{s['success_rate']:7.3f} {s['feasible_rate']:8.3f}"
            )
    hard = {m: result["modes"][m]["fresh"].get("where_cold_needs_4_or_more") for m in ("cold", "learned", "hybrid")}
    if hard["cold"] and hard["cold"]["n"]:
        lines.append(
            f"fresh steps where cold needs >= 4 iterations ({hard['cold']['n']}): mean iterations "
            + ", ".join(f"{m} {h['iterations_mean']:.2f}" for m, h in hard.items())
        )
    e = result["modes"]["learned"]["fresh"].get("prediction_rms_error")
    if e:
        lines.append(f"learned prediction vs the step's optimum: RMS v {e['v']:.4f} m/s, w {e['w']:.4f} rad/s")
    return "\n".join(lines)
