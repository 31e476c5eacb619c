"""Wall positions finer than a cell (`planning.surfaces`): the returns' running mean per cell and the distance field
that takes a refined cell as its point."""

import dataclasses
import warnings

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.surfaces import ReturnMeans, SurfaceConfig

RES = 0.05


def wall_grid(n: int = 60, first_col: int = 20) -> OccupancyGrid:
    """Free, with every cell from column `first_col` on occupied (x >= first_col * RES): a wall face on a cell
    boundary of the grid."""
    data = np.zeros((n, n), np.int8)
    data[:, first_col:] = 100
    return OccupancyGrid(data, RES, (0.0, 0.0, 0.0))


def wall_returns(x: float, noise: float, scans: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Scans of a wall at x = `x` along y in (0, 3): 60 returns each, range noise along x."""
    ys = np.linspace(0.01, 2.99, 60)
    return [np.stack([x + noise * rng.standard_normal(len(ys)), ys], axis=-1) for _ in range(scans)]


def test_a_wall_inside_a_cell_reads_where_its_returns_are_not_at_the_cells_face():
    """A wall at x = 1.02 marks the cells from x = 1.00 on: the whole-cell field puts its face 2 cm too near; with the
    returns (noise-free here, so no uncertainty) the field is the distance to x = 1.02, the exact distance too."""
    rng = np.random.default_rng(0)
    means = ReturnMeans(RES, SurfaceConfig(noise_m=0.0))
    for scan in wall_returns(1.02, 0.0, 3, rng):
        means.integrate(scan, np.array([1.5, 1.5]))
    grid = wall_grid()
    cells, refined = DistanceField(grid, "free"), DistanceField(grid, "free", means.surfaces(grid))
    q = np.array([[0.6, 1.5], [0.875, 1.525], [0.975, 1.475]])
    np.testing.assert_allclose(cells.distance(q), 1.0 - q[:, 0], atol=1e-9)
    np.testing.assert_allclose(refined.distance(q), 1.02 - q[:, 0], atol=1e-6)
    np.testing.assert_allclose(refined.exact_distance(q), 1.02 - q[:, 0], atol=1e-6)
    assert refined.cells_only.distance(q) == pytest.approx(cells.distance(q))


def test_the_uncertainty_is_taken_off_and_a_cell_is_never_nearer_than_its_square():
    """With range noise sigma the point counts `sigmas` standard errors nearer (2 sigma / sqrt(count)); a mean near
    the cell's face less that would be nearer than the cell itself: the square stands."""
    rng = np.random.default_rng(1)
    config = SurfaceConfig(noise_m=0.02, max_count=20)
    means = ReturnMeans(RES, config)
    for scan in wall_returns(1.025, 0.02, 40, rng):
        means.integrate(scan, np.array([1.5, 1.5]))
    grid = wall_grid()
    surfaces = means.surfaces(grid)
    # The count: the returns of the face's cell, the one in front and the one behind, each stopping at max_count
    c0, r0 = -means.origin_index  # grid cell (r, c) is the window's (r + r0, c + c0)
    own = means.sums[0, r0 : r0 + 60, c0 : c0 + 60]
    assert own.max() == pytest.approx(20)
    n = own[30, 19] + own[30, 20] + own[30, 21]
    assert surfaces.uncertainty[30, 20] == pytest.approx(2 * 0.02 / np.sqrt(n))
    mean_x = surfaces.points[30, 20, 0]
    assert abs(mean_x - 1.025) < 3 * 0.02 / np.sqrt(20)  # a running mean of the last ~20 returns
    d = DistanceField(grid, "free", surfaces).distance(np.array([0.525, surfaces.points[30, 20, 1]]))
    assert d == pytest.approx(mean_x - surfaces.uncertainty[30, 20] - 0.525, abs=2e-3)
    # A wall right at the face (x = 1.00, its returns' mean ~1.00 and the cells still from x = 1.00): never nearer
    means.reset()
    for scan in wall_returns(1.0, 0.0, 3, rng):
        means.integrate(np.clip(scan, [1.0001, 0.0], None), np.array([1.5, 1.5]))
    surfaces = means.surfaces(grid)
    surfaces.uncertainty[:] = 0.03
    field = DistanceField(grid, "free", surfaces)
    q = np.array([[0.5, 1.5], [0.975, 1.475]])
    np.testing.assert_allclose(field.distance(q), 1.0 - q[:, 0], atol=1e-9)
    np.testing.assert_allclose(field.exact_distance(q), 1.0 - q[:, 0], atol=1e-9)


def test_a_face_on_a_cell_boundary_reads_at_the_face_not_deeper():
    """A wall 2 mm into its cell, range noise 2 cm: the returns short of the cell boundary fall in the free cell in
    front, so the face's own cell holds a mean ~1.5 cm too deep -- optimistic by more than a lane leaves. With the
    free neighbour's returns pooled the point is the face's."""
    rng = np.random.default_rng(5)
    means = ReturnMeans(RES, SurfaceConfig(noise_m=0.02, max_count=400))
    for scan in wall_returns(1.002, 0.02, 200, rng):
        means.integrate(scan, np.array([1.5, 1.5]))
    grid = wall_grid()
    x = means.surfaces(grid).points[5:55, 20, 0]
    c0, r0 = -means.origin_index  # grid cell (r, c) is the window's (r + r0, c + c0)
    own = means.sums[:, r0 + 5 : r0 + 55, c0 + 20]
    in_cell = 1.0 + own[1] / own[0]  # the face's cell's own mean
    assert np.mean(in_cell) > 1.002 + 0.01  # the bias pooling removes
    assert abs(np.mean(x) - 1.002) < 0.003, np.mean(x)


def test_corners_and_thin_walls_keep_the_whole_cell():
    """Returns about a convex corner, or on both sides of a wall one cell thick, average to no face at all: those
    cells get no point; the faces' cells away from them do."""
    data = np.zeros((60, 60), np.int8)
    data[20:40, 20:40] = 100  # a block, x and y in [1.0, 2.0)
    data[5:15, 50] = 100  # a thin wall, x in [2.5, 2.55)
    grid = OccupancyGrid(data, RES, (0.0, 0.0, 0.0))
    means = ReturnMeans(RES, SurfaceConfig(noise_m=0.005))
    rng = np.random.default_rng(7)
    along = np.linspace(1.0, 2.0, 200)
    thin = np.linspace(0.25, 0.75, 50)
    for _ in range(5):
        faces = [
            np.stack([np.full_like(along, 1.0), along], -1),  # the block's x- face
            np.stack([along, np.full_like(along, 1.0)], -1),  # its y- face
            np.stack([np.full_like(thin, 2.5), thin], -1),  # the thin wall seen from x-
            np.stack([np.full_like(thin, 2.55), thin], -1),  # and from x+
        ]
        scan = np.concatenate(faces)
        normal = np.concatenate([[[1, 0]] * 200, [[0, 1]] * 200, [[1, 0]] * 50, [[-1, 0]] * 50])
        means.integrate(scan + 0.005 * rng.standard_normal((len(scan), 1)) * normal, np.array([1.5, 1.5]))
    surfaces = means.surfaces(grid)
    known = surfaces.known
    assert not known[20, 20] and not known[5:15, 50].any()  # the corner, the thin wall
    assert known[30, 20] and known[20, 30]  # the faces
    assert abs(surfaces.points[30, 20, 0] - 1.0) < 0.005 and abs(surfaces.points[20, 30, 1] - 1.0) < 0.005
    assert not known[30, 30]  # inside: no returns of its own


def test_the_means_follow_a_moving_frame_and_the_window_keeps_what_stays_in_it():
    """Drift moves the wall in the odometry frame: after max_count returns a cell's mean is the new position's; the
    window recentres by whole cells and a cell still inside keeps its mean."""
    rng = np.random.default_rng(2)
    means = ReturnMeans(RES, SurfaceConfig(noise_m=0.0, max_count=5, size_m=4.0))
    for scan in wall_returns(1.01, 0.0, 5, rng):
        means.integrate(scan, np.array([1.5, 1.5]))
    for scan in wall_returns(1.04, 0.0, 30, rng):
        means.integrate(scan, np.array([1.5, 1.5]))
    grid = wall_grid()
    assert means.surfaces(grid).points[30, 20, 0] == pytest.approx(1.04, abs=1e-3)
    means.integrate(np.zeros((0, 2)), np.array([2.2, 1.9]))  # moved 14 cells in x, 8 in y
    after = means.surfaces(grid)
    assert after.points[30, 20, 0] == pytest.approx(1.04, abs=1e-3)
    assert not after.known[:, :6].any()  # x < 0.3 m fell out of the window (its left edge now at x = 0.2 + ...)


def test_returns_that_are_no_walls_are_dropped():
    """NaN, inf and absurdly far returns (a 1e300 m "return" would wrap the cell index) leave the means as they
    were, without a warning."""
    means = ReturnMeans(RES, SurfaceConfig(noise_m=0.0))
    wall = np.array([[1.02, 1.5]] * 5)
    means.integrate(wall, np.array([1.5, 1.5]))
    before = means.sums.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        means.integrate(np.array([[np.nan, 1.0], [np.inf, 1.0], [1e300, 1.5], [1.5, -1e300]]), np.array([1.5, 1.5]))
    np.testing.assert_array_equal(means.sums, before)


def test_surfaces_only_for_a_grid_on_the_lattice():
    """Another resolution, an origin off the lattice or a turned grid get none (the cells would not match)."""
    means = ReturnMeans(RES)
    assert means.surfaces(wall_grid()) is None  # nothing integrated yet
    means.integrate(np.array([[1.02, 1.5]] * 5), np.array([1.5, 1.5]))
    assert means.surfaces(wall_grid()) is not None
    data = np.zeros((10, 10), np.int8)
    assert means.surfaces(OccupancyGrid(data, 0.1, (0.0, 0.0, 0.0))) is None
    assert means.surfaces(OccupancyGrid(data, RES, (0.01, 0.0, 0.0))) is None
    assert means.surfaces(OccupancyGrid(data, RES, (0.0, 0.0, 0.3))) is None


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"noise_m": -0.01}, "noise_m"),
        ({"min_count": 0}, "min_count"),
        ({"max_count": 2, "min_count": 3}, "min_count <= max_count"),
        ({"sigmas": float("nan")}, "sigmas"),
        ({"size_m": 1e9}, "size_m"),
    ],
)
def test_bad_surface_settings_are_named(kwargs, name):
    with pytest.raises(InputError, match=name):
        SurfaceConfig(**kwargs)


def test_the_field_matches_a_brute_force_over_points_and_squares():
    """A cluttered grid, 60 % of its obstacle cells refined with a point somewhere inside: at every free cell the
    field is the least over the whole cells (centre distance less half a cell, the field's rule) and the points (less
    their uncertainty), never below the whole cells' field: within 1 mm at 99 % of the cells, 1.5 cm at all."""
    rng = np.random.default_rng(3)
    data = np.zeros((60, 60), np.int8)
    for _ in range(12):
        r, c = rng.integers(0, 55, 2)
        data[r : r + 6, c : c + 3] = 100
    grid = OccupancyGrid(data, RES, (0.0, 0.0, 0.0))
    rows, cols = np.nonzero(data == 100)
    keep = rng.random(len(rows)) < 0.6
    inside = np.stack([cols + rng.uniform(0.05, 0.95, len(cols)), rows + rng.uniform(0.05, 0.95, len(rows))], -1)
    means = ReturnMeans(RES, SurfaceConfig(noise_m=0.01, band_m=100.0))
    means.integrate(grid.grid_to_world(inside[keep]).repeat(5, axis=0), np.array([1.5, 1.5]))
    field = DistanceField(grid, "free", means.surfaces(grid))
    free = ~field.obstacles
    fr, fc = np.nonzero(free)
    centres = grid.grid_to_world(np.stack([fc + 0.5, fr + 0.5], -1).astype(float))
    others = DistanceField(grid.with_data(np.where(field.refined, 0, data).astype(np.int8)), "free").values[free]
    rr, rc = np.nonzero(field.refined)
    points, slack = field.surfaces.points[rr, rc], field.surfaces.uncertainty[rr, rc]
    to_points = (np.hypot(*(centres[:, None] - points[None]).transpose(2, 0, 1)) - slack[None]).min(axis=1)
    truth = np.maximum(np.minimum(others, to_points), field.cells_only.values[free])
    err = field.values[free] - truth
    assert err.min() > -1e-9  # never nearer than the brute force
    assert np.mean(err > 1e-3) < 0.01 and err.max() < 0.015, (np.mean(err > 1e-3), err.max())
    assert np.mean(field.values[free] > field.cells_only.values[free] + 1e-3) > 0.05  # the points gave room
    # Within band_m of the whole cells only: farther, the whole cells' field stands
    banded = DistanceField(grid, "free", dataclasses.replace(means.surfaces(grid), band_m=0.2))
    far = field.cells_only.values >= 0.2
    np.testing.assert_array_equal(banded.values[far], field.cells_only.values[far])
    np.testing.assert_array_equal(banded.values[~far], field.values[~far])
