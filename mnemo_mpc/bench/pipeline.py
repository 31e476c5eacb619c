"""Warm-start pipeline benchmark: what each start costs on the problems the robot meets (seed 002 §5.2, issue 25).

Closed-loop episodes in generated worlds whose seeds no training store uses (`seed` + i; `collect` draws from
1,000,000 up, `eval` from 1000) run in the simulator, driven by the shift-started MPC so that every mode faces the
same problems. At every `stride`-th step (and the first) the step's problem (local grid, pose, velocity, sub-goal,
reference, the clearance margin it kept) is solved once per start:

* **fresh** (no previous solution: the first step of a goal, after a rotation to the path or a recovery): `cold` (hold
  the pose), `learned` (the start as the controller gets it: the model's, predicted during the previous period for the
  start that step predicted, with the sub-goal and reference its path gives there, `Controller.next_problem` and
  `nav.prefetch`, and that predicted problem solved from it on the worker ("solved ahead", `Controller._solve_ahead`),
  re-anchored here; on the run's first step, or where the prediction does not fit the start, run on the step),
  `learned_model` (the model's prefetched start alone, not solved ahead), `hybrid` (`nav.controller.choose_start`: with
  no shift, the learned start -- the same solve); `shift` has nothing to shift and falls back to cold, so its fresh
  figures are cold's;
* **steady** (mid-run): `cold`, `shift` (previous solution shifted, with its multipliers), `learned` (prefetched as
  above), `hybrid` (the rule takes the shift, and no model on the step; the controller's worker has solved the
  predicted problem from it during the previous period, where the previous solve took more than one iteration, and
  the step starts from that solution where it converged: the start "ahead").

`learned_in_step` is the start as the controller took it before issue 25: the model run on the step from the step's
own problem (input features, session, rollout), before the solve. `rti` is `ControllerConfig.sqp_mode` "rti": one
SQP iteration from the hybrid's start (fresh: the learned start; steady: the shift); its `cost_gap_rel` is over every
iterate, converged or not, against the step's optimum (the cold solve's, where it converged), and `feasible_rate`
over every iterate too.

Each summary has the SQP benchmark's keys (iterations, time, time per iteration, success, feasibility) plus
`inference_ms` (features + model + rollout, wherever it ran; for a prefetched start all the worker did, the next
step's sub-goal and reference at the predicted start included) and `total_ms`, the critical path: what the step waits
for -- the solve, plus for a prefetched start taking it (checks and the rollout from the step's start), plus for a
start computed on the step its inference. The prefetched inference runs off the critical path (the worker is
waited for before the step starts, as a control period leaves it time to finish). `learned` also has the
prediction's RMS error against the step's optimum (the cold solve's), to place the model on `bench sqp`'s accuracy
curve, and `prefetch` says how often the prediction fitted, and what the solve ahead cost the worker (time, converged).
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from mnemo_mpc.errors import InfeasibleProblemError, InputError, MnemoError, StartInCollisionError
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
    params: str | None = None  # robot profile (config/robots/*.yaml); None: the built-in disc robot
    realism: str = "profile"  # the simulated robot (mnemo_mpc.sim.realism.LEVELS); the built-in robot's profile: ideal


def quick_config() -> PipelineConfig:
    return PipelineConfig(worlds=4)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="4 worlds instead of 20")
    parser.add_argument("--worlds", type=int, default=None, help="number of held-out worlds")
    parser.add_argument("--seed", type=int, default=2000, help="first world seed (held out from training)")
    parser.add_argument("--stride", type=int, default=None, help="record every k-th step (default 3)")
    parser.add_argument("--model", default=None, help="warm-start model (ONNX); default: a shipped one")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    from mnemo_mpc.commands._args import add_params_argument, add_realism_argument

    add_params_argument(parser)
    add_realism_argument(parser)


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    cfg = quick_config() if args.quick else PipelineConfig()
    cfg = replace(cfg, seed=args.seed, model=args.model, clock=args.clock, params=args.params, realism=args.realism)
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
    inference_s: float = 0.0  # features + model + rollout
    select_s: float = 0.0  # taking the start on the step (a prefetched one: its checks and re-anchoring rollout)
    start_used: str = ""
    critical_inference: bool = True  # the inference ran on the step (False: during the previous period)
    optimum_cost: float | None = None  # the step's converged cost (rti: its suboptimality is measured against it)


def _percentiles(values: list[float], keys: tuple[str, ...]) -> dict[str, float]:
    import numpy as np

    a = np.asarray(values, dtype=float)
    return {k: float(np.percentile(a, float(k[1:]))) for k in keys}


def summarize(solves: list[Solve], clock: str) -> dict[str, Any]:
    """bench sqp's summary of the solves, plus inference and critical-path total times and which start was used."""
    from mnemo_mpc.bench.sqp import summarize as sqp_summary

    if not solves:
        raise MnemoError("bench pipeline: no solves recorded for a mode")
    out = sqp_summary([(s.result, None) for s in solves], clock)
    solve_ms = [(s.result.cpu_time_s if clock == "cpu" else s.result.time_s) * 1e3 for s in solves]
    inference_ms = [s.inference_s * 1e3 for s in solves]
    total = [  # the critical path: what the step waits for
        a + (b if s.critical_inference else 0.0) + s.select_s * 1e3
        for a, b, s in zip(solve_ms, inference_ms, solves, strict=True)
    ]
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

    from mnemo_mpc.commands._args import load_params
    from mnemo_mpc.nav.controller import WarmStartContext
    from mnemo_mpc.nav.prefetch import Prefetcher
    from mnemo_mpc.planning.global_path import plan_global_path
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.worlds import generate_world
    from mnemo_mpc.warmstart.runtime import WarmStartModel, find_model

    setup = closed_loop_setup(load_params(argparse.Namespace(params=cfg.params)), realism=cfg.realism)
    robot = setup.robot
    mpc_config = replace(setup.mpc, fallback=None)  # each start's own solve, no fallback solver behind it
    path = cfg.model or find_model(robot, mpc_config.N, mpc_config.dt)
    if path is None:
        raise InputError(
            f"bench pipeline: no shipped warm-start model fits the robot of {cfg.params or 'the built-in robot'} "
            "(train one: docs/cli.md 'Your own robot, your own warm start'; or give --model FILE.onnx)"
        )
    model = WarmStartModel(path, robot, mpc_config.N, mpc_config.dt)
    driver = replace(setup, profile=replace(setup.profile, mpc=mpc_config)).controller("shift", None, "mpc")
    acc: dict[str, dict[str, list[Solve]]] = {
        m: {"fresh": [], "steady": []} for m in (*MODES, "learned_model", "learned_in_step", "rti")
    }
    ahead_s: list[float] = []  # each solve ahead's time on the worker
    ahead_ok = [0, 0]  # solves ahead that converged, solves ahead

    def solve_ahead(context: Any, guess: Any) -> Any:
        t = time.perf_counter()
        refined = driver._solve_ahead(context, guess)
        ahead_s.append(time.perf_counter() - t)
        ahead_ok[0] += refined is not None
        ahead_ok[1] += 1
        return refined

    # one worker thread each for the run, as the controller keeps one: solving ahead as the controller's does, and not
    ahead = Prefetcher(model, robot, mpc_config.dt, refine=solve_ahead)
    model_only = Prefetcher(model, robot, mpc_config.dt)
    errors: list[np.ndarray] = []
    fitted = [0, 0]  # recorded steps whose prefetched prediction fitted the start, recorded steps
    unsolvable = 0  # steps not recorded: their problem has no solution (`_record`)
    t0 = time.perf_counter()
    with Simulator(setup.sim) as sim:
        for i in tqdm(range(cfg.worlds), desc="bench pipeline", disable=not progress):
            world = generate_world(cfg.seed + i, setup.world)
            gpath = plan_global_path(world.grid, world.start[:2], world.goal[:2], robot)
            goal = np.asarray(world.goal, dtype=float)
            driver.reset()
            obs = sim.reset(world)
            before = None  # the last step's problem, as the controller would have predicted the next from it
            for k in range(cfg.max_steps):
                prev = driver._last_plan if driver._plan_age == 0 else None
                out = driver.step(obs.local_grid, obs.pose, obs.velocity, goal, global_path=gpath)
                if out.status == "goal_reached" or obs.collision:
                    break
                ctx = None
                if out.field is not None and out.subgoal is not None and out.start_state is not None:
                    start = out.start_state  # what the step planned from (the prediction over the latency)
                    ctx = WarmStartContext(out.field, start[:3], start[3:], out.subgoal, out.reference, out.margin)
                if (k == 0 or k % cfg.stride == 0) and ctx is not None and out.solve_error is None:
                    mpc = driver.mpc(out.field.shape)
                    try:
                        fitted[0] += _record(mpc, model, (ahead, model_only), ctx, before, prev, acc, errors)
                        fitted[1] += 1
                    except (InfeasibleProblemError, StartInCollisionError):
                        # A problem no start can solve (its sub-goal in a cell an obstacle now fills, its start in
                        # collision): the cold solve raises before any mode is recorded (harsh generic robot, 2000+).
                        unsolvable += 1
                before = driver.next_problem(out)  # as the controller predicts the next step's problem
                obs = sim.step(float(out.command[0]), float(out.command[1]))
    ahead.close()
    model_only.close()
    modes = {m: {kind: summarize(v, cfg.clock) for kind, v in by.items() if v} for m, by in acc.items()}
    modes["shift"]["fresh"] = dict(modes["cold"]["fresh"], note="no previous solution: falls back to cold")
    for kind, solves in acc["rti"].items():  # every iterate's suboptimality and feasibility, converged or not
        gaps = [(s.result.cost - s.optimum_cost) / max(abs(s.optimum_cost), 1e-9) for s in solves if s.optimum_cost]
        if gaps:
            modes["rti"][kind]["cost_gap_rel"] = _percentiles(np.abs(gaps).tolist(), ("p50", "p95", "p99"))
            modes["rti"][kind]["cost_gap_rel"]["max"] = float(np.max(np.abs(gaps)))
        modes["rti"][kind]["feasible_rate"] = float(np.mean([bool(s.result.feasible) for s in solves]))
    # The hard fresh steps: those where the cold start needs >= 4 iterations (the paper's cold average is 4.78).
    hard = [i for i, s in enumerate(acc["cold"]["fresh"]) if s.result.iterations >= HARD_COLD_ITERATIONS]
    for m in ("cold", "learned", "hybrid", "learned_model", "learned_in_step"):
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
    ratios = {
        "fresh_learned_vs_cold_total_p50": modes["learned"]["fresh"]["total_ms"]["p50"]
        / modes["cold"]["fresh"]["total_ms"]["p50"],
        "steady_hybrid_vs_shift_total_p50": modes["hybrid"]["steady"]["total_ms"]["p50"]
        / modes["shift"]["steady"]["total_ms"]["p50"],
    }
    config = asdict(cfg)
    config.update(
        {
            "robot": cfg.params or "built-in",
            "mpc": {"N": mpc_config.N, "dt": mpc_config.dt, "max_iter": mpc_config.max_iter},
            "model": model.describe(),
            "recorded_steps": {kind: len(acc["cold"][kind]) for kind in ("fresh", "steady")},
            "unsolvable_steps": unsolvable,
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
    prefetch = {"fitted": fitted[0], "recorded": fitted[1]}
    if ahead_s:  # off the critical path, on the worker: it must fit in the control period
        prefetch["solve_ahead"] = {
            "solves": ahead_ok[1],
            "converged": ahead_ok[0],
            "time_ms": _percentiles([t * 1e3 for t in ahead_s], ("p50", "p95", "p99")),
            "period_ms": mpc_config.dt * 1e3,
        }
    return {"config": config, "modes": modes, "ratios": ratios, "prefetch": prefetch}


def _record(
    mpc: Any, model: Any, prefetchers: tuple[Any, Any], ctx: Any, before: Any, prev: Any, acc: dict, errors: list
) -> bool:
    """Solve one recorded step's problem from every start (module docstring); True when the prefetched prediction
    (made by the run's `nav.prefetch.Prefetcher`s, the controller's that solves ahead and one that does not, from
    `before`: the last step's prediction of this step's problem, `Controller.next_problem`) fitted this step's
    start."""

    from mnemo_mpc.nav.controller import solve_context

    def solve(start: Any, label: str, max_iter: int | None = None) -> Any:
        # at the step's margin (narrowed in a passage tighter than the full margin)
        return solve_context(mpc, ctx, start, start_label=label, max_iter=max_iter)

    t = time.perf_counter()
    in_step = model(ctx)  # input features, the session, and the rollout of the predicted controls into a start
    infer_s = time.perf_counter() - t
    ahead, model_only = prefetchers
    prefetched, off_path_s, take_s = None, 0.0, 0.0
    model_start, model_s = None, (0.0, 0.0)
    if before is not None:
        model_start, *model_s = _prefetched(model_only, before, ctx)
        prefetched, off_path_s, take_s = _prefetched(ahead, before, ctx)  # the controller's: the model, then solved
    cold = Solve(solve(None, "cold"), start_used="cold")
    acc["cold"]["fresh"].append(cold)
    acc["learned_in_step"]["fresh"].append(Solve(solve(in_step, "learned"), infer_s, 0.0, "learned"))
    if prefetched is not None:
        learned = Solve(solve(prefetched, "learned"), off_path_s, take_s, "learned_prefetched", False)
    else:  # nothing predicted for this start: the controller runs the model on the step
        learned = acc["learned_in_step"]["fresh"][-1]
    if model_start is not None:
        model_learned = Solve(solve(model_start, "learned"), *model_s, "learned_prefetched", False)
    else:
        model_learned = acc["learned_in_step"]["fresh"][-1]
    acc["learned"]["fresh"].append(learned)
    acc["learned_model"]["fresh"].append(model_learned)
    acc["hybrid"]["fresh"].append(learned)  # choose_start: no shift -> the learned start
    optimum = cold.result.cost if cold.result.success else None
    if cold.result.success:
        errors.append((model_start if model_start is not None else in_step).controls - cold.result.controls)
    start = prefetched if prefetched is not None else in_step
    acc["rti"]["fresh"].append(
        Solve(
            solve(start, "rti", 1),
            learned.inference_s,
            learned.select_s,
            "learned",
            learned.critical_inference,
            optimum,
        )
    )
    if prev is not None:
        solved = None  # choose_start: the shift, and no model on the step; solved ahead when that converged
        if before is not None and prev.iterations > 1:  # `Controller._prefetch_next`: where the shift may not do
            solved, off_path_s, take_s = _prefetched(ahead, before, ctx, start=prev.shifted())
        # The first solve after the worker's pays its cold caches (~0.1 ms of a 0.8 ms solve on this CPU): the shift
        # and the start solved ahead take turns at going first.
        first = len(acc["shift"]["steady"]) % 2 == 0 or solved is None
        if first:
            shift = Solve(solve(prev.shifted(), "shift"), start_used="shift")
        hybrid = Solve(solve(solved, "ahead"), off_path_s, take_s, "ahead", False) if solved is not None else None
        if not first:
            shift = Solve(solve(prev.shifted(), "shift"), start_used="shift")
        hybrid = hybrid or shift
        acc["cold"]["steady"].append(cold)
        acc["shift"]["steady"].append(shift)
        acc["learned"]["steady"].append(learned)
        acc["learned_model"]["steady"].append(model_learned)
        acc["learned_in_step"]["steady"].append(acc["learned_in_step"]["fresh"][-1])
        acc["hybrid"]["steady"].append(hybrid)
        acc["rti"]["steady"].append(Solve(solve(prev.shifted(), "rti", 1), start_used="shift", optimum_cost=optimum))
    return prefetched is not None


def _prefetched(prefetcher: Any, before: Any, ctx: Any, start: Any = None) -> tuple[Any, float, float]:
    """`prefetcher`'s start for this step's `ctx`, made on its worker from `before` (the last step's prediction of
    this problem; with `start`, solved ahead from it) and waited for, as a control period leaves it the time: (the
    start or None, the worker's seconds, the seconds taking it on the step)."""
    t = time.perf_counter()
    prefetcher.submit(*before, start=start)
    prefetcher.wait()
    off_path_s = time.perf_counter() - t
    t = time.perf_counter()
    taken = prefetcher.take(ctx)
    return taken, off_path_s, time.perf_counter() - t


def report(result: dict) -> str:
    lines = [
        f"{'mode':15s} {'steps':6s} {'it mean':>7s} {'p50':>4s} {'p95':>4s} {'solve p50':>9s} {'infer p50':>9s} "
        f"{'total p50':>9s} {'p95':>6s} {'p99':>6s} {'success':>7s} {'feasible':>8s}"
    ]
    for mode, by in result["modes"].items():
        for kind, s in by.items():
            lines.append(
                f"{mode:15s} {kind:6s} {s['iterations']['mean']:7.2f} {s['iterations']['p50']:4.0f} "
                f"{s['iterations']['p95']:4.0f} {s['time_ms']['p50']:9.2f} {s['inference_ms']['p50']:9.3f} "
                f"{s['total_ms']['p50']:9.2f} {s['total_ms']['p95']:6.2f} {s['total_ms']['p99']:6.2f} "
                f"{s['success_rate']:7.3f} {s['feasible_rate']:8.3f}"
            )
    hard = {
        m: result["modes"][m]["fresh"].get("where_cold_needs_4_or_more")
        for m in ("cold", "learned", "hybrid", "learned_model", "learned_in_step")
    }
    if hard["cold"] and hard["cold"]["n"]:
        lines.append(
            f"fresh steps where cold needs >= 4 iterations ({hard['cold']['n']}): mean iterations "
            + ", ".join(f"{m} {h['iterations_mean']:.2f}" for m, h in hard.items())
        )
    e = result["modes"]["learned"]["fresh"].get("prediction_rms_error")
    if e:
        lines.append(f"learned prediction vs the step's optimum: RMS v {e['v']:.4f} m/s, w {e['w']:.4f} rad/s")
    pf, r = result.get("prefetch"), result.get("ratios")
    if pf:
        lines.append(f"prefetched prediction fitted the step's start on {pf['fitted']} of {pf['recorded']} steps")
        ahead = pf.get("solve_ahead")
        if ahead:
            t = ahead["time_ms"]
            lines.append(
                f"solved ahead on the worker: {ahead['converged']} of {ahead['solves']} converged, time p50 "
                f"{t['p50']:.2f} / p99 {t['p99']:.2f} ms (period {ahead['period_ms']:.0f} ms)"
            )
    if r:
        lines.append(
            f"critical-path total p50, same run: fresh learned / cold {r['fresh_learned_vs_cold_total_p50']:.2f}, "
            f"steady hybrid / shift {r['steady_hybrid_vs_shift_total_p50']:.2f}"
        )
    return "\n".join(lines)
