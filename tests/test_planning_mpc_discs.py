"""The MPC with a footprint covered by several discs (issue 10): exact derivatives, both NLP forms agree, every disc
keeps its clearance, and a rectangle passes a gap its circumscribed circle cannot."""

import math

import casadi as ca
import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError
from mnemo_mpc.planning import nlp as nlp_forms
from mnemo_mpc.planning.collision import robot_discs
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig
from mnemo_mpc.planning.robot import RobotModel

SHAPE = (60, 60)
LENGTH, WIDTH = 0.508, 0.430  # a Jackal-class base


def rectangle_discs(length: float, width: float, k: int) -> np.ndarray:
    """K equal discs on the long axis covering a length x width rectangle: each covers a (length/K) x width slab."""
    half = length / (2 * k)
    centres = -length / 2 + half * (2 * np.arange(k) + 1)
    return np.column_stack([centres, np.zeros(k), np.full(k, math.hypot(half, width / 2))])


# The Jackal profile's footprint with the profiles' default cover (12 discs within 0.02 m of the box).
RECT = RobotModel.from_footprint(Footprint.rectangle(LENGTH, WIDTH))


def corridor_field(gap: float) -> DistanceField:
    """A 3 m x 3 m window, walls along x leaving a straight corridor around y = 0: the cells whose centre is within
    gap / 2 of y = 0 are free (cell centres at y = 0, +-0.05, ...; 0.64 gives a free width of 0.65 m)."""
    data = np.zeros(SHAPE, np.int8)
    res, origin = 0.05, (-1.5, -1.525, 0.0)
    ys = origin[1] + (np.arange(SHAPE[0]) + 0.5) * res
    data[np.abs(ys) > gap / 2, 20:40] = 100  # the corridor spans x in [-0.5, 0.5]
    data[0, :] = data[-1, :] = data[:, 0] = data[:, -1] = 100
    return DistanceField(OccupancyGrid(data, res, origin))


def test_robot_discs_default_is_one_centred_disc():
    np.testing.assert_array_equal(robot_discs(RobotModel()), [[0.0, 0.0, RobotModel().radius]])
    np.testing.assert_allclose(robot_discs(RECT), RECT.discs)
    assert robot_discs(RECT).shape[0] > 1 and RECT.radius == pytest.approx(math.hypot(LENGTH, WIDTH) / 2)


def test_condensed_derivatives_with_three_discs_match_finite_differences():
    n = 6
    nlp = nlp_forms.condensed(n, 0.1, (20, 20), MPCConfig().weights, rectangle_discs(LENGTH, WIDTH, 3)[:, :2])
    assert nlp.ng == 5 * n
    rng = np.random.default_rng(0)
    layout = nlp.layout
    head = layout.head(
        np.array([0.1, -0.05, 0.3]),
        np.zeros(2),
        np.array([0.6, 0.2, 0.0]),
        1.0,
        np.zeros((n, 2)),
        (-0.5, -0.5, 0.1),
        0.05,
    )
    coeffs = rng.uniform(0.2, 0.6, size=layout.size - layout.head_size)
    p = np.concatenate([head, coeffs])
    x = rng.uniform(-0.4, 0.4, size=2 * n)
    lam = rng.uniform(0.0, 1.0, size=nlp.ng)
    ev = {k: f for k, f in nlp.functions.items()}
    jac_t = np.array(ev["eval"](x, p)[1])  # jac_g^T (nx, ng)
    g0 = np.array(ev["fg"](x, p)[1]).ravel()
    eps = 1e-6
    fd = np.column_stack([(np.array(ev["fg"](x + eps * e, p)[1]).ravel() - g0) / eps for e in np.eye(2 * n)])
    np.testing.assert_allclose(jac_t.T, fd, atol=1e-4)
    # grad of the Lagrangian f + lam^T g against the symbolic one of the NLP graph
    f, g = nlp.nlp["f"], nlp.nlp["g"]
    lag = ca.Function("lag", [nlp.nlp["x"], nlp.nlp["p"]], [ca.gradient(f + ca.dot(ca.DM(lam), g), nlp.nlp["x"])])
    np.testing.assert_allclose(np.array(ev["check"](x, p, lam)[2]).ravel(), np.array(lag(x, p)).ravel(), atol=1e-8)


@pytest.fixture(scope="module")
def rect_mpc():
    return SQPMPC(RECT, MPCConfig(fallback=None), SHAPE)


def test_every_disc_keeps_its_clearance_and_both_forms_agree(rect_mpc):
    field = corridor_field(0.64)
    state, velocity, goal = np.array([-1.0, 0.0, 0.0]), np.zeros(2), np.array([1.0, 0.0, 0.0])
    res = rect_mpc.solve(field, state, velocity, goal)
    assert res.success and res.feasible, res.status
    assert res.footprint_clearance >= RECT.safety_margin - 1e-3
    assert res.states[-1, 0] > -0.2  # it drives into the corridor
    # each disc of each knot, checked on the ESDF directly
    centres = rect_mpc.collision.disc_centres(res.states[1:])
    assert np.all(field.distance(centres) - RECT.discs[:, 2] >= RECT.safety_margin - 1e-3)
    baseline = SQPMPC(RECT, MPCConfig(method="sqpmethod", compile=False, fallback=None, max_iter=50), SHAPE)
    ref = baseline.solve(field, state, velocity, goal, max_iter=50)
    tight = rect_mpc.solve(field, state, velocity, goal, max_iter=50)
    assert ref.success and tight.success
    np.testing.assert_allclose(tight.controls, ref.controls, atol=2e-3)


def test_rectangle_passes_a_gap_its_circumscribed_circle_cannot(rect_mpc):
    """0.65 m between the walls: the disc cover (0.470 m wide, + 0.05 margin each side) fits; the circumscribed
    circle (0.666 m) does not even fit at the corridor's centre."""
    field = corridor_field(0.64)
    state, goal = np.array([-0.9, 0.0, 0.0]), np.array([1.0, 0.0, 0.0])
    pose, velocity, warm = state, np.zeros(2), None
    for _ in range(50):  # closed loop through the corridor, warm-started by the shifted solution
        res = rect_mpc.solve(field, pose, velocity, goal, warm_start=warm)
        assert res.feasible, res.status
        pose, velocity, warm = res.states[1], res.controls[0], res.shifted()
    assert pose[0] > 0.5  # out the far end
    circle = SQPMPC(RobotModel(radius=RECT.radius), MPCConfig(fallback=None), SHAPE)
    with pytest.raises(InfeasibleProblemError):
        circle.solve(field, np.array([0.0, 0.0, 0.0]), np.zeros(2), goal)
