"""The learned start off the critical path: the next step's start, predicted during this period (issue 25).

The model's inference -- input features, the onnxruntime session, the rollout into a start: 0.4-1.2 ms on this CPU --
ran inside the control step, before the solve it serves, and cost more than the iterations it saved. Now, at the end
of each step, the controller hands the model the next step's problem as this step predicts it: the plan's state one
knot ahead (where the next step plans from while the robot follows the plan) moving at the command sent, this step's
distance field, and the sub-goal and reference the next step will compute there -- the controller's own
`targets(pose)`, from this step's path, progress and grid. A worker thread computes those targets (~0.8 ms, mostly the
speed profile) and runs the model while the robot drives (onnxruntime releases the GIL, so the model runs on the
second core), and the next step finds the prediction ready.

The sub-goal and reference matter: with this step's sub-goal and its reference advanced one knot (the last knot
repeated) -- the prediction before -- the start needed 1.40 SQP iterations on `bench pipeline`'s fresh steps where
the model run on the step's own problem needs 1.25, the sub-goal one knot behind costing most of it (the predicted
pose and velocity were exact on the ideal robot; this step's field instead of the next scan's made no difference).
Recomputed at the predicted pose they are the next step's to 1e-5 m, and the prefetched start needs 1.25 too. Without
`targets` (after a step that computed none: a recovery) the shifted first guess is what the model gets.

The next step takes it when it was made for a start within `max_offset_m` and `max_offset_rad` of its own, on a grid of
the same shape, and rolls the predicted controls out from its own start (a start must satisfy the dynamics from the
actual state; ~20 us). Otherwise -- the first step of a goal, a pose that jumped (a localiser fix, a recovery) --
there is no prediction, and the controller runs the model on the step, as before.

**Solved ahead.** With a `refine` function (the controller's: `Controller._solve_ahead`) the worker then solves the
predicted problem to convergence from the model's start -- the advanced-step idea of Zavala & Biegler, "The
advanced-step NMPC controller" (Automatica 2009): the problem of the next sampling time is solved during this period
from its predicted state, and the step itself only corrects for the difference -- and the next step starts from that
solution and its multipliers, its controls rolled out from the step's own start. The model is still what makes this work
on a fresh problem: from its start the predicted problem converges in ~1.8 iterations where a cold start needs ~4.2 and
fails one in nine (Jackal). Where the next step will have a fresh shift ("hybrid"), `submit(start=...)` solves ahead
from the shift instead, and no model runs. Jackal `bench pipeline` (`docs/learned_start.md`): fresh steps 1.39
iterations from the start solved ahead against 1.72 from the model's start; steady steps 1.37 against the shift's 1.55.
The prediction must be where the next step will plan from: for a lagging drive that is `Controller.next_problem`'s
prediction through the commands sent (1.51 iterations with the plan's own next state instead). When the next step comes
before the solve ahead has finished, it takes the model's start, which the worker publishes first (or its own shift):
the solve ahead can only make the start better, never late.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from mnemo_mpc.planning.mpc import WarmStart
from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)

# pose (x, y, yaw) -> (sub-goal (x, y, yaw), reference (N+1, 2) or None): what the controller computes at that pose
Targets = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray | None]]
# (the predicted problem, the model's start for it) -> its solution as a start (with multipliers), or None
Refine = Callable[[Any, Any], Any]


@dataclass
class _Pending:
    future: Future
    pose: np.ndarray  # the start the prediction was made for
    shape: tuple[int, int]
    model_start: Any = None  # the provider's start, published before the solve ahead (taken if that is not done)


class Prefetcher:
    """One worker thread running `provider(context) -> WarmStart | None` for the step after this one."""

    def __init__(
        self,
        provider: Callable[[Any], Any],
        robot: RobotModel,
        dt: float,
        max_offset_m: float = 0.25,
        max_offset_rad: float = 0.35,
        refine: Refine | None = None,
    ) -> None:
        self.provider, self.robot, self.dt, self.refine = provider, robot, float(dt), refine
        self.max_offset_m, self.max_offset_rad = float(max_offset_m), float(max_offset_rad)
        self._pool: ThreadPoolExecutor | None = None
        self._pending: _Pending | None = None
        self.last_failed = False  # the last `take` found the provider had raised

    def submit(self, context: Any, targets: Targets | None = None, start: Any = None, solve: bool = True) -> None:
        """Start predicting the start for `context` (the next step's problem, `next_context`); with `targets`, the
        worker first replaces its sub-goal and reference by `targets(context.pose)` (`at_targets`). With `start` (a
        shifted plan) the provider is not run: the worker only solves ahead from `start` (`refine`), and there is
        nothing to take unless that solve converges. `solve` False: the provider's start alone, not solved ahead.
        A prediction not yet taken is dropped."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mnemo-warm-start")
        pending = _Pending(Future(), np.asarray(context.pose, dtype=float).copy(), tuple(context.field.shape))
        refine = self.refine if solve else None
        pending.future = self._pool.submit(self._predict, context, targets, pending, start, refine)
        self._pending = pending

    def _predict(
        self, context: Any, targets: Targets | None, pending: _Pending, start: Any, refine: Callable | None
    ) -> Any:
        context = context if targets is None else at_targets(context, targets)
        if start is not None:
            return refine(context, start) if refine is not None else None
        guess = self.provider(context)
        if guess is None or refine is None:
            return guess
        pending.model_start = guess  # the step takes this if it comes before the solve ahead has finished
        return refine(context, guess) or guess

    def take(self, context: Any, timeout_s: float = 0.0) -> Any:
        """The prediction made for this step's `context`, its controls rolled out from `context.pose`; None when there
        is none, it was made for another start or grid, or it is not ready within `timeout_s`."""
        pending, self._pending = self._pending, None
        self.last_failed = False
        if pending is None or tuple(context.field.shape) != pending.shape:
            return None
        pose = np.asarray(context.pose, dtype=float)
        yaw_off = abs((pose[2] - pending.pose[2] + np.pi) % (2 * np.pi) - np.pi)
        if float(np.hypot(*(pose[:2] - pending.pose[:2]))) > self.max_offset_m or yaw_off > self.max_offset_rad:
            pending.future.cancel()
            return None
        try:
            guess = pending.future.result(timeout=timeout_s)
        except TimeoutError:
            if pending.model_start is not None:
                guess = pending.model_start  # the solve ahead is still running: the model's start
            else:
                log.debug("the prefetched start was not ready; the step runs the model itself")
                return None
        except Exception as exc:  # a learned model must never take the controller down
            self.last_failed = True
            log.warning("prefetched warm start failed (%s: %s); not using it this step", type(exc).__name__, exc)
            return None
        if guess is None:
            return None
        controls = np.asarray(guess.controls, dtype=float)
        return WarmStart(self.robot.rollout(pose, controls, self.dt), controls, guess.lam_g, guess.lam_x)

    def wait(self, timeout_s: float | None = None) -> None:
        """Block until the pending prediction is done, or `timeout_s` has passed (a benchmark or a simulation stands
        in for the control period this way)."""
        if self._pending is not None:
            try:
                self._pending.future.exception(timeout=timeout_s)
            except TimeoutError:
                pass  # still running: the next step takes what is ready

    def clear(self) -> None:
        """Drop any prediction (a new goal, a reset)."""
        if self._pending is not None:
            self._pending.future.cancel()
        self._pending = None

    def close(self) -> None:
        self.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def next_context(context: Any, plan: Any, command: np.ndarray, robot: RobotModel, dt: float) -> Any:
    """The next step's problem as this step predicts it: the start one period on -- the plan's state one knot ahead
    moving at its first control, the velocity the plan has the robot reach (without a plan, `command` applied for one
    period) -- the same field, and as a first guess the same sub-goal and the reference advanced one knot
    (`at_targets` puts the next step's own in their place).

    The plan's control, not the command sent: for a lagging drive the controller sends the command that makes the
    loops reach that velocity (`nav.actuation`), which can be far from it (Jackal `bench pipeline`: fresh learned
    iterations 1.89 with the sent command, see `docs/learned_start.md`)."""
    from mnemo_mpc.nav.controller import WarmStartContext

    if plan is not None and plan.success:
        pose = np.asarray(plan.states[1], dtype=float)
        velocity = np.asarray(plan.controls[0], dtype=float).copy()
    else:
        velocity = np.asarray(command, dtype=float).copy()
        pose = robot.step(np.asarray(context.pose, dtype=float), velocity, dt)
    reference = context.reference
    if reference is not None:
        reference = np.concatenate([reference[1:], reference[-1:]], axis=0)
    return WarmStartContext(context.field, pose, velocity, context.subgoal, reference, context.margin)


def at_targets(context: Any, targets: Targets) -> Any:
    """`context` with the sub-goal and reference that `targets` gives at its pose."""
    subgoal, reference = targets(np.asarray(context.pose, dtype=float))
    return replace(context, subgoal=np.asarray(subgoal, dtype=float), reference=reference)
