"""Static geometry: rectangle merging is an exact cover, and the PyBullet world matches the grid it came from."""

import math

import numpy as np
import pytest

from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.sim.world import grid_boxes, ground_truth_grid, merge_occupied_rectangles, world_bounds
from mnemo_mpc.sim.worlds import generate_world

pb = pytest.importorskip("pybullet")


@pytest.mark.parametrize("seed", range(4))
def test_rectangles_cover_mask_exactly_and_disjointly(seed):
    rng = np.random.default_rng(seed)
    mask = rng.random((40, 57)) < 0.4
    mask[5:20, 10:30] = True  # a block that should merge into few rectangles
    rects = merge_occupied_rectangles(mask)
    count = np.zeros(mask.shape, dtype=int)
    for r0, c0, r1, c1 in rects:
        assert r0 < r1 and c0 < c1
        count[r0:r1, c0:c1] += 1
    assert count.max() <= 1  # disjoint
    np.testing.assert_array_equal(count.astype(bool), mask)  # exact cover


def test_generated_world_merges_into_few_boxes():
    w = generate_world(0, kind="rooms")
    n_occ = int(w.grid.occupied_mask().sum())
    boxes = grid_boxes(w.grid)
    assert len(boxes) < n_occ / 20
    area = float(np.sum(4 * boxes[:, 2] * boxes[:, 3]))
    assert area == pytest.approx(n_occ * w.grid.resolution**2)


def test_boxes_follow_a_rotated_translated_origin():
    data = np.zeros((10, 20), dtype=np.int8)
    data[2:4, 5:15] = OCCUPIED
    g = OccupancyGrid(data, 0.1, (1.0, -2.0, math.pi / 2))
    ((cx, cy, hx, hy, yaw),) = grid_boxes(g)
    # Box centre at grid (col 10, row 3) -> rotated by 90 degrees about the origin corner.
    assert (cx, cy) == pytest.approx((1.0 - 0.3, -2.0 + 1.0))
    assert (hx, hy, yaw) == pytest.approx((0.5, 0.1, math.pi / 2))
    xmin, ymin, xmax, ymax = world_bounds(g)
    assert (xmin, ymin, xmax, ymax) == pytest.approx((0.0, -2.0, 1.0, 0.0))


def test_ground_truth_grid_resolves_unknown():
    data = np.array([[-1, 0, 100, 50]], dtype=np.int8)
    g = OccupancyGrid(data, 0.05)
    np.testing.assert_array_equal(ground_truth_grid(g).data, [[OCCUPIED, FREE, OCCUPIED, OCCUPIED]])
    np.testing.assert_array_equal(ground_truth_grid(g, "free").data, [[FREE, FREE, OCCUPIED, FREE]])


def test_rays_hit_exactly_the_grid_walls():
    """Rays cast through the built geometry stop at the occupied cells' faces (exact to float precision)."""
    from mnemo_mpc.sim.world import build_static_geometry

    w = generate_world(5, kind="clutter")
    client = pb.connect(pb.DIRECT)
    try:
        build_static_geometry(client, w.grid)
        rng = np.random.default_rng(0)
        xs = rng.uniform(0.5, 11.5, size=(200, 2))
        ang = rng.uniform(-math.pi, math.pi, size=200)
        ends = xs + 20.0 * np.stack([np.cos(ang), np.sin(ang)], 1)
        frm = np.column_stack([xs, np.full(200, 0.2)])
        to = np.column_stack([ends, np.full(200, 0.2)])
        hits = pb.rayTestBatch(frm.tolist(), to.tolist(), physicsClientId=client)
        occ = w.grid.occupied_mask()
        start_free = ~occ[tuple(w.grid.world_to_cell(xs).T)]
        checked = 0
        for (body, _, _, pos, _), free0, a in zip(hits, start_free, ang, strict=True):
            if not free0:
                continue
            assert body >= 0, "closed outer walls: every ray from inside must hit"
            d = np.array([math.cos(a), math.sin(a)])
            inside = np.asarray(pos[:2]) + 1e-3 * d  # just past the hit: an occupied cell
            before = np.asarray(pos[:2]) - 1e-3 * d  # just before: a free cell
            assert occ[tuple(w.grid.world_to_cell(inside))]
            assert not occ[tuple(w.grid.world_to_cell(before))]
            checked += 1
        assert checked > 100
    finally:
        pb.disconnect(client)


def test_moving_obstacles_become_bodies_of_their_shape_where_they_start():
    from mnemo_mpc.sim.world import StaticGeometryConfig, build_moving_obstacles
    from mnemo_mpc.sim.worlds import MovingObstacle, World

    w = generate_world(0, kind="open")
    cyl = MovingObstacle("cylinder", (0.25, 0.25), (3.0, 3.0), (5.0, 3.0), speed=0.3, phase=0.25)
    box = MovingObstacle("box", (0.3, 0.1), (6.0, 6.0), (6.0, 8.0), speed=0.3, yaw=0.5)
    world = World(w.grid, w.start, w.goal, seed=0, kind="open", moving=(cyl, box))
    client = pb.connect(pb.DIRECT)
    try:
        bodies = build_moving_obstacles(client, world, StaticGeometryConfig(wall_height_m=0.5))
        assert len(bodies) == 2
        (c_shape,), (b_shape,) = (pb.getCollisionShapeData(b, -1, physicsClientId=client) for b in bodies)
        assert c_shape[2] == pb.GEOM_CYLINDER and c_shape[3][:2] == pytest.approx((0.5, 0.25))  # height, radius
        assert b_shape[2] == pb.GEOM_BOX and b_shape[3] == pytest.approx((0.6, 0.2, 0.5))  # full extents
        (x, y, z), quat = pb.getBasePositionAndOrientation(bodies[0], physicsClientId=client)
        assert (x, y, z) == pytest.approx((4.0, 3.0, 0.25))  # a quarter of the round trip: half way to b
        _, quat = pb.getBasePositionAndOrientation(bodies[1], physicsClientId=client)
        assert pb.getEulerFromQuaternion(quat)[2] == pytest.approx(0.5)
    finally:
        pb.disconnect(client)
