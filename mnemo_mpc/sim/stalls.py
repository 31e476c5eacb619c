"""Where a peer stalls, and what the MPC does on the same step's problem (issue 30: "why, measured causes").

A peer (`mnemo_mpc.peers`) replaces only the SQP solve of the controller, so every step it plans has a problem the MPC
could have been given: the same distance field, start state, sub-goal, reference and margin. `stall_report` drives
one episode with the peer, records each step's problem, and for the steps of its last `window_s` seconds (the stall
of an episode that timed out) compares

* the peer's proposal, rolled out over the horizon, and
* the MPC solved cold on that problem (no fallback solver, no wall-clock budget, up to `SOLVE_ITERATIONS`),

by their progress: the arc length of the followed path (the controller's own, `Controller.path_ahead`) at the point
nearest the horizon's end. Where the MPC, given the peer's own problem, goes on and the peer does not, the peer's
planner did not find a motion that exists; where neither goes on, the peer had driven itself into a state the MPC
would not have reached (the MPC's own run of the same world is `eval`'s).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError

# A horizon that gets at least this far along the path counts as going on.
PROGRESS_M = 0.2
SOLVE_ITERATIONS = 50  # the MPC's SQP iterations on each compared problem


def path_progress(path: np.ndarray, states: np.ndarray) -> float:
    """Arc length of `path` (M, 2) at its point nearest the last of `states` (K, >=2)."""
    path = np.asarray(path, dtype=float)
    if path.ndim != 2 or path.shape[0] < 1:
        raise InputError(f"path_progress.path: expected (M, 2) points, got shape {path.shape}")
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(path, axis=0).T))])
    end = np.asarray(states, dtype=float)[-1, :2]
    return float(s[int(np.argmin(np.hypot(*(path - end).T)))])


@dataclass
class _Problem:
    t_s: float
    context: Any  # WarmStartContext
    margin: float
    controls: np.ndarray  # the peer's proposal
    path: np.ndarray  # the followed path ahead of the robot


def stall_report(
    setup: Any,
    controller: Any,
    world: Any,
    window_s: float = 15.0,
    every: int = 5,
    global_path: bool = True,
    time_limit_s: float | None = None,
) -> dict[str, Any]:
    """Drive `world` with the peer `controller` (built on `setup`, a `ClosedLoopSetup`) and compare it with the MPC on
    every `every`-th step problem of its last `window_s` seconds (module docstring); nothing is compared after a
    success. JSON-ready: the episode's outcome, the statuses of the window, a row per compared step and a summary.
    `time_limit_s`: the episode's (None: `EpisodeConfig`'s, from the path's length)."""
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
    from mnemo_mpc.sim.simulator import Simulator

    if not hasattr(controller, "propose"):
        raise InputError(f"stall_report.controller: expected a peer (mppi, dwa), got {type(controller).__name__}")
    problems: list[_Problem] = []
    propose = controller.propose

    def recorded(context: Any, margin: float) -> Any:
        proposal = propose(context, margin)
        res = context.field.grid.resolution
        path = controller.path_ahead(np.asarray(context.pose, dtype=float), res)
        problems.append(_Problem(controller._clock, context, margin, np.asarray(proposal.controls), path))
        return proposal

    controller.propose = recorded
    with Simulator(setup.sim) as sim:
        result = run_episode(
            world,
            sim=sim,
            controller=controller,
            config=EpisodeConfig(keep_plan_every=0, global_path=global_path, time_limit_s=time_limit_s),
        )
    m = result.metrics
    report: dict[str, Any] = {
        "world": m["world"],
        "outcome": m["outcome"],
        "time_s": m["time_s"],
        "final_dist_to_goal_m": m["final_dist_to_goal_m"],
        "recoveries": m["recoveries"],
        "rows": [],
    }
    if m["success"]:
        return report
    t_end = result.steps[-1]["t"] if result.steps else 0.0
    statuses: dict[str, int] = {}
    for s in result.steps:
        if s["t"] >= t_end - window_s:
            statuses[s["status"]] = statuses.get(s["status"], 0) + 1
    report["statuses"] = statuses
    # The MPC as it would solve this problem with time to spare: no wall-clock budget, SOLVE_ITERATIONS (a cold start
    # at speed can need more than the real-time cap; the question is whether a motion exists, not how fast).
    unbounded = dataclasses.replace(setup.mpc, max_time_s=None, max_iter=SOLVE_ITERATIONS, fallback=None)
    mpc_controller = dataclasses.replace(setup, profile=dataclasses.replace(setup.profile, mpc=unbounded)).controller(
        "cold", None, "mpc"
    )
    dt = setup.mpc.dt
    for p in [p for p in problems if p.t_s >= t_end - window_s][::every]:
        ctx = p.context
        mpc = mpc_controller.mpc(ctx.field.shape)
        plan = mpc.solve(
            ctx.field, ctx.pose, ctx.velocity, ctx.subgoal, ctx.reference, margin=p.margin, use_fallback=False
        )
        peer_states = controller.robot.rollout(np.asarray(ctx.pose, dtype=float), p.controls, dt)
        report["rows"].append(
            {
                "t_s": round(float(p.t_s), 2),
                "pose": np.round(np.asarray(ctx.pose, dtype=float), 3).tolist(),
                "velocity": np.round(np.asarray(ctx.velocity, dtype=float), 3).tolist(),
                "peer_progress_m": round(path_progress(p.path, peer_states), 3),
                "mpc_converged": bool(plan.success),
                "mpc_progress_m": round(path_progress(p.path, plan.states), 3) if plan.success else None,
                "mpc_clearance_m": round(float(plan.footprint_clearance), 4) if plan.success else None,
            }
        )
    report["summary"] = summarize([report])
    return report


def summarize(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the compared steps of `reports`: how many, how often the MPC converged, each side's progress p50 and how
    often it reached `PROGRESS_M`."""
    rows = [r for rep in reports for r in rep["rows"]]
    mpc = [r["mpc_progress_m"] for r in rows if r["mpc_converged"]]
    peer = [r["peer_progress_m"] for r in rows]
    return {
        "steps": len(rows),
        "mpc_converged": len(mpc),
        "mpc_progress_p50_m": float(np.median(mpc)) if mpc else None,
        "mpc_goes_on": int(sum(v >= PROGRESS_M for v in mpc)),
        "peer_progress_p50_m": float(np.median(peer)) if peer else None,
        "peer_goes_on": int(sum(v >= PROGRESS_M for v in peer)),
        "goes_on_m": PROGRESS_M,
    }
