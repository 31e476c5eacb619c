"""SQP MPC benchmark: how many iterations and how much time each kind of start costs, on a fixed seeded suite.

Seed 002 §5.2 reports SQP at 4.78 iterations cold (cap 10) and 1 iteration warm-started. Each problem here is a world
from `mnemo_mpc.sim.worlds` (kinds cycled: corridor, doors, clutter, open, rooms, mixed), its global path, and a
short receding-horizon run: after a seeded pre-roll from the world's start, every recorded step's problem (state,
velocity, window, reference) is solved from each start below. The robot then applies u_0 of the shifted solve (the
cold one if that failed) and the window moves with it.

Modes (each a summary with the same keys: iterations, time, time per iteration, success and feasibility rates):

* `cold`: hold the pose; `shift`: the previous step's solution shifted, with its multipliers.
* `oracle`: the controls of the cold optimum, states rolled out, no multipliers - the floor a predicted start can
  reach; `oracle_duals`: the same with the cold solve's multipliers.
* `perturbed.{white,smooth}.{sigma}`: the cold optimum's controls plus noise of standard deviation sigma x each
  control's range (white, or Gaussian-filtered along the horizon and rescaled to the same standard deviation),
  clipped to the bounds, states rolled out, primal only; with the achieved RMS error per control. This is the
  accuracy budget of a learned warm start (issue 8 places its model on this curve).
* `baseline.{cold,shift}` (`--baseline`): the configuration before the package's own SQP (CasADi sqpmethod on the
  multiple-shooting NLP, interpreted functions, piqp), on the same problems, interleaved, with its own shift chain.

All solves of a recorded step run in a shuffled order (seeded), so slow phases of a shared machine hit every mode
alike; speed-ups are ratios within one run.
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mnemo_mpc.errors import InputError, MnemoError

if TYPE_CHECKING:  # the CLI imports this module to declare flags; numpy/scipy/CasADi load when it runs
    import numpy as np

    from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, PlanResult
    from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)

KINDS = ("corridor", "doors", "clutter", "open", "rooms", "mixed")
SIGMAS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
NOISES = ("white", "smooth")


@dataclass(frozen=True)
class SQPBenchConfig:
    problems: int = 200
    steps: int = 6  # receding-horizon steps recorded per problem (the first has no shift when the pre-roll is 0)
    seed: int = 0
    window: tuple[int, int] = (80, 80)  # local grid (rows, cols) around the robot: 4 m x 4 m at 0.05 m
    kinds: tuple[str, ...] = KINDS
    difficulty: float = 0.5
    speed_fraction: float = 0.8  # reference speed along the global path, as a fraction of v_max
    # Problems are states the closed-loop MPC visits (as in the paper's dataset, one SQP per MPC step): each run
    # starts at rest at the world's start pose and records `steps` steps after a pre-roll of U{0..preroll_max} steps.
    preroll_max: int = 60
    clock: str = "wall"  # "wall" (time_s) or "cpu" (process time: a shared machine inflates wall time)
    sigmas: tuple[float, ...] = SIGMAS  # perturbation levels, fractions of each control's range
    smooth_steps: float = 5.0  # std of the Gaussian filter along the horizon for "smooth" noise, in MPC steps
    baseline: bool = False
    # The SQP alone is measured: no IPOPT fallback.
    mpc: MPCConfig = field(default_factory=lambda: _mpc_config(fallback=None))
    baseline_mpc: MPCConfig = field(
        default_factory=lambda: _mpc_config(method="sqpmethod", compile=False, qpsol="piqp", fallback=None)
    )
    robot: RobotModel = field(default_factory=lambda: _robot_model())


def _mpc_config(**kw: Any) -> MPCConfig:
    from mnemo_mpc.planning.mpc import MPCConfig

    return MPCConfig(**kw)


def _robot_model() -> RobotModel:
    from mnemo_mpc.planning.robot import RobotModel

    return RobotModel()


def quick_config() -> SQPBenchConfig:
    return SQPBenchConfig(problems=30)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="30 problems instead of 200")
    parser.add_argument("--problems", type=int, default=None, help="number of problems (overrides --quick)")
    parser.add_argument("--steps", type=int, default=None, help="recorded receding-horizon steps per problem")
    parser.add_argument("--seed", type=int, default=0, help="suite seed (world seeds are seed + i)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall", help="time_ms clock")
    parser.add_argument("--max-iter", type=int, default=None, help="SQP iteration cap (default: MPCConfig)")
    parser.add_argument(
        "--baseline", action="store_true", help="also run CasADi sqpmethod + piqp, interpreted (the old default)"
    )
    parser.add_argument("--no-compile", action="store_true", help="interpreted CasADi functions for our SQP")
    parser.add_argument("--sigmas", default=None, help="comma-separated perturbation levels (fractions of range)")
    parser.add_argument("--plot", default=None, help="PNG of iterations and time vs start error (default: OUT.png)")
    parser.add_argument(
        "--params",
        default=None,
        help="robot profile / node parameter file (config/robots/*.yaml): its footprint and limits",
    )


def config_from_args(args: argparse.Namespace) -> SQPBenchConfig:
    cfg = quick_config() if args.quick else SQPBenchConfig()
    mpc, base = cfg.mpc, cfg.baseline_mpc
    if args.max_iter is not None:
        if args.max_iter < 1:
            raise InputError(f"bench sqp: --max-iter must be >= 1, got {args.max_iter}")
        mpc, base = replace(mpc, max_iter=args.max_iter), replace(base, max_iter=args.max_iter)
    if args.no_compile:
        mpc = replace(mpc, compile=False)
    sigmas = cfg.sigmas
    if args.sigmas is not None:
        try:
            sigmas = tuple(float(s) for s in args.sigmas.split(","))
        except ValueError as exc:
            raise InputError(f"bench sqp: --sigmas expects comma-separated numbers, got {args.sigmas!r}") from exc
        if not sigmas or any(not 0 < s <= 1 for s in sigmas):
            raise InputError(f"bench sqp: --sigmas must lie in (0, 1], got {args.sigmas!r}")
    cfg = replace(cfg, seed=args.seed, clock=args.clock, mpc=mpc, baseline_mpc=base, baseline=args.baseline)
    cfg = replace(cfg, sigmas=tuple(sorted(sigmas)))
    if args.params is not None:
        from mnemo_mpc.planning.sizing import size_horizon
        from mnemo_mpc.profile import NavParams

        # The profile's robot with its MPC step and local window sized so that it stops within what it sees.
        robot = NavParams.from_yaml(args.params).robot_model()
        sized = size_horizon(robot, cfg.mpc.N)
        cfg = replace(
            cfg,
            robot=robot,
            window=(sized.window_cells, sized.window_cells),
            mpc=replace(cfg.mpc, dt=sized.dt),
            baseline_mpc=replace(cfg.baseline_mpc, dt=sized.dt),
        )
    if args.problems is not None:
        cfg = replace(cfg, problems=args.problems)
    if args.steps is not None:
        cfg = replace(cfg, steps=args.steps)
    if cfg.problems < 1 or cfg.steps < 1:
        raise InputError(f"bench sqp: --problems and --steps must be >= 1, got {cfg.problems}, {cfg.steps}")
    return cfg


@dataclass
class Problem:
    world: Any
    path: np.ndarray
    preroll: int  # closed-loop MPC steps from the world's start before the recorded steps


def make_problems(cfg: SQPBenchConfig) -> list[Problem]:
    """The fixed suite: problem i is world seed `cfg.seed + i` of kind `kinds[i % len(kinds)]`, its global path, and
    a pre-roll length drawn from the seed (0 = the recorded steps start at rest at the world's start pose)."""
    import numpy as np

    from mnemo_mpc.planning.global_path import plan_global_path
    from mnemo_mpc.sim.worlds import WorldConfig, generate_world

    robot = cfg.robot
    # The generator sized for the robot: its inflation, margin, and corridors at least as wide as its narrowest door.
    wcfg = WorldConfig.for_robot(robot, difficulty=cfg.difficulty)
    problems = []
    for i in range(cfg.problems):
        kind = cfg.kinds[i % len(cfg.kinds)]
        world = generate_world(cfg.seed + i, wcfg, kind=kind)
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, i, 17]))
        path = plan_global_path(world.grid, world.start[:2], world.goal[:2], robot)
        problems.append(Problem(world, path, int(rng.integers(0, cfg.preroll_max + 1))))
    return problems


def control_noise(rng: np.random.Generator, n: int, kind: str, smooth_steps: float) -> np.ndarray:
    """(n, 2) noise of unit standard deviation per entry: white, or Gaussian-filtered along the horizon ("smooth",
    filter std `smooth_steps`) and rescaled by the filter's L2 norm so the marginal standard deviation stays 1."""
    import numpy as np
    from scipy.ndimage import gaussian_filter1d

    if kind == "white":
        return rng.standard_normal((n, 2))
    pad = int(np.ceil(4 * smooth_steps))
    w = rng.standard_normal((n + 2 * pad, 2))
    impulse = np.zeros(2 * pad + 1)
    impulse[pad] = 1.0
    norm = float(np.sqrt(np.sum(gaussian_filter1d(impulse, smooth_steps, mode="constant") ** 2)))
    return gaussian_filter1d(w, smooth_steps, axis=0, mode="constant")[pad:-pad] / norm


def perturbed_start(
    robot: RobotModel, state: np.ndarray, controls: np.ndarray, noise: np.ndarray, sigma: float, dt: float
) -> Any:
    """The cold optimum's controls + sigma x range x noise, clipped to the bounds, states rolled out, primal only."""
    import numpy as np

    from mnemo_mpc.planning.mpc import WarmStart

    span = robot.control_upper - robot.control_lower
    u = np.clip(controls + sigma * span * noise, robot.control_lower, robot.control_upper)
    return WarmStart(robot.rollout(state, u, dt), u)


def run_problem(
    mpc: SQPMPC,
    cfg: SQPBenchConfig,
    problem: Problem,
    baseline: SQPMPC | None = None,
    index: int = 0,
    reference: SQPMPC | None = None,
) -> dict[str, Any]:
    """Drive the receding-horizon MPC from the world's start; at every recorded step solve the step's problem from
    every start of the module docstring. Returns {mode: [(PlanResult, reference cost or None)]} plus the perturbed
    starts' errors; `reference` (tight tolerances) supplies each step's reference optimum.

    A step where both of our solves fail ends the problem.
    """
    import numpy as np

    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.global_path import local_reference
    from mnemo_mpc.planning.mpc import WarmStart

    robot, mcfg = cfg.robot, cfg.mpc
    world = problem.world
    state, velocity, progress = np.asarray(world.start, dtype=float).copy(), np.zeros(2), 0
    out: dict[str, Any] = {"cold": [], "shift": [], "oracle": [], "oracle_duals": [], "shift_guess_error": []}
    out["perturbed"] = {k: {s: [] for s in cfg.sigmas} for k in NOISES}
    out["perturbed_error"] = {k: {s: [] for s in cfg.sigmas} for k in NOISES}
    out["baseline"] = {"cold": [], "shift": []}
    prev: PlanResult | None = None
    b_prev: PlanResult | None = None
    goal_yaw = float(world.goal[2])
    speed = cfg.speed_fraction * robot.v_max
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, index, 29]))
    for t in range(problem.preroll + cfg.steps):
        record = t >= problem.preroll
        field_ = DistanceField(world.grid.window(state[:2], cfg.window))
        ref = local_reference(problem.path, state, mcfg.N, mcfg.dt, speed, goal_yaw, progress)
        progress = ref.progress

        def solve(m: SQPMPC, start: WarmStart | None, label: str, args: tuple = (field_, state, velocity, ref)) -> Any:
            f, x, v, r = args
            return m.solve(f, x, v, r.goal, r.points, warm_start=start, start_label=label)

        res: dict[str, PlanResult] = {}
        jobs = []
        if prev is not None:
            jobs.append(("shift", mpc, prev.shifted(), "shift"))
        if baseline is not None and b_prev is not None:
            jobs.append(("b_shift", baseline, b_prev.shifted(), "shift"))
        if record or prev is None:
            jobs.append(("cold", mpc, None, "cold"))
        if baseline is not None and (record or b_prev is None):
            jobs.append(("b_cold", baseline, None, "cold"))
        for i in rng.permutation(len(jobs)):
            key, m, start, label = jobs[i]
            res[key] = solve(m, start, label)
        if "cold" not in res and not res["shift"].success:
            res["cold"] = solve(mpc, None, "cold")
        if baseline is not None and "b_cold" not in res and not res["b_shift"].success:
            res["b_cold"] = solve(baseline, None, "cold")
        if record:
            cold = res["cold"]
            # The tightly converged optimum of this step (from the cold solution and its multipliers): every mode's
            # cost gap is measured against it, so the tolerance noise of a reference solve counts against nobody.
            ref_cost = None
            if cold.success and reference is not None:
                r = solve(
                    reference,
                    WarmStart(cold.states, cold.controls, cold.duals["lam_g"], cold.duals["lam_x"]),
                    "reference",
                )
                ref_cost = r.cost if r.success else None
            out["cold"].append((cold, ref_cost))
            if "shift" in res:
                out["shift"].append((res["shift"], ref_cost))
            if baseline is not None:
                out["baseline"]["cold"].append((res["b_cold"], ref_cost))
                if "b_shift" in res:
                    out["baseline"]["shift"].append((res["b_shift"], ref_cost))
            if cold.success:
                if "shift" in res:
                    out["shift_guess_error"].append(prev.shifted().controls - cold.controls)
                _solve_from_cold_optimum(mpc, cfg, cold, state, solve, rng, out, ref_cost)
        use = res["shift"] if "shift" in res and res["shift"].success else res["cold"]
        if not use.success:
            break
        if baseline is not None:
            b_shift = res.get("b_shift")
            b_prev = b_shift if b_shift is not None and b_shift.success else res.get("b_cold")
            if b_prev is not None and not b_prev.success:
                b_prev = None
        prev = use
        velocity = use.controls[0].copy()
        state = robot.step(state, velocity, mcfg.dt)
    return out


def _solve_from_cold_optimum(
    mpc: SQPMPC,
    cfg: SQPBenchConfig,
    cold: PlanResult,
    state: np.ndarray,
    solve: Any,
    rng: Any,
    out: dict,
    ref_cost: float | None,
) -> None:
    """oracle, oracle_duals and every perturbed start of one recorded step, in a shuffled order."""
    from mnemo_mpc.planning.mpc import WarmStart

    robot, n, dt = cfg.robot, cfg.mpc.N, cfg.mpc.dt
    u_star = cold.controls
    x_star = robot.rollout(state, u_star, dt)
    jobs: list[tuple[tuple, WarmStart]] = [
        (("oracle",), WarmStart(x_star, u_star)),
        (("oracle_duals",), WarmStart(x_star, u_star, cold.duals["lam_g"], cold.duals["lam_x"])),
    ]
    for kind in NOISES:
        for sigma in cfg.sigmas:
            noise = control_noise(rng, n, kind, cfg.smooth_steps)
            jobs.append((("perturbed", kind, sigma), perturbed_start(robot, state, u_star, noise, sigma, dt)))
    for i in rng.permutation(len(jobs)):
        key, start = jobs[i]
        r = solve(mpc, start, key[0])
        if key[0] == "perturbed":
            out["perturbed"][key[1]][key[2]].append((r, ref_cost))
            out["perturbed_error"][key[1]][key[2]].append(start.controls - u_star)
        else:
            out[key[0]].append((r, ref_cost))


def summarize(pairs: list[tuple[PlanResult, float | None]], clock: str = "wall") -> dict:
    """The benchmark's per-mode statistics of (result, reference cost) pairs: iterations, times, success and
    feasibility rates, the solver's own per-iteration time breakdown, and the relative cost gap of successful solves
    to the step's tightly converged optimum (where there is one)."""
    import numpy as np

    if not pairs:
        raise MnemoError("bench sqp: no solves recorded for a mode")
    results = [r for r, _ in pairs]
    it = np.array([r.iterations for r in results], dtype=float)
    t = np.array([r.cpu_time_s if clock == "cpu" else r.time_s for r in results]) * 1e3
    tpi = t / np.maximum(it, 1.0)
    ok = [r for r in results if r.success]
    feas = [r.feasible for r in ok]
    total_it = max(float(it.sum()), 1.0)
    breakdown = {
        name: 1e3 * sum(float(r.solver_stats.get(key, 0.0)) for r in results) / total_it
        for name, key in (
            ("derivatives", "t_derivatives_s"),
            ("qp", "t_qp_s"),
            ("linesearch", "t_linesearch_s"),
            ("total", "t_total_s"),
        )
    }
    out = {
        "n": len(results),
        "iterations": {
            "mean": float(it.mean()),
            "p50": float(np.percentile(it, 50)),
            "p95": float(np.percentile(it, 95)),
        },
        "time_ms": {
            "p50": float(np.percentile(t, 50)),
            "p95": float(np.percentile(t, 95)),
            "p99": float(np.percentile(t, 99)),
        },
        "time_per_iteration_ms": {"p50": float(np.percentile(tpi, 50))},
        "success_rate": len(ok) / len(results),
        "feasible_rate": float(np.mean(feas)) if feas else 0.0,
        "breakdown_ms_per_iteration": breakdown,
    }
    gaps = [(r.cost - c) / max(abs(c), 1e-9) for r, c in pairs if r.success and c is not None]
    if gaps:
        a = np.abs(gaps)
        out["cost_gap_rel"] = {
            "p50": float(np.percentile(a, 50)),
            "p95": float(np.percentile(a, 95)),
            "max": float(a.max()),
            "n": len(gaps),
            "min_signed": float(
                np.min(gaps)
            ),  # < 0: cheaper than the reference (a tolerance artefact or a better local optimum)
        }
    return out


def _rms(errors: list[np.ndarray]) -> dict[str, float]:
    import numpy as np

    e = np.concatenate(errors, axis=0)
    return {"v": float(np.sqrt(np.mean(e[:, 0] ** 2))), "w": float(np.sqrt(np.mean(e[:, 1] ** 2)))}


def crossings(perturbed: dict[str, dict[str, dict]], levels: tuple[float, ...] = (2.0, 1.5)) -> dict:
    """Per noise kind: the sigma (and RMS error per control) where mean iterations first rise above each level,
    interpolated linearly in log sigma between the measured levels; None where the curve never crosses."""
    import numpy as np

    out: dict[str, dict] = {}
    for kind, by_sigma in perturbed.items():
        sig = sorted(by_sigma, key=float)
        it = [by_sigma[s]["iterations"]["mean"] for s in sig]
        out[kind] = {}
        for level in levels:
            hit = None
            for i in range(len(sig)):
                if it[i] > level:
                    if i == 0:
                        hit = {"sigma": float(sig[0]), "note": "above the level at the smallest sigma"}
                    else:
                        a, b = float(sig[i - 1]), float(sig[i])
                        w = (level - it[i - 1]) / (it[i] - it[i - 1])
                        s = float(np.exp(np.log(a) + w * (np.log(b) - np.log(a))))
                        ra, rb = by_sigma[sig[i - 1]]["rms_error"], by_sigma[sig[i]]["rms_error"]
                        hit = {"sigma": s, "rms_error": {c: ra[c] + w * (rb[c] - ra[c]) for c in ("v", "w")}}
                    break
            out[kind][str(level)] = hit
    return out


def run(cfg: SQPBenchConfig, progress: bool = True) -> dict:
    import casadi
    from tqdm import tqdm

    from mnemo_mpc.planning.mpc import SQPMPC

    t_build = time.perf_counter()
    mpc = SQPMPC(cfg.robot, cfg.mpc, cfg.window)
    build_s = time.perf_counter() - t_build
    baseline = SQPMPC(cfg.robot, cfg.baseline_mpc, cfg.window) if cfg.baseline else None
    reference = SQPMPC(cfg.robot, replace(cfg.mpc, tol=1e-10, tol_du=1e-9, max_iter=50), cfg.window)
    problems = make_problems(cfg)
    acc: dict[str, Any] = {"cold": [], "shift": [], "oracle": [], "oracle_duals": [], "shift_guess_error": []}
    acc["perturbed"] = {k: {s: [] for s in cfg.sigmas} for k in NOISES}
    acc["perturbed_error"] = {k: {s: [] for s in cfg.sigmas} for k in NOISES}
    acc["baseline"] = {"cold": [], "shift": []}
    t0 = time.perf_counter()
    for i, p in enumerate(tqdm(problems, desc="bench sqp", disable=not progress)):
        res = run_problem(mpc, cfg, p, baseline, i, reference)
        for k in ("cold", "shift", "oracle", "oracle_duals", "shift_guess_error"):
            acc[k].extend(res[k])
        for k in ("cold", "shift"):
            acc["baseline"][k].extend(res["baseline"][k])
        for kind in NOISES:
            for s in cfg.sigmas:
                acc["perturbed"][kind][s].extend(res["perturbed"][kind][s])
                acc["perturbed_error"][kind][s].extend(res["perturbed_error"][kind][s])

    modes: dict[str, Any] = {k: summarize(acc[k], cfg.clock) for k in ("cold", "shift", "oracle", "oracle_duals")}
    modes["perturbed"] = {
        kind: {
            str(s): dict(
                summarize(acc["perturbed"][kind][s], cfg.clock), rms_error=_rms(acc["perturbed_error"][kind][s])
            )
            for s in cfg.sigmas
        }
        for kind in NOISES
    }
    if acc["shift_guess_error"]:
        modes["shift"]["rms_error_vs_cold_optimum"] = _rms(acc["shift_guess_error"])
    result: dict[str, Any] = {"modes": modes, "crossings": crossings(modes["perturbed"])}
    if baseline is not None:
        modes["baseline"] = {k: summarize(acc["baseline"][k], cfg.clock) for k in ("cold", "shift")}
        result["ratios_vs_baseline"] = {
            k: {
                "time_per_iteration_p50": modes[k]["time_per_iteration_ms"]["p50"]
                / modes["baseline"][k]["time_per_iteration_ms"]["p50"],
                "time_p50": modes[k]["time_ms"]["p50"] / modes["baseline"][k]["time_ms"]["p50"],
                "iterations_mean": modes[k]["iterations"]["mean"] / modes["baseline"][k]["iterations"]["mean"],
            }
            for k in ("cold", "shift")
        }
    config = asdict(cfg)
    config.update(
        {
            "solves": {k: len(acc[k]) for k in ("cold", "shift", "oracle", "oracle_duals")},
            "feasibility": "dynamics error <= 1e-6 and clearance >= radius + margin - 1e-3 on the densified "
            f"trajectory ({cfg.mpc.densify} points per step, bilinear ESDF)",
            "timing": "the solver call(s), single process, OMP_NUM_THREADS as set; breakdown from the solvers' own "
            "timers (sqpmethod's per-call differences)",
            "cost_gap": "relative to each step's optimum re-solved from the cold solution (tol_pr 1e-10, tol_du 1e-9)",
            "control_range": (cfg.robot.control_upper - cfg.robot.control_lower).tolist(),
            "build": {"seconds": build_s, **asdict(mpc.build_info)},
            "paper": {
                "source": "seed 002 §5.2",
                "cold_iterations_mean": 4.78,
                "cold_max_iter": 10,
                "warm_iterations": 1,
                "cold_time_s": 0.12,
            },
            "casadi": casadi.__version__,
            "python": platform.python_version(),
            "machine": platform.machine(),
            "wall_s": time.perf_counter() - t0,
        }
    )
    return {"config": config, **result}


def plot(result: dict, path: Any) -> None:
    """Iterations (mean) and solve time (p50) against the start's RMS error, as a fraction of the control range
    (mean over v and w), white and smooth; cold and shift (and the baseline's) as reference lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from mnemo_mpc.atomic import atomic_write_bytes

    modes = result["modes"]
    span = np.asarray(result["config"]["control_range"], dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, key, label in (
        (axes[0], lambda s: s["iterations"]["mean"], "SQP iterations (mean)"),
        (axes[1], lambda s: s["time_ms"]["p50"], "solve time p50 (ms)"),
    ):
        for kind, style in (("white", "o-"), ("smooth", "s-")):
            by = modes["perturbed"][kind]
            sig = sorted(by, key=float)
            err = [100 * np.mean([by[s]["rms_error"]["v"] / span[0], by[s]["rms_error"]["w"] / span[1]]) for s in sig]
            ax.plot(err, [key(by[s]) for s in sig], style, label=f"perturbed optimum ({kind})")
        refs = [("cold", modes["cold"], "tab:red", "-"), ("shift", modes["shift"], "tab:green", "-")]
        refs.append(("oracle", modes["oracle"], "tab:gray", ":"))
        if "baseline" in modes:
            refs += [("baseline cold", modes["baseline"]["cold"], "tab:red", "--")]
            refs += [("baseline shift", modes["baseline"]["shift"], "tab:green", "--")]
        for name, s, color, ls in refs:
            ax.axhline(key(s), color=color, ls=ls, lw=1.2, label=name)
        if "rms_error_vs_cold_optimum" in modes["shift"]:
            e = modes["shift"]["rms_error_vs_cold_optimum"]
            ax.plot(
                [100 * np.mean([e["v"] / span[0], e["w"] / span[1]])],
                [key(modes["shift"])],
                "*",
                ms=12,
                color="tab:green",
                label="shift's own error",
            )
        ax.set_xscale("log")
        ax.set_xlabel("start error: RMS / control range (%), mean of v and w")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].axhline(1.0, color="k", lw=0.6)
    axes[0].legend(fontsize=7, loc="upper left")
    cfg = result["config"]
    fig.suptitle(
        f"SQP MPC: iterations and time vs warm-start accuracy ({cfg['problems']} problems x {cfg['steps']} "
        f"steps; N={cfg['mpc']['N']}, tol_pr {cfg['mpc']['tol']:g}, tol_du {cfg['mpc']['tol_du']:g})",
        fontsize=10,
    )
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def after_run(result: dict, args: argparse.Namespace) -> list[str]:
    """Write the PNG beside the JSON (the `bench` command calls this); returns the files written."""
    from pathlib import Path

    path = Path(args.plot) if args.plot else Path(args.out).with_suffix(".png")
    plot(result, path)
    return [str(path)]


def report(result: dict) -> str:
    """A compact table of every mode (the JSON has everything)."""
    modes = result["modes"]
    rows = [("cold", modes["cold"]), ("shift", modes["shift"]), ("oracle", modes["oracle"])]
    rows.append(("oracle_duals", modes["oracle_duals"]))
    for kind in NOISES:
        rows += [(f"{kind} {s}", v) for s, v in modes["perturbed"][kind].items()]
    if "baseline" in modes:
        rows += [(f"baseline {k}", modes["baseline"][k]) for k in ("cold", "shift")]
    lines = [
        f"{'mode':18s} {'it mean':>7s} {'p50':>4s} {'p95':>4s} {'ms p50':>7s} {'ms p95':>7s} {'ms/it':>6s} "
        f"{'success':>7s} {'feasible':>8s}"
    ]
    for name, s in rows:
        lines.append(
            f"{name:18s} {s['iterations']['mean']:7.2f} {s['iterations']['p50']:4.0f} {s['iterations']['p95']:4.0f} "
            f"{s['time_ms']['p50']:7.2f} {s['time_ms']['p95']:7.2f} {s['time_per_iteration_ms']['p50']:6.3f} "
            f"{s['success_rate']:7.3f} {s['feasible_rate']:8.3f}"
        )
    if "ratios_vs_baseline" in result:
        for k, r in result["ratios_vs_baseline"].items():
            lines.append(
                f"{k}: time per iteration p50 {r['time_per_iteration_p50']:.2f}x the baseline's, time p50 "
                f"{r['time_p50']:.2f}x, iterations {r['iterations_mean']:.2f}x"
            )
    for kind, c in result["crossings"].items():
        for level, hit in c.items():
            where = "never" if hit is None else f"sigma {hit['sigma']:.4f}"
            if hit and "rms_error" in hit:
                where += f" (RMS v {hit['rms_error']['v']:.4f} m/s, w {hit['rms_error']['w']:.4f} rad/s)"
            lines.append(f"{kind}: mean iterations cross {level} at {where}")
    return "\n".join(lines)
