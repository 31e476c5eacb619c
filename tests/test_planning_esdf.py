"""ESDF: brute force, unknown policy, the spline the MPC sees (CasADi == scipy), grid windows."""

import casadi as ca
import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.nlp import SPLINE_PAD, cubic_bspline_basis


def brute_force(obstacles: np.ndarray, res: float) -> np.ndarray:
    """Signed distance by definition: nearest cell centre of the other class, minus half a cell."""
    h, w = obstacles.shape
    rr, cc = np.mgrid[0:h, 0:w]
    centres = np.stack([rr.ravel(), cc.ravel()], axis=1).astype(float)
    occ = centres[obstacles.ravel()]
    free = centres[~obstacles.ravel()]
    out = np.empty(h * w)
    for i, p in enumerate(centres):
        other = free if obstacles.ravel()[i] else occ
        d = np.min(np.hypot(*(other - p).T)) * res - 0.5 * res
        out[i] = -d if obstacles.ravel()[i] else d
    return out.reshape(h, w)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_esdf_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    data = np.where(rng.random((23, 31)) < 0.08, 100, 0).astype(np.int8)
    data[5:9, 10:20] = 100
    grid = OccupancyGrid(data, 0.05, (1.0, -2.0, 0.0))
    field = DistanceField(grid, unknown_policy="free")  # "free": no border wall, so brute force needs no padding
    np.testing.assert_allclose(field.values, brute_force(data >= 65, 0.05), atol=1e-12)


def test_occupied_policy_treats_unknown_and_outside_as_obstacle():
    data = np.zeros((20, 20), np.int8)
    data[10, 10] = -1
    grid = OccupancyGrid(data, 0.1)
    occ = DistanceField(grid, "occupied")
    free = DistanceField(grid, "free")
    assert occ.values[10, 10] < 0 and free.values[10, 10] > 0
    # with the outside as obstacle, the border cells are half a cell from it
    assert occ.values[0, 5] == pytest.approx(0.05)
    assert free.values[0, 5] > 1.0
    assert occ.distance(np.array([-0.5, 1.0])) < 0  # outside the grid
    with pytest.raises(InputError, match="unknown_policy"):
        DistanceField(grid, "maybe")


def test_bilinear_distance_hits_cell_centres():
    rng = np.random.default_rng(3)
    data = np.where(rng.random((15, 12)) < 0.1, 100, 0).astype(np.int8)
    grid = OccupancyGrid(data, 0.07, (0.3, 0.2, 0.4))
    field = DistanceField(grid)
    xs, ys = grid.cell_centers()
    np.testing.assert_allclose(field.distance(np.stack([xs, ys], -1)), field.values, atol=1e-9)


def test_casadi_spline_equals_scipy_spline_and_interpolates():
    """The MPC's clearance function (gathered 4x4 coefficients x cubic basis) is the scipy cubic spline."""
    rng = np.random.default_rng(4)
    data = np.where(rng.random((12, 14)) < 0.1, 100, 0).astype(np.int8)
    grid = OccupancyGrid(data, 0.05, (-0.2, 0.1, 0.0))
    field = DistanceField(grid)
    coeffs = field.spline_coefficients(SPLINE_PAD)
    rows, cols = coeffs.shape
    q = ca.SX.sym("q", 2)
    c = ca.SX.sym("c", 16)
    bx, by = cubic_bspline_basis(q[0]), cubic_bspline_basis(q[1])
    f = ca.Function("f", [q, c], [ca.mtimes([bx.T, ca.reshape(c, 4, 4), by])])
    for _ in range(20):
        xy = np.array([rng.uniform(-0.2, 0.5), rng.uniform(0.1, 0.7)])
        g = grid.world_to_grid(xy) - 0.5 + SPLINE_PAD
        i0, j0 = np.floor(g).astype(int)
        block = coeffs[j0 - 1 : j0 + 3, i0 - 1 : i0 + 3].T.reshape(-1, order="F")  # [a + 4 b] = coeffs[j0+b-1, i0+a-1]
        value = float(f(g - np.floor(g), block))
        assert value == pytest.approx(float(field.spline_distance(xy)), abs=1e-9)
    xs, ys = grid.cell_centers()
    np.testing.assert_allclose(field.spline_distance(np.stack([xs, ys], -1)), field.values, atol=1e-9)
    assert rows == 12 + 2 * SPLINE_PAD and cols == 14 + 2 * SPLINE_PAD


def test_window_crops_and_fills_unknown():
    data = np.zeros((10, 10), np.int8)
    data[2, 3] = 100
    grid = OccupancyGrid(data, 0.5, (1.0, 1.0, 0.0))
    win = grid.window(np.array([1.25, 1.25]), (4, 4))  # centred on cell (0, 0): half of it lies off the map
    assert win.shape == (4, 4) and win.resolution == 0.5
    assert (win.data[:2, :] == -1).all() and (win.data[:, :2] == -1).all()
    x, y = grid.grid_to_world(np.array([3.5, 2.5]))
    cell = win.world_to_cell(np.array([x, y]))
    if win.in_bounds(cell):
        assert win.data[cell[0], cell[1]] == 100
    with pytest.raises(InputError):
        grid.window(np.array([np.nan, 0.0]), (4, 4))


@pytest.mark.parametrize("candidates", [8, 1])
def test_exact_distance_equals_the_search_over_every_obstacle_square(monkeypatch, candidates):
    """On a cluttered grid (random blocks, thick walls) the k-d tree's nearest squares give the brute-force search's
    distance at every point, to round-off; with 1 candidate (the nearest centre, whose square is not always the
    nearest) many take the fallback."""
    import mnemo_mpc.planning.esdf as esdf

    monkeypatch.setattr(esdf, "EXACT_CANDIDATES", candidates)
    rng = np.random.default_rng(3)
    res, data = 0.05, np.zeros((60, 80), np.int8)
    for _ in range(25):
        r, c, h, w = rng.integers(0, 55), rng.integers(0, 75), rng.integers(1, 6), rng.integers(1, 6)
        data[r : r + h, c : c + w] = 100
    data[:, :2] = 100
    field = DistanceField(OccupancyGrid(data, res, (0.3, -0.2, 0.0)))
    pts = rng.uniform([0.3, -0.2], [0.3 + 80 * res, -0.2 + 60 * res], size=(3000, 2))
    got = field.exact_distance(pts)
    rows, cols = np.nonzero(field.obstacles)
    centres = field.grid.grid_to_world(np.stack([cols + 0.5, rows + 0.5], axis=-1).astype(float))
    gap = np.maximum(np.abs(pts[:, None, :] - centres[None]) - 0.5 * res, 0.0)
    truth = np.minimum(field.distance(pts), np.hypot(gap[..., 0], gap[..., 1]).min(axis=1))
    near = field.distance(pts) < 0.3
    np.testing.assert_allclose(got[near], truth[near], atol=1e-12)
    np.testing.assert_array_equal(got[~near], field.distance(pts)[~near])
    # The nearest centre's square is not always the nearest square (nor is the bilinear field below it here): cells
    # (row 5, col 8) and (row 7, col 9), and a point 0.1724 m from the first's square, 0.1674 m from the second's.
    data = np.zeros((16, 16), np.int8)
    data[5, 8] = data[7, 9] = 100
    two = DistanceField(OccupancyGrid(data, res))
    point = np.array([[0.6217157045548705, 0.2350124725127891]])
    assert two.exact_distance(point)[0] == pytest.approx(0.16744206225710012, abs=1e-12)


def test_exact_distance_is_the_distance_to_the_obstacle_squares():
    """Beside a wall the bilinear field is exact; towards a box corner it overestimates (by up to ~0.2 resolution),
    and `exact_distance` does not: it is the distance to the nearest occupied square, checked by brute force."""
    res = 0.05
    data = np.zeros((40, 40), np.int8)
    data[20:24, 20:24] = 100  # a 0.2 m box: x, y in [1.0, 1.2]
    field = DistanceField(OccupancyGrid(data, res))
    rng = np.random.default_rng(0)
    pts = rng.uniform(0.75, 1.45, size=(400, 2))
    exact = field.exact_distance(pts)
    gap = np.maximum(np.maximum(1.0 - pts, pts - 1.2), 0.0)
    truth = np.hypot(gap[:, 0], gap[:, 1])
    outside = truth > 1e-9
    near = outside & (truth < 0.25)  # within `reach` (0.3 m by default); beyond it the field's value stands
    np.testing.assert_allclose(exact[near], truth[near], atol=1e-9)
    assert np.all(exact[~outside] <= 0.0)
    corner = np.array([[1.2 + 0.03, 1.2 + 0.03]])  # diagonal from the box's corner
    assert field.distance(corner)[0] > field.exact_distance(corner)[0] + 0.005
    assert field.exact_distance(corner)[0] == pytest.approx(0.03 * np.sqrt(2))
    side = np.array([[1.2 + 0.05, 1.1]])  # beside a face: the two agree
    assert field.exact_distance(side)[0] == pytest.approx(field.distance(side)[0], abs=1e-9)
    far = np.array([[0.1, 0.1]])  # beyond `reach`: the field's value
    assert field.exact_distance(far, reach=0.3)[0] == field.distance(far)[0]
