"""SQP MPC benchmark: cold vs shifted warm start on a fixed, seeded suite of receding-horizon problems.

Seed 002 §5.2 reports SQP at 4.78 iterations cold (cap 10) and 1 iteration warm-started. Each problem here is a world
from `mnemo_mpc.planning.worlds` (kinds cycled: corridor, doors, clutter, open, rooms, mixed), a pose and velocity on
its global path, and a short receding-horizon run: at every step the MPC is solved cold (hold the pose) and warm from
the shifted solution of the previous step, on the same state, window and reference; the robot then applies u_0 of
the warm solution (the cold one if the warm solve failed) and the window moves with it. Before the recorded steps the
robot drives a seeded number of steps from the world's start, so the recorded states are ones the closed loop visits.
"""

from __future__ import annotations

import argparse
import logging
import platform
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from mnemo_mpc.errors import InputError, MnemoError

if TYPE_CHECKING:  # the CLI imports this module to declare flags; numpy/scipy/CasADi load when it runs
    import numpy as np

    from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, PlanResult
    from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)

KINDS = ("corridor", "doors", "clutter", "open", "rooms", "mixed")


@dataclass(frozen=True)
class SQPBenchConfig:
    problems: int = 200
    steps: int = 6  # receding-horizon steps per problem: step 0 is cold only, steps 1.. are solved cold and shifted
    seed: int = 0
    window: tuple[int, int] = (80, 80)  # local grid (rows, cols) around the robot: 4 m x 4 m at 0.05 m
    kinds: tuple[str, ...] = KINDS
    difficulty: float = 0.5
    speed_fraction: float = 0.8  # reference speed along the global path, as a fraction of v_max
    # Problems are states the closed-loop MPC visits (as in the paper's dataset, one SQP per MPC step): each run
    # starts at rest at the world's start pose and records `steps` steps after a pre-roll of U{0..preroll_max} steps.
    preroll_max: int = 60
    clock: str = "wall"  # "wall" (time_s) or "cpu" (process time: a shared machine inflates wall time)
    # The SQP alone is measured: no IPOPT fallback.
    mpc: MPCConfig = field(default_factory=lambda: _mpc_config(fallback=None))
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
    parser.add_argument("--qpsol", default=None, help="QP solver for sqpmethod (default: MPCConfig)")


def config_from_args(args: argparse.Namespace) -> SQPBenchConfig:
    from dataclasses import replace

    cfg = quick_config() if args.quick else SQPBenchConfig()
    mpc = cfg.mpc
    if args.max_iter is not None:
        mpc = replace(mpc, max_iter=args.max_iter)
    if args.qpsol is not None:
        mpc = replace(mpc, qpsol=args.qpsol)
    cfg = replace(cfg, seed=args.seed, clock=args.clock, mpc=mpc)
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
    from mnemo_mpc.planning.worlds import WorldConfig, generate_world

    robot = cfg.robot
    wcfg = WorldConfig(difficulty=cfg.difficulty, robot_radius_m=robot.radius, safety_margin_m=robot.safety_margin)
    problems = []
    for i in range(cfg.problems):
        kind = cfg.kinds[i % len(cfg.kinds)]
        world = generate_world(cfg.seed + i, wcfg, kind=kind)
        rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, i, 17]))
        path = plan_global_path(world.grid, world.start[:2], world.goal[:2], robot)
        problems.append(Problem(world, path, int(rng.integers(0, cfg.preroll_max + 1))))
    return problems


def run_problem(mpc: SQPMPC, cfg: SQPBenchConfig, problem: Problem) -> dict[str, list[PlanResult]]:
    """Drive the receding-horizon MPC from the world's start; record cold and shifted solves after the pre-roll.

    At each recorded step both starts solve the same problem (state, velocity, window, reference). The robot applies
    u_0 of the shifted solve when it succeeded, else of the cold solve; a step where both fail ends the problem.
    """
    import numpy as np

    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.global_path import local_reference

    robot, mcfg = cfg.robot, cfg.mpc
    world = problem.world
    state, velocity, progress = np.asarray(world.start, dtype=float).copy(), np.zeros(2), 0
    out: dict[str, list[PlanResult]] = {"cold": [], "shift": []}
    prev: PlanResult | None = None
    goal_yaw = float(world.goal[2])
    speed = cfg.speed_fraction * robot.v_max
    for t in range(problem.preroll + cfg.steps):
        record = t >= problem.preroll
        field_ = DistanceField(world.grid.window(state[:2], cfg.window))
        ref = local_reference(problem.path, state, mcfg.N, mcfg.dt, speed, goal_yaw, progress)
        progress = ref.progress
        warm = cold = None
        if prev is not None:
            warm = mpc.solve(
                field_, state, velocity, ref.goal, ref.points, warm_start=prev.shifted(), start_label="shift"
            )
        if record or warm is None or not warm.success:
            cold = mpc.solve(field_, state, velocity, ref.goal, ref.points, start_label="cold")
        if record:
            out["cold"].append(cold)
            if warm is not None:
                out["shift"].append(warm)
        use = warm if warm is not None and warm.success else cold
        if use is None or not use.success:
            break
        prev = use
        velocity = use.controls[0].copy()
        state = robot.step(state, velocity, mcfg.dt)
    return out


def summarize(results: list[PlanResult], clock: str = "wall") -> dict:
    """The benchmark's per-mode statistics M (see the issue): iterations, times, success and feasibility rates."""
    import numpy as np

    if not results:
        raise MnemoError("bench sqp: no solves recorded for a mode")
    it = np.array([r.iterations for r in results], dtype=float)
    t = np.array([r.cpu_time_s if clock == "cpu" else r.time_s for r in results]) * 1e3
    tpi = t / np.maximum(it, 1.0)
    ok = [r for r in results if r.success]
    feas = [r.feasible for r in ok]
    return {
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
    }


def run(cfg: SQPBenchConfig, progress: bool = True) -> dict:
    import casadi
    from tqdm import tqdm

    from mnemo_mpc.planning.mpc import SQPMPC

    mpc = SQPMPC(cfg.robot, cfg.mpc, cfg.window)
    problems = make_problems(cfg)
    modes: dict[str, list[PlanResult]] = {"cold": [], "shift": []}
    t0 = time.perf_counter()
    for p in tqdm(problems, desc="bench sqp", disable=not progress):
        res = run_problem(mpc, cfg, p)
        for k in modes:
            modes[k].extend(res[k])
    config = asdict(cfg)
    config.update(
        {
            "solves": {k: len(v) for k, v in modes.items()},
            "feasibility": "dynamics error <= 1e-6 and clearance >= radius + margin - 1e-3 on the densified "
            f"trajectory ({cfg.mpc.densify} points per step, bilinear ESDF)",
            "timing": "wall time of the solver call(s), single process, OMP_NUM_THREADS as set",
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
    return {"config": config, "modes": {k: summarize(v, cfg.clock) for k, v in modes.items()}}
