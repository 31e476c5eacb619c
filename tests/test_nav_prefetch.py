"""The next step's problem as a step predicts it, and its start made during this period (nav/prefetch.py:
next_context, Prefetcher, the solve ahead)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from mnemo_mpc.nav.prefetch import Prefetcher, next_context
from mnemo_mpc.planning.mpc import WarmStart
from mnemo_mpc.planning.robot import RobotModel


def test_next_context_starts_where_the_plan_says_at_the_velocity_it_plans():
    robot = RobotModel()
    x = np.arange(31) * 0.05
    reference = np.column_stack([x, np.zeros_like(x)])
    here = SimpleNamespace(
        field="F", pose=np.zeros(3), velocity=np.zeros(2), subgoal=np.ones(3), reference=reference, margin=0.02
    )
    states = np.array([[0.0, 0.0, 0.0], [0.04, 0.0, 0.1]])
    plan = SimpleNamespace(success=True, states=states, controls=np.array([[0.4, 1.0], [0.45, 1.0]]))
    # A lagging drive is sent more than the plan's first control (nav.actuation): the robot reaches the control.
    ctx = next_context(here, plan, np.array([0.5, 1.5]), robot, 0.1)
    np.testing.assert_allclose(ctx.pose, [0.04, 0.0, 0.1])
    np.testing.assert_allclose(ctx.velocity, [0.4, 1.0])
    assert ctx.field == "F" and ctx.subgoal is here.subgoal and ctx.margin == 0.02
    np.testing.assert_allclose(ctx.reference[:-1], reference[1:])  # advanced one knot, the last one repeated
    np.testing.assert_allclose(ctx.reference[-1], reference[-1])
    failed = next_context(here, SimpleNamespace(success=False), np.array([0.4, 0.0]), robot, 0.1)
    np.testing.assert_allclose(failed.pose, robot.step(np.zeros(3), np.array([0.4, 0.0]), 0.1))


@dataclass
class _Context:
    field: object
    pose: np.ndarray
    velocity: np.ndarray
    subgoal: np.ndarray
    reference: np.ndarray | None
    margin: float | None = None


def test_the_worker_puts_the_next_steps_targets_in_before_the_model_runs():
    """`submit(context, targets)`: the provider sees the sub-goal and reference `targets` gives at the predicted
    pose, computed on the worker; the prediction is taken for that pose and rolled out from the step's own."""
    robot, n, seen = RobotModel(), 3, []

    def provider(ctx):
        seen.append(ctx)
        return WarmStart(np.zeros((n + 1, 3)), np.tile([0.2, 0.0], (n, 1)))

    def targets(pose):
        return pose + [1.0, 0.0, 0.0], np.tile(pose[:2], (n + 1, 1))

    ahead = Prefetcher(provider, robot, 0.1)
    pose = np.array([1.0, 2.0, 0.3])
    stale = _Context(field=np.zeros((4, 4)), pose=pose, velocity=np.zeros(2), subgoal=np.zeros(3), reference=None)
    try:
        ahead.submit(stale, targets)
        ahead.wait()
        got = ahead.take(_Context(stale.field, pose + [0.01, 0.0, 0.0], np.zeros(2), np.zeros(3), None))
    finally:
        ahead.close()
    np.testing.assert_allclose(seen[0].subgoal, [2.0, 2.0, 0.3])
    np.testing.assert_allclose(seen[0].reference, np.tile([1.0, 2.0], (n + 1, 1)))
    np.testing.assert_allclose(got.states[0], pose + [0.01, 0.0, 0.0])


def test_a_start_solved_ahead_comes_with_its_multipliers_and_the_models_start_stands_in_while_it_runs():
    """With `refine` the worker solves the predicted problem from the model's start, and the next step takes that
    solution and its multipliers, rolled out from its own start. A step that comes while the solve still runs takes
    the model's start, published first, rather than nothing (which would run the model on the step)."""
    robot, n = RobotModel(), 3
    model_start = WarmStart(np.zeros((n + 1, 3)), np.tile([0.2, 0.0], (n, 1)))
    solved = WarmStart(np.zeros((n + 1, 3)), np.tile([0.3, 0.1], (n, 1)), np.arange(4.0), np.arange(2.0))
    release = threading.Event()

    def refine(ctx, guess):
        assert guess is model_start
        release.wait(5.0)
        return solved

    ahead = Prefetcher(lambda ctx: model_start, robot, 0.1, refine=refine)
    pose = np.array([1.0, 2.0, 0.3])
    here = _Context(field=np.zeros((4, 4)), pose=pose, velocity=np.zeros(2), subgoal=np.zeros(3), reference=None)
    try:
        ahead.submit(here)
        deadline = time.monotonic() + 5.0
        while ahead._pending.model_start is None and time.monotonic() < deadline:
            time.sleep(0.001)
        early = ahead.take(here)  # the solve ahead is waiting on `release`
        release.set()
        ahead.submit(here)
        ahead.wait()
        late = ahead.take(here)
    finally:
        release.set()
        ahead.close()
    np.testing.assert_allclose(early.controls, model_start.controls)
    assert early.lam_g is None
    np.testing.assert_allclose(late.controls, solved.controls)
    np.testing.assert_allclose(late.states, robot.rollout(pose, solved.controls, 0.1))
    np.testing.assert_allclose(late.lam_g, solved.lam_g)
    np.testing.assert_allclose(late.lam_x, solved.lam_x)


def test_a_submission_without_the_solve_ahead_gives_the_models_start_and_solves_nothing():
    """`submit(solve=False)` (the controller's, with a moving obstacle predicted): the provider's start alone; with a
    shifted plan to start from there is then nothing to do."""
    robot, n = RobotModel(), 3
    model_start = WarmStart(np.zeros((n + 1, 3)), np.tile([0.2, 0.0], (n, 1)))
    solves = []
    ahead = Prefetcher(lambda ctx: model_start, robot, 0.1, refine=lambda ctx, guess: solves.append(guess) or guess)
    here = _Context(field=np.zeros((4, 4)), pose=np.zeros(3), velocity=np.zeros(2), subgoal=np.zeros(3), reference=None)
    try:
        ahead.submit(here, solve=False)
        ahead.wait()
        got = ahead.take(here)
        ahead.submit(here, start=model_start, solve=False)
        ahead.wait()
        nothing = ahead.take(here)
        ahead.submit(here)  # and by default it solves ahead
        ahead.wait()
        ahead.take(here)
    finally:
        ahead.close()
    np.testing.assert_allclose(got.controls, model_start.controls)
    assert nothing is None and len(solves) == 1


def test_waiting_for_the_worker_is_bounded_by_what_is_left_of_the_period():
    """`wait(timeout_s)` (what `Controller.idle` gives a simulation's worker: the rest of the control period) returns
    when the worker is done or the time is up, whichever comes first; a worker still running then runs on."""
    release = threading.Event()
    threading.Timer(2.0, release.set).start()  # a worker that would run past the period

    def slow(ctx):
        release.wait(5.0)
        return None

    ahead = Prefetcher(slow, RobotModel(), 0.1)
    here = _Context(field=np.zeros((4, 4)), pose=np.zeros(3), velocity=np.zeros(2), subgoal=np.zeros(3), reference=None)
    try:
        ahead.submit(here)
        t = time.monotonic()
        ahead.wait(0.05)
        waited = time.monotonic() - t
        assert not ahead._pending.future.done()
    finally:
        release.set()
        ahead.close()
    assert 0.04 < waited < 1.0
