"""SQP MPC: dynamics, bounds and clearance hold on solutions; warm start beats cold; bad input is rejected."""

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.global_path import local_reference, plan_global_path
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, WarmStart
from mnemo_mpc.planning.nlp import SPLINE_PAD
from mnemo_mpc.planning.robot import RobotModel

SHAPE = (80, 80)
ROBOT = RobotModel()


@pytest.fixture(scope="module")
def mpc():
    return SQPMPC(ROBOT, MPCConfig(fallback=None), SHAPE)


@pytest.fixture(scope="module")
def baseline():
    """CasADi's sqpmethod on the multiple-shooting NLP, interpreted, piqp: the configuration before our SQP."""
    return SQPMPC(ROBOT, MPCConfig(method="sqpmethod", compile=False, fallback=None), SHAPE)


def wall_field(origin=(-2.0, -2.0, 0.0)):
    data = np.zeros(SHAPE, np.int8)
    data[30:50, 50:54] = 100  # a wall segment across the straight line to the goal
    data[0, :] = data[-1, :] = data[:, 0] = data[:, -1] = 100
    return DistanceField(OccupancyGrid(data, 0.05, origin))


def check_solution(res, state, velocity, dt=0.1):
    assert res.success, res.status
    assert np.all(np.isfinite(res.states)) and np.all(np.isfinite(res.controls))
    np.testing.assert_allclose(res.states[0], state, atol=1e-9)
    assert res.max_dynamics_violation <= 1e-6
    np.testing.assert_allclose(ROBOT.rollout(state, res.controls, dt), res.states, atol=1e-5)
    lo, hi = ROBOT.control_lower - 1e-7, ROBOT.control_upper + 1e-7
    assert np.all(res.controls >= lo) and np.all(res.controls <= hi)
    du = np.diff(np.vstack([velocity, res.controls]), axis=0)
    assert np.all(np.abs(du) <= ROBOT.accel_limits * dt + 1e-6)
    assert res.min_clearance >= ROBOT.clearance - 1e-3
    assert res.feasible


@pytest.mark.parametrize("method", ["sqp", "sqpmethod"])
def test_solution_respects_dynamics_bounds_and_clearance(method, mpc, baseline):
    solver = mpc if method == "sqp" else baseline
    field = wall_field()
    state, velocity = np.array([-1.0, 0.05, 0.0]), np.array([0.3, 0.0])
    res = solver.solve(field, state, velocity, np.array([1.2, 0.0, 0.0]))
    check_solution(res, state, velocity)
    assert res.start == "cold" and res.iterations <= solver.config.max_iter
    # the robot actually makes progress towards the goal
    assert np.hypot(*(res.states[-1, :2] - [1.2, 0.0])) < np.hypot(*(state[:2] - [1.2, 0.0]))


def test_both_methods_find_the_same_optimum(mpc, baseline):
    field = wall_field()
    state, velocity = np.array([-1.0, 0.05, 0.0]), np.array([0.3, 0.0])
    a = mpc.solve(field, state, velocity, np.array([1.2, 0.0, 0.0]))
    b = baseline.solve(field, state, velocity, np.array([1.2, 0.0, 0.0]))
    assert a.success and b.success
    assert abs(a.cost - b.cost) <= 1e-4 * abs(b.cost)
    np.testing.assert_allclose(a.controls, b.controls, atol=2e-3)


@pytest.mark.parametrize("form", ["condensed", "multiple_shooting"])
def test_nlp_clearance_is_the_spline_of_the_field(form):
    """The clearance rows of g are the bicubic spline of the ESDF at the knots (map enters as a parameter)."""
    import casadi as ca

    from mnemo_mpc.planning import nlp as nlp_forms

    n = 12
    build = getattr(nlp_forms, form)
    problem = build(n, 0.1, SHAPE, MPCConfig().weights)
    field = wall_field(origin=(3.0, -1.0, 0.3))
    rng = np.random.default_rng(0)
    state = np.array([4.5, 0.5, 1.0])
    controls = np.column_stack([rng.uniform(0.0, 0.5, n), rng.uniform(-1.5, 1.5, n)])
    states = ROBOT.rollout(state, controls, 0.1)
    head = problem.layout.head(state, np.zeros(2), np.zeros(3), 0.0, np.zeros((n, 2)), field.grid.origin, 0.05)
    p = np.concatenate([head, field.spline_coefficients(SPLINE_PAD).ravel()])
    z = controls.ravel() if form == "condensed" else np.concatenate([states.ravel(), controls.ravel()])
    g = ca.Function("g", [problem.nlp["x"], problem.nlp["p"]], [problem.nlp["g"]])
    clr = np.asarray(g(z, p)).ravel()[-n:]
    np.testing.assert_allclose(clr, field.spline_distance(states[1:, :2]), atol=1e-9)


def test_receding_horizon_collision_free_on_generated_worlds(mpc):
    from mnemo_mpc.sim.worlds import WorldConfig, generate_world

    cfg = mpc.config
    for seed, kind in [(1, "corridor"), (2, "doors"), (3, "clutter"), (4, "rooms")]:
        world = generate_world(seed, WorldConfig(), kind=kind)
        path = plan_global_path(world.grid, world.start[:2], world.goal[:2], ROBOT)
        state, velocity, prev, progress = world.start.copy(), np.zeros(2), None, 0
        for _ in range(8):
            field = DistanceField(world.grid.window(state[:2], SHAPE))
            ref = local_reference(path, state, cfg.N, cfg.dt, 0.4, world.goal[2], progress)
            progress = ref.progress
            res = mpc.solve(field, state, velocity, ref.goal, ref.points, warm_start=prev and prev.shifted())
            if not res.success:
                res = mpc.solve(field, state, velocity, ref.goal, ref.points, max_iter=50)
            check_solution(res, state, velocity)
            # independent of the window: the plan is clear on the full map too
            full = DistanceField(world.grid)
            assert full.min_clearance(ROBOT.densify(res.states, res.controls, cfg.dt, 10)) >= ROBOT.clearance - 1e-3
            prev, velocity = res, res.controls[0].copy()
            state = ROBOT.step(state, velocity, cfg.dt)


def test_warm_start_uses_fewer_iterations_than_cold(mpc):
    field = wall_field()
    goal = np.array([1.2, 0.0, 0.0])
    state, velocity = np.array([-1.0, 0.05, 0.0]), np.zeros(2)
    res = mpc.solve(field, state, velocity, goal)
    cold_its, warm_its = [], []
    for _ in range(5):
        velocity = res.controls[0].copy()
        state = ROBOT.step(state, velocity, mpc.config.dt)
        warm = mpc.solve(field, state, velocity, goal, warm_start=res.shifted())
        cold = mpc.solve(field, state, velocity, goal)
        assert warm.start == "warm" and cold.start == "cold"
        check_solution(warm, state, velocity)
        cold_its.append(cold.iterations)
        warm_its.append(warm.iterations)
        res = warm
    assert np.mean(warm_its) < np.mean(cold_its)
    assert max(warm_its) <= 3


def test_failed_solve_reports_failure_without_nan(mpc):
    field = wall_field()
    state, velocity = np.array([-1.0, 0.0, math.pi / 2]), np.array([0.5, 1.0])
    res = mpc.solve(field, state, velocity, np.array([1.2, 0.0, 0.0]), max_iter=1)
    assert not res.success and res.status
    assert np.all(np.isfinite(res.states)) and np.all(np.isfinite(res.controls))
    assert math.isfinite(res.max_dynamics_violation) and math.isfinite(res.min_clearance)


def test_a_warm_start_whose_qp_is_infeasible_restarts_cold(mpc):
    """A start driven into the wall at full speed linearises to a QP with no feasible step; the solve goes on from the
    cold start (hold the pose) with the iterations left, where it would otherwise fail on every step it is given
    (Jackal mapless dense-1013 stood 8 s with its learned start's QP infeasible)."""
    field, goal = wall_field(), np.array([1.2, 0.0, 0.0])
    state, n = np.array([0.0, 0.0, 0.0]), mpc.config.N
    controls = np.tile([ROBOT.v_max, 0.0], (n, 1))
    into_wall = WarmStart(ROBOT.rollout(state, controls, mpc.config.dt), controls)
    res = mpc.solve(field, state, np.zeros(2), goal, warm_start=into_wall)
    assert res.solver_stats["restarted_cold_after"] == "qp_infeasible" and res.start == "warm"
    check_solution(res, state, np.zeros(2))
    assert res.iterations >= 2  # the warm start's failed QP is counted
    assert "restarted_cold_after" not in mpc.solve(field, state, np.zeros(2), goal).solver_stats
    # max_iter=1 leaves nothing to restart with: the failure is reported
    assert mpc.solve(field, state, np.zeros(2), goal, warm_start=into_wall, max_iter=1).status == "qp_infeasible"


def test_fallback_ipopt_rescues_a_capped_sqp():
    mpc = SQPMPC(ROBOT, MPCConfig(max_iter=1, fallback="ipopt"), SHAPE)
    state = np.array([-1.0, 0.0, 0.0])
    res = mpc.solve(wall_field(), state, np.zeros(2), np.array([1.2, 0.1, 0.0]))
    assert res.used_fallback and res.success
    check_solution(res, state, np.zeros(2))


@pytest.mark.parametrize("method", ["sqp", "sqpmethod"])
def test_shifted_warm_start_layout(method, mpc, baseline):
    solver = mpc if method == "sqp" else baseline
    field = wall_field()
    res = solver.solve(field, np.array([-1.0, 0.0, 0.0]), np.zeros(2), np.array([1.2, 0.0, 0.0]))
    ws = res.shifted()
    n = solver.config.N
    assert ws.states.shape == (n + 1, 3) and ws.controls.shape == (n, 2)
    np.testing.assert_allclose(ws.states[:-1], res.states[1:])
    np.testing.assert_allclose(ws.controls[:-1], res.controls[1:])
    np.testing.assert_allclose(ws.states[-1], ROBOT.step(res.states[-1], res.controls[-1], solver.config.dt))
    assert (ws.lam_g.size, ws.lam_x.size) == solver.duals_size
    # the shifted start is accepted as it is, multipliers included
    again = solver.solve(field, ws.states[0], res.controls[0], np.array([1.2, 0.0, 0.0]), warm_start=ws)
    assert again.success


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"state": [np.nan, 0.0, 0.0]}, InputError, "state"),
        ({"state": [0.0, np.inf, 0.0]}, InputError, "state"),
        ({"goal": [1.0, np.nan, 0.0]}, InputError, "goal"),
        ({"goal": [np.inf, 0.0, 0.0]}, InputError, "goal"),
        ({"velocity": [np.nan, 0.0]}, InputError, "velocity"),
        ({"state": [0.0, 0.0]}, InputError, "state"),
        ({"state": [0.55, 0.0, 0.0]}, InfeasibleProblemError, "collision"),
        ({"goal": [0.55, 0.0, 0.0]}, InfeasibleProblemError, "occupied"),
        ({"goal": [-1.5, -1.5, 0.0]}, InfeasibleProblemError, "unknown"),
        ({"reference": np.zeros((5, 2))}, InputError, "reference"),
        ({"warm_start": WarmStart(np.zeros((3, 3)), np.zeros((2, 2)))}, InputError, "warm_start"),
        ({"warm_start": WarmStart(np.zeros((31, 3)), np.full((30, 2), np.nan))}, InputError, "NaN"),
        (
            {"warm_start": WarmStart(np.zeros((31, 3)), np.zeros((30, 2)), np.zeros(5), np.zeros(60))},
            InputError,
            "lam_g",
        ),
        ({"warm_start": WarmStart(np.zeros((31, 3)), np.zeros((30, 2)), np.zeros(90))}, InputError, "both"),
        ({"max_iter": 0}, InputError, "max_iter"),
        ({"max_iter": -1}, InputError, "max_iter"),
    ],
)
def test_bad_input_raises(mpc, kwargs, error, match):
    field = wall_field()
    data = field.grid.data.copy()
    data[8:12, 8:12] = -1  # unknown patch around (-1.5, -1.5)
    field = DistanceField(OccupancyGrid(data, 0.05, field.grid.origin))
    args = {"state": [-1.0, 0.0, 0.0], "velocity": [0.0, 0.0], "goal": [1.2, 0.0, 0.0]}
    args.update(kwargs)
    with pytest.raises(error, match=match):
        mpc.solve(field, **args)


def test_wrong_field_shape_is_rejected(mpc):
    small = DistanceField(OccupancyGrid(np.zeros((40, 40), np.int8), 0.05))
    with pytest.raises(InputError, match="shape"):
        mpc.solve(small, np.array([1.0, 1.0, 0.0]), np.zeros(2), np.array([1.5, 1.0, 0.0]))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"qpsol": "nope"}, "qpsol"),
        ({"fallback": "snopt"}, "fallback"),
        ({"dt": 0.0}, "dt"),
        ({"method": "newton"}, "method"),
        ({"hessian": "bfgs"}, "hessian"),
        ({"convexify": "none"}, "convexify"),
        ({"max_iter": 0}, "max_iter"),
        ({"max_iter": 2.5}, "max_iter"),
        ({"tol_du": 0.0}, "tol_du"),
        ({"w_v": 0.0}, "w_v"),
        ({"N": 0}, "N"),
    ],
)
def test_config_validation(kwargs, match):
    with pytest.raises(InputError, match=match):
        MPCConfig(**kwargs)


def test_rotated_window_and_hold_cold_start(mpc):
    """The window's origin and rotation enter as parameters: a rotated grid needs no rebuild."""
    yaw = 0.7
    field = wall_field(origin=(0.5, -3.0, yaw))
    c, s = math.cos(yaw), math.sin(yaw)
    to_map = lambda u, v: np.array([0.5 + c * u - s * v, -3.0 + s * u + c * v])  # noqa: E731
    start_xy, goal_xy = to_map(1.0, 2.0), to_map(3.2, 2.0)
    state = np.array([*start_xy, yaw])
    guess = mpc.cold_start(state)
    assert np.all(guess.states == state) and np.all(guess.controls == 0.0)
    res = mpc.solve(field, state, np.zeros(2), np.array([*goal_xy, yaw]))
    check_solution(res, state, np.zeros(2))
    assert np.hypot(*(res.states[-1, :2] - goal_xy)) < np.hypot(*(start_xy - goal_xy))
