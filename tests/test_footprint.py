"""Footprints and their covering discs (issue 10): exact geometry, the cover's bound, the narrow-gap case."""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.path import Path as MplPath

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.footprint import Footprint, parse_footprint, to_robot, to_world

JACKAL = Footprint.rectangle(0.508, 0.430)


def _random_convex(rng: np.random.Generator) -> Footprint:
    """A random convex polygon around the origin: the hull of points on an ellipse, 0.2-0.6 m by 0.15-0.45 m."""
    from scipy.spatial import ConvexHull

    while True:  # until the rotation centre is well inside (a footprint must contain it)
        a, b = rng.uniform(0.1, 0.3), rng.uniform(0.075, 0.225)
        ang = np.sort(rng.uniform(0, 2 * np.pi, rng.integers(4, 9)))
        pts = np.stack([a * np.cos(ang), b * np.sin(ang)], axis=1) + rng.uniform(-0.03, 0.03, 2)
        if MplPath(pts[ConvexHull(pts).vertices]).contains_point((0.0, 0.0), radius=-0.04):
            return Footprint.polygon(pts[ConvexHull(pts).vertices])


def _reference_signed_distance(fp: Footprint, q: np.ndarray) -> np.ndarray:
    """Independent reference: inside by matplotlib's point-in-polygon, distance to a boundary sampled every <= 1.2 mm
    (so within 0.6 mm of the exact distance)."""
    p = fp.points
    edges = [np.linspace(p[i], p[(i + 1) % len(p)], 500, endpoint=False) for i in range(len(p))]
    boundary = np.concatenate(edges)
    d = np.min(np.linalg.norm(q[:, None] - boundary[None], axis=2), axis=1)
    inside = MplPath(p).contains_points(q)
    return np.where(inside, -d, d)


def _points_in(fp: Footprint, rng: np.random.Generator, n: int) -> np.ndarray:
    """Random points in the polygon plus its vertices and points along its edges (where covers fail first)."""
    x0, x1, y0, y1 = fp.bounds
    q = rng.uniform((x0, y0), (x1, y1), (4 * n, 2))
    q = q[fp.contains(q)][:n]
    p = fp.points
    t = rng.uniform(0, 1, (n, 1))
    i = rng.integers(0, len(p), n)
    on_edges = p[i] + t * (np.roll(p, -1, axis=0)[i] - p[i])
    return np.concatenate([q, p, on_edges])


def test_signed_distance_matches_an_independent_reference():
    rng = np.random.default_rng(0)
    for fp in (JACKAL, Footprint.rectangle(0.138, 0.178, -0.032), _random_convex(rng)):
        x0, x1, y0, y1 = fp.bounds
        q = rng.uniform((x0 - 0.2, y0 - 0.2), (x1 + 0.2, y1 + 0.2), (400, 2))
        np.testing.assert_allclose(fp.signed_distance(q), _reference_signed_distance(fp, q), atol=6e-4)
    assert JACKAL.circumscribed_radius == pytest.approx(math.hypot(0.254, 0.215))
    assert JACKAL.inscribed_radius == pytest.approx(0.215)
    assert JACKAL.min_width == pytest.approx(0.430)
    circle = Footprint.circle(0.2)
    np.testing.assert_allclose(circle.signed_distance([[0.5, 0.0], [0.0, 0.1]]), [0.3, -0.1])


def test_world_transform_round_trips_and_places_the_polygon():
    pose = np.array([1.0, -2.0, 0.7])
    world = JACKAL.transform(pose)
    np.testing.assert_allclose(to_robot(world, pose), JACKAL.points, atol=1e-12)
    np.testing.assert_allclose(to_world([[0.0, 0.0]], pose), [[1.0, -2.0]])
    front = to_world([[0.254, 0.0]], pose)[0]
    np.testing.assert_allclose(front, [1.0 + 0.254 * math.cos(0.7), -2.0 + 0.254 * math.sin(0.7)])
    assert JACKAL.world_signed_distance(pose, [front])[0] == pytest.approx(0.0, abs=1e-12)
    # The circle's drawn outline circumscribes it: never smaller than the body.
    ring = Footprint.circle(0.2).outline(pose)
    assert np.all(np.linalg.norm(ring - pose[:2], axis=1) >= 0.2)


@pytest.mark.parametrize("case", range(6))
def test_cover_covers_the_polygon_within_the_stated_bound(case):
    rng = np.random.default_rng(100 + case)
    if case < 2:
        fp = Footprint.rectangle(rng.uniform(0.15, 0.6), rng.uniform(0.15, 0.45), rng.uniform(-0.05, 0.05))
    else:
        fp = _random_convex(rng)
    tol = float(rng.choice([0.02, 0.03, 0.05]))
    cover = fp.cover(tol)
    assert cover.discs.shape == (cover.count, 3) and cover.count >= 1
    # Every point of the polygon lies in some disc ...
    assert np.all(fp.covered_by(cover.discs, _points_in(fp, rng, 3000)))
    # ... and no disc sticks out by more than the bound (measured here independently of `cover_error`).
    ang = np.linspace(0, 2 * np.pi, 720, endpoint=False)
    ring = np.stack([np.cos(ang), np.sin(ang)], axis=1)
    rim = (cover.discs[:, None, :2] + cover.discs[:, None, 2:3] * ring[None]).reshape(-1, 2)
    excess = _reference_signed_distance(fp, rim).max()
    assert excess <= tol + 6e-4  # the reference is within 0.6 mm
    assert cover.error <= tol
    assert cover.error == pytest.approx(excess, abs=2e-3)  # the reported error is the measured one (720-point rims)


def test_fewer_discs_mean_a_larger_error():
    # Halving the tolerance never needs fewer discs (provable for this construction, see `_cover`), and the error
    # reported for each cover is within its tolerance: the trade-off is monotone.
    fp = Footprint.rectangle(0.281, 0.306, -0.064)
    covers = [fp.cover(t) for t in (0.08, 0.04, 0.02)]
    counts = [c.count for c in covers]
    errors = [c.error for c in covers]
    assert counts == sorted(counts) and counts[0] < counts[-1]
    assert errors == sorted(errors, reverse=True)
    assert all(c.error <= c.tolerance for c in covers)


def test_a_circle_is_its_own_single_disc():
    cover = Footprint.circle(0.2).cover()
    np.testing.assert_array_equal(cover.discs, [[0.0, 0.0, 0.2]])
    assert cover.error == 0.0


def test_narrow_gap_the_rectangle_fits_where_its_circle_does_not():
    # A 0.47 m gap between two walls along x: the Jackal-class box (0.508 x 0.430 m) passes oriented along it, its
    # circumscribed circle (d = 0.666 m) does not, and neither does the box turned across it.
    gap = 0.47
    xs = np.linspace(-1.0, 1.0, 401)
    walls = np.concatenate([np.stack([xs, np.full_like(xs, s * gap / 2)], axis=1) for s in (-1, 1)])
    along = JACKAL.world_signed_distance([0.0, 0.0, 0.0], walls)
    assert along.min() == pytest.approx((gap - 0.430) / 2)  # 2 cm either side
    assert 2 * JACKAL.circumscribed_radius > gap
    assert Footprint.circle(JACKAL.circumscribed_radius).world_signed_distance([0, 0, 0], walls).min() < 0
    assert JACKAL.world_signed_distance([0.0, 0.0, math.pi / 2], walls).min() < 0
    # The covering discs the MPC checks stay within the bound of the box: narrower than the gap, every disc clear.
    cover = JACKAL.cover(0.015)
    assert cover.lateral_extent <= 0.430 + 2 * cover.tolerance + 1e-9
    assert cover.lateral_extent < gap
    centres = cover.discs[:, :2]
    clearance = np.min(np.linalg.norm(walls[:, None] - centres[None], axis=2), axis=0) - cover.discs[:, 2]
    assert clearance.min() > 0
    # One disc per robot, the circumscribed one, would not pass: the cover is what makes the gap passable.
    assert JACKAL.cover(0.2).lateral_extent > gap


def test_parse_nav2_footprints_and_refuse_bad_ones():
    fp = parse_footprint("[[-0.254, -0.215], [0.254, -0.215], [0.254, 0.215], [-0.254, 0.215]]")
    assert fp == JACKAL
    assert parse_footprint([[0.254, 0.215], [-0.254, 0.215], [-0.254, -0.215], [0.254, -0.215]]) == JACKAL  # any start
    assert parse_footprint("", robot_radius=0.3) == Footprint.circle(0.3)
    assert parse_footprint("[[0.3, 0], [0.3, 0.1], [-0.1, 0.1], [-0.1, -0.1], [0.3, -0.1]]").vertices == (
        (-0.1, -0.1),
        (0.3, -0.1),
        (0.3, 0.1),
        (-0.1, 0.1),
    )  # the collinear (0.3, 0) is dropped
    with pytest.raises(InputError, match="convex"):
        Footprint.polygon([[-0.2, -0.2], [0.0, -0.05], [0.2, -0.2], [0.2, 0.2], [-0.2, 0.2]])
    with pytest.raises(InputError, match="crosses itself"):
        star = [(math.cos(a), math.sin(a)) for a in np.arange(5) * 4 * math.pi / 5]
        Footprint.polygon(star)
    with pytest.raises(InputError, match="rotation centre"):
        Footprint.rectangle(0.2, 0.2, x_offset=0.3)
    with pytest.raises(InputError, match="at least 3"):
        Footprint.polygon([[0, 0], [1, 1]])
    with pytest.raises(InputError, match="finite"):
        Footprint.polygon([[0.1, 0.1], [-0.1, 0.1], [0.0, float("nan")]])
    with pytest.raises(InputError, match=r"\[\[x, y\], \.\.\.\]"):
        parse_footprint("[[0.1, 0.1], [0.1]]")
    with pytest.raises(InputError, match="no robot_radius"):
        parse_footprint("")
    with pytest.raises(InputError, match="tolerance"):
        JACKAL.cover(0.0)
    with pytest.raises(InputError, match="too fine"):
        JACKAL.cover(1e-4)
