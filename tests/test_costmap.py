"""Nav2 costmap semantics (issue 29): what each value means, Nav2's inflation, the MPC's soft cost and its errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.clearing import clear_robot_cells
from mnemo_mpc.planning import costmap
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import NavParams

ROBOT = RobotModel()
SHAPE = (80, 80)
RES = 0.05
NAV2 = costmap.NAV2


# --- values ---------------------------------------------------------------------------------------------------------
def test_translation_matches_nav2_publisher_table():
    """Costmap2DPublisher: 0 -> 0, 1..252 -> 1 + 97 (i - 1) / 251, 253 -> 99, 254 -> 100, 255 -> -1."""
    cost = np.arange(256)
    out = costmap.translate(cost)
    assert out[0] == 0 and out[1] == 1 and out[252] == 98
    assert out[253] == 99 and out[254] == 100 and out[255] == -1
    assert all(out[i] == 1 + (97 * (i - 1)) // 251 for i in range(1, 253))
    with pytest.raises(InputError, match="0..255"):
        costmap.translate(np.array([256]))


@pytest.mark.parametrize(
    ("semantics", "value", "klass"),
    [
        # map_server occupancy (today's): 65 / 25 thresholds, an inflation value in between reads as unknown
        (costmap.OCCUPANCY, 100, "occupied"),
        (costmap.OCCUPANCY, 99, "occupied"),
        (costmap.OCCUPANCY, 50, "unknown"),
        (costmap.OCCUPANCY, 10, "free"),
        (costmap.OCCUPANCY, 0, "free"),
        (costmap.OCCUPANCY, -1, "unknown"),
        # a Nav2 costmap: lethal the obstacle, inscribed and inflation free (soft cost), unknown per policy
        (NAV2, 100, "occupied"),
        (NAV2, 99, "free"),
        (NAV2, 98, "free"),
        (NAV2, 50, "free"),
        (NAV2, 1, "free"),
        (NAV2, 0, "free"),
        (NAV2, -1, "unknown"),
        # ... with inscribed an obstacle too
        (costmap.NAV2_INSCRIBED_AS_OBSTACLE, 100, "occupied"),
        (costmap.NAV2_INSCRIBED_AS_OBSTACLE, 99, "occupied"),
        (costmap.NAV2_INSCRIBED_AS_OBSTACLE, 98, "free"),
        (costmap.NAV2_INSCRIBED_AS_OBSTACLE, -1, "unknown"),
    ],
)
def test_each_value_class(semantics, value, klass):
    grid = OccupancyGrid(np.full((4, 4), value, np.int8), RES, semantics=semantics)
    got = {"occupied": grid.occupied_mask(), "free": grid.free_mask(), "unknown": grid.unknown_mask()}
    assert got[klass].all()
    assert not any(mask.any() for name, mask in got.items() if name != klass)


def test_cost_field_per_class_and_unknown_policy():
    data = np.array([[100, 99, 98, 49, 1, 0, -1]], np.int8)
    nav2 = OccupancyGrid(data, RES, semantics=NAV2)
    np.testing.assert_allclose(nav2.cost_field("occupied"), [[1, 1, 1, 49 / 98, 1 / 98, 0, 1]])
    np.testing.assert_allclose(nav2.cost_field("free"), [[1, 1, 1, 49 / 98, 1 / 98, 0, 0]])
    # an occupancy grid has no soft cost
    assert not OccupancyGrid(data, RES).cost_field().any()


def test_inflation_layer_as_nav2_computes_it():
    """InflationLayer::computeCost: 254 on the obstacle, 253 within the inscribed radius, then
    uint8(252 exp(-k (d - r_inscribed))) up to the inflation radius, 0 beyond; translated for the OccupancyGrid."""
    obs = np.zeros((1, 30), bool)
    obs[0, 0] = True
    out = costmap.inflate(obs, RES, inscribed_radius_m=0.2, inflation_radius_m=0.55, cost_scaling_factor=10.0)
    d = np.arange(30) * RES
    want = np.floor(252 * np.exp(-10.0 * (d - 0.2))).astype(int)
    want = np.where(d <= 0.55 + 1e-9, want, 0)
    want[d <= 0.2 + 1e-9] = 253
    want[0] = 254
    np.testing.assert_array_equal(out[0], costmap.translate(want))
    assert out[0, 0] == 100 and out[0, 4] == 99 and 1 <= out[0, 5] <= 98 and out[0, 12] == 0
    assert np.all(np.diff(out[0, 4:12].astype(int)) <= 0)  # decays with distance


def test_inflation_keeps_unknown_except_where_inscribed():
    obs = np.zeros((1, 20), bool)
    obs[0, 0] = True
    unknown = np.ones((1, 20), bool)
    out = costmap.inflate(obs, RES, 0.2, unknown=unknown)
    assert out[0, 0] == 100 and np.all(out[0, 1:5] == 99) and np.all(out[0, 5:] == -1)


# --- the grid keeps its semantics through the planner's copies --------------------------------------------------------
def nav2_wall_grid(origin=(0.0, 0.0, 0.0), semantics=NAV2):
    obs = np.zeros(SHAPE, bool)
    obs[30, :] = True  # a wall along x at y = 1.5 .. 1.55
    return OccupancyGrid(costmap.inflate(obs, RES, ROBOT.radius), RES, origin, semantics=semantics)


def test_copies_keep_semantics():
    grid = nav2_wall_grid()
    copies = {
        "window": grid.window(np.array([2.0, 2.0]), (40, 40)),
        "fit_window": grid.fit_window(np.array([2.0, 2.0]), (20, 20), 0.1),
        "coarsened": grid.coarsened(2),
        "with_data": grid.with_data(grid.data.copy()),
        # the body stands on inflation cells (0 < value < 99): they are cleared, the grid copied
        "clear_robot_cells": clear_robot_cells(grid, ROBOT, np.array([2.0, 1.9, 0.0]), 0.3),
    }
    assert copies["clear_robot_cells"] is not grid
    for name, copy in copies.items():
        assert copy.semantics == NAV2, name
        assert (copy.occupied_thresh, copy.free_thresh) == (100, 99), name
    # pooling keeps the highest soft cost of a free block and the obstacle of a block with one
    coarse = copies["coarsened"]
    assert coarse.data[15, 0] == 100 and coarse.data[17, 0] == max(grid.data[34, 0], grid.data[35, 0])


def test_inflation_is_not_an_obstacle_for_the_distance_field():
    """The wall's clearance on the costmap is the clearance on the bare wall: the MPC checks its own footprint."""
    grid = nav2_wall_grid()
    bare = OccupancyGrid(np.where(grid.data == 100, 100, 0).astype(np.int8), RES)
    np.testing.assert_array_equal(DistanceField(grid).values, DistanceField(bare).values)
    # today's occupancy reading of the same values: the inflation is unknown, hence an obstacle, and the passage shrinks
    as_occupancy = OccupancyGrid(grid.data, RES)
    assert DistanceField(as_occupancy).distance(np.array([2.0, 2.0])) < DistanceField(grid).distance(
        np.array([2.0, 2.0])
    )


def test_moving_obstacle_history_takes_only_a_costmaps_far_free_cells_as_free():
    """The detector's free runs (`nav.moving_obstacles.FreeRuns`): on a costmap, a cell counts as free beyond doubt
    only far from obstacles (value <= free_value), not an inflation cell beside a wall that lidar noise flips to lethal
    (comment there: counting those made false moving obstacles in dense worlds)."""
    from mnemo_mpc.nav.moving_obstacles import FreeRuns

    for before, was_free in ((50, False), (3, True), (0, True)):  # inflation beside a wall; far from any; none
        runs = FreeRuns(5)
        data = np.zeros((8, 8), np.int8)
        data[4, 4] = before
        runs.update(OccupancyGrid(data, RES, semantics=NAV2), 0.0)
        data[4, 4] = 100
        _, ended, _ = runs.update(OccupancyGrid(data, RES, semantics=NAV2), 0.1)
        assert (ended[4, 4] == 0.0) == was_free, before


# --- the MPC's soft cost ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def plain():
    return SQPMPC(ROBOT, MPCConfig(fallback=None), SHAPE)


@pytest.fixture(scope="module")
def costed():
    return SQPMPC(ROBOT, MPCConfig(fallback=None, costmap_cost_weight=0.5), SHAPE)


START, GOAL = np.array([0.5, 1.9, 0.0]), np.array([3.5, 1.9, 0.0])  # along the wall, 0.35 m from its face


def test_soft_cost_pushes_the_plan_away_from_the_inflation(plain, costed):
    field = DistanceField(nav2_wall_grid())
    base = plain.solve(field, START, np.zeros(2), GOAL)
    soft = costed.solve(field, START, np.zeros(2), GOAL)
    for res in (base, soft):
        assert res.success and res.feasible, res.status  # the hard constraints hold either way
        assert res.footprint_clearance is None or res.footprint_clearance >= res.required_margin - 1e-3
    clearance_base = field.distance(base.states[1:, :2])
    clearance_soft = field.distance(soft.states[1:, :2])
    assert float(np.mean(clearance_soft)) > float(np.mean(clearance_base)) + 0.02
    cost_base, cost_soft = (float(np.mean(field.spline_cost(r.states[1:, :2]))) for r in (base, soft))
    assert cost_soft < cost_base


def test_soft_cost_derivatives_match_finite_differences(costed):
    """The condensed NLP's gradient with the costmap term (`eval`) against central differences of its cost (`fg`)."""
    field = DistanceField(nav2_wall_grid())
    p = costed.parameters(field, START, np.zeros(2), GOAL)
    fns = costed._functions
    rng = np.random.default_rng(3)
    u = np.column_stack([rng.uniform(0.1, 0.4, 30), rng.uniform(-0.3, 0.3, 30)]).reshape(-1)
    grad = np.asarray(fns["eval"](u, p)[0]).reshape(-1)
    h = 1e-6
    fd = np.array(
        [(float(fns["fg"](u + h * e, p)[0]) - float(fns["fg"](u - h * e, p)[0])) / (2 * h) for e in np.eye(u.size)[:12]]
    )
    np.testing.assert_allclose(grad[:12], fd, rtol=1e-4, atol=1e-6)
    # the cost term is in the objective: the same controls cost more on the costmap than with weight 0
    assert float(fns["fg"](u, p)[0]) > 0


def test_gauss_newton_rows_of_the_soft_cost(plain, costed):
    """Far from a solution the SQP uses Gauss-Newton: the costmap residuals r_k = sqrt(w) c(p_k) add 2 J^T J, J their
    Jacobian in the controls (here by central differences of the numpy spline on the rollout)."""
    from mnemo_mpc.planning.nlp import CondensedEvaluator

    field = DistanceField(nav2_wall_grid())
    u = np.tile([0.3, 0.2], 30)
    hessians = []
    for mpc in (plain, costed):
        ev = CondensedEvaluator(mpc._nlp, mpc._functions)
        ev.set_parameters(mpc.parameters(field, START, np.zeros(2), GOAL))
        ev.derivatives(u)
        hessians.append(ev.hessian(np.zeros(ev.ng), exact=False))

    def residuals(x):
        states = ROBOT.rollout(START, x.reshape(-1, 2), 0.1)[1:, :2]
        return math.sqrt(costed.config.costmap_cost_weight) * field.spline_cost(states)

    h = 1e-6
    jac = np.column_stack([(residuals(u + h * e) - residuals(u - h * e)) / (2 * h) for e in np.eye(u.size)])
    assert np.abs(jac).max() > 0.01  # the plan runs through the inflation's gradient
    np.testing.assert_allclose(hessians[1] - hessians[0], 2 * jac.T @ jac, atol=1e-5)


def test_weight_zero_is_todays_mpc(plain):
    """With weight 0 the NLP has no costmap parameters and a Nav2 costmap plans bit-identically to the same obstacles
    given as an occupancy grid (the inflation is free and costs nothing)."""
    zero = SQPMPC(ROBOT, MPCConfig(fallback=None, costmap_cost_weight=0.0), SHAPE)
    assert not zero.layout.cost_field and zero.layout.size == plain.layout.size
    assert "_costmap" not in str(zero.build_info.path)
    grid = nav2_wall_grid()
    bare = OccupancyGrid(np.where(grid.data == 100, 100, 0).astype(np.int8), RES)
    a = zero.solve(DistanceField(grid), START, np.zeros(2), GOAL)
    b = plain.solve(DistanceField(bare), START, np.zeros(2), GOAL)
    assert np.array_equal(a.states, b.states) and np.array_equal(a.controls, b.controls)


# --- errors -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("weight", [math.nan, -0.1, math.inf, 1e6, "0.1", True])
def test_bad_weight_is_refused(weight):
    with pytest.raises(InputError, match="MPCConfig.costmap_cost_weight"):
        MPCConfig(costmap_cost_weight=weight)


def test_weight_needs_the_sqp_method():
    with pytest.raises(InputError, match="costmap_cost_weight: > 0 needs method 'sqp'"):
        MPCConfig(method="sqpmethod", costmap_cost_weight=0.1)


@pytest.mark.parametrize("weight", [-1.0, 101.0])
def test_bad_weight_parameter_is_refused(weight):
    with pytest.raises(InputError, match="parameter costmap_cost_weight"):
        NavParams(costmap_cost_weight=weight)


def test_unknown_semantics_name_is_refused():
    with pytest.raises(InputError, match="parameter costmap_semantics: expected one of .*'nav2'"):
        NavParams(costmap_semantics="nav2")
    with pytest.raises(InputError, match="OccupancyGrid.semantics"):
        OccupancyGrid(np.zeros((4, 4), np.int8), RES, semantics="costmap")


def test_profile_weight_enters_the_mpc_only_for_a_costmap():
    assert NavParams().mpc_config().costmap_cost_weight == 0.0  # occupancy: no term, no parameters
    nav2 = NavParams(costmap_semantics=NAV2, costmap_cost_weight=0.25)
    assert nav2.mpc_config().costmap_cost_weight == 0.25
    assert NavParams(costmap_semantics=NAV2, costmap_cost_weight=0.0).mpc_config().costmap_cost_weight == 0.0
