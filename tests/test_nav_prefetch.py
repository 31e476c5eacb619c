"""The next step's problem as a step predicts it (nav/prefetch.py: next_context, Prefetcher)."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from mnemo_mpc.nav.prefetch import Prefetcher, next_context
from mnemo_mpc.planning.robot import RobotModel


def test_next_context_starts_where_the_plan_says_at_the_velocity_it_plans():
    robot = RobotModel()
    x = np.arange(31) * 0.05
    reference = np.column_stack([x, np.zeros_like(x)])
    here = SimpleNamespace(field="F", pose=np.zeros(3), velocity=np.zeros(2), subgoal=np.ones(3), reference=reference)
    states = np.array([[0.0, 0.0, 0.0], [0.04, 0.0, 0.1]])
    plan = SimpleNamespace(success=True, states=states, controls=np.array([[0.4, 1.0], [0.45, 1.0]]))
    # A lagging drive is sent more than the plan's first control (nav.actuation): the robot reaches the control.
    ctx = next_context(here, plan, np.array([0.5, 1.5]), robot, 0.1)
    np.testing.assert_allclose(ctx.pose, [0.04, 0.0, 0.1])
    np.testing.assert_allclose(ctx.velocity, [0.4, 1.0])
    assert ctx.field == "F" and ctx.subgoal is here.subgoal
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


def test_the_worker_puts_the_next_steps_targets_in_before_the_model_runs():
    """`submit(context, targets)`: the provider sees the sub-goal and reference `targets` gives at the predicted
    pose, computed on the worker; the prediction is taken for that pose and rolled out from the step's own."""
    robot, n, seen = RobotModel(), 3, []

    def provider(ctx):
        seen.append(ctx)
        return SimpleNamespace(controls=np.tile([0.2, 0.0], (n, 1)))

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
