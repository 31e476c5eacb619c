"""The dataset's view of a closed-loop episode (`mnemo_mpc.sim.episode.run_episode`'s `StepObserver`): per step, the
context the controller had (local grid, pose, velocity, goal, sub-goal, reference) and the *expert* trajectory -- the
SQP solution converged to tolerance. A closed-loop solve that converged within its iteration cap already is that
solution; a solve that stopped at the cap is continued from the same start with `expert_max_iter` iterations.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from mnemo_mpc.dataset.store import ALL_STEP_FIELDS
from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControlOutput
from mnemo_mpc.planning.mpc import PlanResult

log = logging.getLogger(__name__)


class ExpertRecorder:
    """Records an episode's steps for the dataset (module docstring); `finish` returns them as the store's arrays."""

    def __init__(self, expert_max_iter: int = 100) -> None:
        self.expert_max_iter = int(expert_max_iter)
        self.rows: dict[str, list[Any]] = {}

    def step(self, k: int, obs: Any, goal: np.ndarray, out: ControlOutput, controller: Controller) -> dict[str, Any]:
        expert = expert_solution(controller, out, obs, goal, self.expert_max_iter)
        _record_step(self.rows, k, obs, goal, out, expert, controller.mpc_config.N)
        return {"expert_iterations": int(expert.iterations) if expert is not None else 0}

    def finish(self, grid_shape: tuple[int, int], n: int) -> dict[str, Any]:
        return stack_record(self.rows, grid_shape, n)


def converged(plan: PlanResult | None) -> bool:
    # sqpmethod reports success only when its primal/dual tolerances are met; the NLP fallback likewise.
    return plan is not None and plan.success


def expert_solution(
    controller: Controller, out: ControlOutput, obs: Any, goal: np.ndarray, max_iter: int
) -> PlanResult | None:
    """The converged solution for this step's problem: the closed-loop solve when it converged within its cap, else
    the same problem continued from the same start with `max_iter` iterations; None where there is no problem (a
    recovery step, a start the MPC refused)."""
    if converged(out.plan):
        return out.plan
    if out.field is None or out.solve_error is not None:
        return None
    mpc = controller.mpc(obs.local_grid.shape)
    start = out.start_state if out.start_state is not None else np.concatenate([obs.pose, obs.velocity])
    try:
        return mpc.solve(
            out.field,
            start[:3],
            start[3:],
            out.subgoal,
            reference=out.reference,
            warm_start=out.warm_start,
            max_iter=max_iter,
            start_label="expert",
        )
    except InputError as exc:
        log.debug("expert solve refused: %s", exc)
        return None


def _record_step(
    rec: dict[str, list[Any]],
    k: int,
    obs: Any,
    goal: np.ndarray,
    out: ControlOutput,
    expert: PlanResult | None,
    n: int,
) -> None:
    plan = out.plan
    grid = obs.local_grid
    # A step that planned nothing (a recovery, a rotation to the path) has no sub-goal: the goal stands in for it.
    subgoal = out.subgoal if out.subgoal is not None else goal
    row = {
        "step": k,
        "grid": grid.data,
        "grid_origin": np.asarray(grid.origin, dtype=float),
        "grid_resolution": grid.resolution,
        "pose": out.start_state[:3] if out.start_state is not None else obs.pose,  # where the plan starts
        "velocity": out.start_state[3:] if out.start_state is not None else obs.velocity,
        "goal": goal,
        "subgoal": subgoal,
        "expert_states": expert.states if expert is not None else np.tile(obs.pose, (n + 1, 1)),
        "expert_controls": expert.controls if expert is not None else np.zeros((n, 2)),
        "expert_iterations": expert.iterations if expert is not None else 0,
        "expert_time_s": expert.time_s if expert is not None else 0.0,
        "expert_status": expert.status if expert is not None else (out.solve_error or "not solved"),
        "expert_success": converged(expert),
        "mpc_iterations": plan.iterations if plan is not None else 0,
        "mpc_time_s": plan.time_s if plan is not None else 0.0,
        "mpc_status": plan.status if plan is not None else (out.solve_error or "not solved"),
        "mpc_success": bool(plan is not None and plan.success),
        "command": out.command,
        "reference": out.reference if out.reference is not None else np.tile(np.asarray(subgoal)[:2], (n + 1, 1)),
    }
    for key, value in row.items():
        rec.setdefault(key, []).append(np.array(value, copy=True) if isinstance(value, np.ndarray) else value)


def stack_record(rec: dict[str, list[Any]], grid_shape: tuple[int, int], n: int) -> dict[str, Any]:
    """The kept rows as the store's per-step arrays (`ALL_STEP_FIELDS`); empty arrays of the right shape for none."""
    out: dict[str, Any] = {}
    for name, (dtype, trailing) in ALL_STEP_FIELDS.items():
        values = rec.get(name, [])
        if name in ("expert_status", "mpc_status"):
            out[name] = [str(v) for v in values]
        elif values:
            out[name] = np.stack([np.asarray(v) for v in values]).astype(dtype)
        else:
            sym = {"H": grid_shape[0], "W": grid_shape[1], "N1": n + 1, "N": n}
            out[name] = np.zeros((0, *(sym.get(t, t) if isinstance(t, str) else t for t in trailing)), dtype=dtype)
    return out
