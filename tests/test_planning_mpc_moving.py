"""The MPC's time-varying constraints for predicted moving obstacles (issue 28, `MPCConfig.moving_obstacles`)."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning import nlp as nlp_forms
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, PlanResult, PredictedObstacles
from mnemo_mpc.planning.robot import RobotModel

SHAPE = (80, 80)
ROBOT = RobotModel()  # a 0.2 m disc, safety margin 0.05 m
OBSTACLE_R = 0.2


def open_field() -> DistanceField:
    return DistanceField(OccupancyGrid(np.zeros(SHAPE, np.int8), 0.05, (-2.0, -2.0, 0.0)))


@pytest.fixture(scope="module")
def mpc() -> SQPMPC:
    return SQPMPC(ROBOT, MPCConfig(moving_obstacles=2, compile=False, fallback=None), SHAPE)


def crossing(mpc: SQPMPC, t0: float, speed: float = 0.6) -> PredictedObstacles:
    """A box crossing the line y = 0 at x = 0, upwards at `speed`, predicted exactly over the horizon."""
    n, dt = mpc.config.N, mpc.config.dt
    t = t0 + dt * np.arange(1, n + 1)
    centres = np.stack([np.zeros(n), -1.5 + speed * t], axis=1)[:, None, :]
    return PredictedObstacles(centres, np.full((n, 1), OBSTACLE_R))


def test_condensed_derivatives_with_moving_rows_match_finite_differences():
    n, m = 6, 2
    discs = Footprint.rectangle(0.5, 0.4).cover(0.05).discs[:, :2]
    nlp = nlp_forms.condensed(n, 0.1, (20, 20), MPCConfig().weights, discs, m)
    k = discs.shape[0]
    assert nlp.ng == (2 + k + m) * n and nlp.discs == k + m
    rng = np.random.default_rng(1)
    layout = nlp.layout
    obstacles = rng.uniform(-0.6, 0.6, size=(n, m, 2))
    head = layout.head(
        np.array([0.1, -0.05, 0.3]), np.zeros(2), np.array([0.6, 0.2, 0.0]), 1.0, np.zeros((n, 2)),
        (-0.5, -0.5, 0.1), 0.05, obstacles,
    )  # fmt: skip
    p = np.concatenate([head, rng.uniform(0.2, 0.6, size=layout.size - layout.head_size)])
    x = rng.uniform(-0.4, 0.4, size=2 * n)
    fns = nlp.functions
    g0 = np.array(fns["fg"](x, p)[1]).ravel()
    # the moving rows are the centre's distances to the predicted obstacles, knot by knot
    states = np.array(fns["rollout"](x, head)).T  # (N + 1, 3)
    rows = g0[2 * n :].reshape(n, k + m)[:, k:]
    np.testing.assert_allclose(rows, np.hypot(*(states[1:, None, :2] - obstacles).transpose(2, 0, 1)), atol=1e-9)
    eps = 1e-6
    fd = np.column_stack([(np.array(fns["fg"](x + eps * e, p)[1]).ravel() - g0) / eps for e in np.eye(2 * n)])
    np.testing.assert_allclose(np.array(fns["eval"](x, p)[1]).T, fd, atol=1e-4)
    lam = rng.uniform(0.0, 1.0, size=nlp.ng)
    f, g = nlp.nlp["f"], nlp.nlp["g"]
    lag = ca.Function("lag", [nlp.nlp["x"], nlp.nlp["p"]], [ca.gradient(f + ca.dot(ca.DM(lam), g), nlp.nlp["x"])])
    np.testing.assert_allclose(np.array(fns["check"](x, p, lam)[2]).ravel(), np.array(lag(x, p)).ravel(), atol=1e-8)
    # the exact Hessian's blocks against the symbolic Hessian of the Lagrangian (S and H_w as CondensedEvaluator has)
    ev = nlp_forms.CondensedEvaluator(nlp)
    ev.set_parameters(p)
    ev.derivatives(x)
    hess = ca.Function("h", [nlp.nlp["x"], nlp.nlp["p"]], [ca.hessian(f + ca.dot(ca.DM(lam), g), nlp.nlp["x"])[0]])
    np.testing.assert_allclose(ev.hessian(lam, exact=True), np.array(hess(x, p)), atol=1e-6)


def test_parked_slots_leave_the_plan_as_without_them(mpc):
    static = SQPMPC(ROBOT, MPCConfig(compile=False, fallback=None), SHAPE)
    field, state, goal = open_field(), np.array([-1.5, 0.1, 0.2]), np.array([1.2, -0.3, 0.0])
    a = static.solve(field, state, np.zeros(2), goal)
    b = mpc.solve(field, state, np.zeros(2), goal)
    c = mpc.solve(
        field, state, np.zeros(2), goal, obstacles=PredictedObstacles(np.zeros((30, 0, 2)), np.zeros((30, 0)))
    )
    assert a.success and b.success and c.success
    np.testing.assert_allclose(b.controls, a.controls, atol=1e-6)
    np.testing.assert_allclose(c.controls, a.controls, atol=1e-6)
    assert b.moving_slack is None and b.feasible
    assert mpc.duals_size == (2 * 30 + 3 * 30, 60)


def test_the_robot_passes_behind_a_crossing_obstacle(mpc):
    """Closed loop on the MPC's own model: the box crosses the robot's straight line to the goal; the robot keeps its
    margin from where the box *will be* at every knot, and still gets there."""
    field, goal = open_field(), np.array([1.5, 0.0, 0.0])
    state, velocity, ws = np.array([-1.5, 0.0, 0.0]), np.zeros(2), None
    dt = mpc.config.dt
    least = np.inf
    for k in range(70):
        plan = mpc.solve(field, state, velocity, goal, obstacles=crossing(mpc, k * dt), warm_start=ws)
        assert plan.success and plan.feasible, (k, plan.status)
        state, velocity, ws = plan.states[1], plan.controls[0], plan.shifted()
        box = np.array([0.0, -1.5 + 0.6 * (k + 1) * dt])
        least = min(least, float(np.hypot(*(state[:2] - box))) - ROBOT.radius - OBSTACLE_R)
    assert least >= ROBOT.safety_margin - 1e-3
    assert np.hypot(*(state[:2] - goal[:2])) < 0.1
    # The same run without the prediction drives straight through where the box comes (the fault this guards).
    plain = SQPMPC(ROBOT, MPCConfig(compile=False, fallback=None), SHAPE).solve(
        field, np.array([-1.5, 0, 0]), np.zeros(2), goal
    )
    t = dt * np.arange(1, 31)
    gaps = np.hypot(plain.states[1:, 0], plain.states[1:, 1] - (-1.5 + 0.6 * t)) - ROBOT.radius - OBSTACLE_R
    assert gaps.min() < 0


def test_an_obstacle_faster_than_the_robot_can_escape_leaves_a_feasible_problem(mpc):
    """Head-on at 1.2 m/s from 0.9 m: no motion keeps the full margin. The rows are capped at what the best simple
    escape keeps, so the solve still converges, and its closest approach to the full bound is no worse than
    braking's (here it turns aside: better). With the full bound the problem is infeasible."""
    n, dt = mpc.config.N, mpc.config.dt
    state, velocity = np.array([0.0, 0.0, 0.0]), np.array([0.4, 0.0])
    t = dt * np.arange(1, n + 1)
    centres = np.stack([0.9 - 1.2 * t, np.zeros(n)], axis=1)[:, None, :]
    obstacles = PredictedObstacles(centres, np.full((n, 1), OBSTACLE_R))
    field, goal = open_field(), np.array([1.8, 0.0, 0.0])
    plan = mpc.solve(field, state, velocity, goal, obstacles=obstacles)
    assert plan.success and plan.feasible, plan.status
    full = ROBOT.radius + OBSTACLE_R + ROBOT.safety_margin
    brake = ROBOT.rollout(state, mpc.escape_motions(velocity)[0], dt)[1:, :2]
    braking_worst = np.min(np.hypot(*(brake - centres[:, 0]).T)) - full
    plan_worst = np.min(np.hypot(*(plan.states[1:, :2] - centres[:, 0]).T)) - full
    assert braking_worst < 0  # the full bound cannot be met by braking: the cap is what makes this feasible
    assert plan_worst >= braking_worst + 0.05


def test_a_robot_that_plans_forward_only_backs_away_from_a_body_coming_at_it():
    """A robot that may reverse but plans forward only (`MPCConfig.plan_v_min` 0: its lidar is blind behind) stands
    at rest, a box coming head-on at 0.3 m/s from 0.9 m. Braking or turning in place leaves it in the box's way;
    meeting the prediction the plan may reverse (`SQPMPC._controls_lower`), and backs away keeping more room than any
    forward escape. With no obstacle predicted the plan still goes forward only."""
    robot = RobotModel(v_min=-0.35)
    mpc = SQPMPC(robot, MPCConfig(moving_obstacles=1, plan_v_min=0.0, compile=False, fallback=None), SHAPE)
    n, dt = mpc.config.N, mpc.config.dt
    state, velocity, goal = np.array([0.0, 0.0, 0.0]), np.zeros(2), np.array([1.8, 0.0, 0.0])
    t = dt * np.arange(1, n + 1)
    centres = np.stack([0.9 - 0.3 * t, np.zeros(n)], axis=1)[:, None, :]
    obstacles = PredictedObstacles(centres, np.full((n, 1), OBSTACLE_R))
    field = open_field()
    plan = mpc.solve(field, state, velocity, goal, obstacles=obstacles)
    assert plan.success and plan.feasible, plan.status
    assert plan.controls[:, 0].min() < -0.1  # it reverses
    gap = np.hypot(*(plan.states[1:, :2] - centres[:, 0]).T) - robot.radius - OBSTACLE_R
    forward = [e for e in mpc.escape_motions(velocity) if e[:, 0].min() >= 0.0]
    forward_gaps = [np.hypot(*(robot.rollout(state, e, dt)[1:, :2] - centres[:, 0]).T) for e in forward]
    assert gap.min() > max(g.min() for g in forward_gaps) - robot.radius - OBSTACLE_R + 0.05
    free = mpc.solve(field, state, velocity, goal)
    assert free.success and free.controls[:, 0].min() >= -1e-9


def test_a_plan_too_close_to_a_predicted_obstacle_is_not_feasible():
    fields = dict(states=np.zeros((2, 3)), controls=np.zeros((1, 2)), iterations=1, time_s=0.0, status="converged",
                  success=True, cost=0.0, max_dynamics_violation=0.0, min_clearance=1.0, start="cold")  # fmt: skip
    assert PlanResult(**fields, moving_slack=0.0).feasible and PlanResult(**fields).feasible
    assert not PlanResult(**fields, moving_slack=-0.02).feasible


def test_bad_moving_obstacle_inputs_are_named(mpc):
    with pytest.raises(InputError, match="moving_obstacles"):
        MPCConfig(moving_obstacles=-1)
    with pytest.raises(InputError, match="moving_obstacles"):
        MPCConfig(moving_obstacles=99)
    with pytest.raises(InputError, match="needs method 'sqp'"):
        MPCConfig(moving_obstacles=1, method="sqpmethod")
    with pytest.raises(InputError, match="PredictedObstacles"):
        PredictedObstacles(np.zeros((30, 1, 2)), np.zeros((30, 2)))
    with pytest.raises(InputError, match="radii"):
        PredictedObstacles(np.zeros((30, 1, 2)), -np.ones((30, 1)))
    with pytest.raises(InputError, match="PredictedObstacles"):
        PredictedObstacles(np.full((30, 1, 2), np.nan), np.ones((30, 1)))
    field, state, goal = open_field(), np.zeros(3), np.array([1.0, 0.0, 0.0])
    three = PredictedObstacles(np.zeros((30, 3, 2)), np.ones((30, 3)))
    with pytest.raises(InputError, match="at most MPCConfig.moving_obstacles = 2"):
        mpc.solve(field, state, np.zeros(2), goal, obstacles=three)
    with pytest.raises(InputError, match="over N = 30"):
        mpc.solve(field, state, np.zeros(2), goal, obstacles=PredictedObstacles(np.zeros((5, 1, 2)), np.ones((5, 1))))
    with pytest.raises(InputError, match="expected PredictedObstacles"):
        mpc.solve(field, state, np.zeros(2), goal, obstacles=np.zeros((30, 1, 2)))
