"""The next step's problem as a step predicts it (nav/prefetch.py: next_context)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mnemo_mpc.nav.prefetch import next_context
from mnemo_mpc.planning.robot import RobotModel


def test_next_context_starts_where_the_plan_says_at_the_command_sent():
    robot = RobotModel()
    x = np.arange(31) * 0.05
    reference = np.column_stack([x, np.zeros_like(x)])
    here = SimpleNamespace(field="F", pose=np.zeros(3), velocity=np.zeros(2), subgoal=np.ones(3), reference=reference)
    plan = SimpleNamespace(success=True, states=np.array([[0.0, 0.0, 0.0], [0.04, 0.0, 0.1]]))
    ctx = next_context(here, plan, np.array([0.4, 1.0]), robot, 0.1)
    np.testing.assert_allclose(ctx.pose, [0.04, 0.0, 0.1])
    np.testing.assert_allclose(ctx.velocity, [0.4, 1.0])  # the velocity the robot will have: the command sent
    assert ctx.field == "F" and ctx.subgoal is here.subgoal
    np.testing.assert_allclose(ctx.reference[:-1], reference[1:])  # advanced one knot, the last one repeated
    np.testing.assert_allclose(ctx.reference[-1], reference[-1])
    failed = next_context(here, SimpleNamespace(success=False), np.array([0.4, 0.0]), robot, 0.1)
    np.testing.assert_allclose(failed.pose, robot.step(np.zeros(3), np.array([0.4, 0.0]), 0.1))
