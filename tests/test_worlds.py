"""Procedural worlds: deterministic, closed, and every start/goal pair joined by a path of the inflated footprint."""

import numpy as np
import pytest
from scipy import ndimage
from skimage.morphology import disk

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.sim.worlds import (
    ALL_KINDS,
    KINDS,
    MovingObstacle,
    WorldConfig,
    clearance_map,
    generate_world,
    passage_bottleneck_m,
    validate_world,
    world_from_grid,
)


def _connected_by_dilation(world) -> bool:
    """Independent check: dilate obstacles by the footprint + margin (a disc structuring element) and ask whether
    start and goal fall in one component of what is left."""
    cfg = world.config
    g = world.grid
    r_cells = int(np.ceil(cfg.inflation_m / g.resolution))
    blocked = ndimage.binary_dilation(g.occupied_mask(), structure=disk(r_cells))
    labels, _ = ndimage.label(~blocked)
    (sr, sc), (gr, gc) = g.world_to_cell(world.start[:2]), g.world_to_cell(world.goal[:2])
    return labels[sr, sc] != 0 and labels[sr, sc] == labels[gr, gc]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("difficulty", [0.0, 1.0])
def test_every_kind_is_traversable_and_closed(kind, difficulty):
    cfg = WorldConfig(difficulty=difficulty)
    for seed in range(3):
        w = generate_world(seed, cfg, kind=kind)
        assert w.kind == kind and w.seed == seed
        data = w.grid.data
        assert set(np.unique(data)) <= {FREE, OCCUPIED}
        assert data.shape == (round(cfg.size_m[1] / cfg.resolution), round(cfg.size_m[0] / cfg.resolution))
        # Outer walls closed: every border cell is occupied.
        assert (data[0] == OCCUPIED).all() and (data[-1] == OCCUPIED).all()
        assert (data[:, 0] == OCCUPIED).all() and (data[:, -1] == OCCUPIED).all()
        assert _connected_by_dilation(w), f"{kind} seed {seed}: start and goal not joined"
        assert np.hypot(*(w.goal[:2] - w.start[:2])) > 1.0


def test_deterministic_per_seed_and_distinct_across_seeds():
    a, b = generate_world(42), generate_world(42)
    assert a.kind == b.kind
    np.testing.assert_array_equal(a.grid.data, b.grid.data)
    np.testing.assert_array_equal(a.start, b.start)
    np.testing.assert_array_equal(a.goal, b.goal)
    # Drawing the kind from the seed gives the same world as naming that kind.
    np.testing.assert_array_equal(generate_world(42, kind=a.kind).grid.data, a.grid.data)
    c = generate_world(43, kind=a.kind)
    assert not np.array_equal(a.grid.data, c.grid.data)
    assert len({generate_world(s).kind for s in range(30)}) >= 4  # kind=None mixes kinds


def test_difficulty_adds_clutter():
    occ = [
        np.mean(
            [generate_world(s, WorldConfig(difficulty=d), kind="clutter").grid.occupied_mask().mean() for s in range(4)]
        )
        for d in (0.0, 1.0)
    ]
    assert occ[1] > 1.5 * occ[0]


def test_validate_world_rejects_bad_start_and_disconnected_goal():
    data = np.zeros((60, 100), dtype=np.int8)
    data[0, :] = data[-1, :] = data[:, 0] = data[:, -1] = OCCUPIED
    data[:, 48:52] = OCCUPIED  # a wall splitting the room in two
    g = OccupancyGrid(data, 0.05)
    with pytest.raises(InfeasibleProblemError, match="start .* inside an obstacle"):
        world_from_grid(g, [2.5, 1.5, 0.0], [4.0, 1.5, 0.0])
    with pytest.raises(InfeasibleProblemError, match="start .* clearance"):
        world_from_grid(g, [0.12, 1.5, 0.0], [1.0, 1.5, 0.0])
    with pytest.raises(InfeasibleProblemError, match="no path"):
        validate_world(g, np.array([1.0, 1.5, 0.0]), np.array([4.0, 1.5, 0.0]))
    with pytest.raises(InfeasibleProblemError, match="outside the map"):
        validate_world(g, np.array([1.0, 1.5, 0.0]), np.array([9.0, 1.5, 0.0]))
    data[20:40, 48:52] = FREE  # a 1 m door
    w = world_from_grid(OccupancyGrid(data, 0.05), [1.0, 1.5, 0.0], [4.0, 1.5, 0.0])
    assert w.kind == "map"


def test_bad_config_and_kind_raise_input_error():
    with pytest.raises(InputError, match="difficulty"):
        WorldConfig(difficulty=1.5)
    with pytest.raises(InputError, match="door_width_max_m"):
        WorldConfig(door_width_max_m=0.5)
    with pytest.raises(InputError, match="kind"):
        generate_world(0, kind="castle")


# --- dense clutter --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("difficulty", [0.0, 0.5, 1.0])
def test_dense_worlds_are_solvable_and_force_passages_in_range(difficulty):
    """Start and goal are joined for the inflated footprint, and the widest route between them narrows to a passage
    of 1.1-1.5x the robot's width: measured by the max-min clearance, and independently by dilating the obstacles by
    a disc just wider than the upper bound, which must cut start from goal."""
    cfg = WorldConfig(difficulty=difficulty)
    lo, hi = cfg.dense_passage_m
    assert 1.1 * cfg.width_m <= lo and hi == pytest.approx(1.5 * cfg.width_m)
    res = cfg.resolution
    for seed in range(1000, 1004):
        w = generate_world(seed, cfg, kind="dense")
        assert w.kind == "dense" and w.name == f"dense-{seed}"
        data = w.grid.data
        assert (data[0] == OCCUPIED).all() and (data[:, -1] == OCCUPIED).all()
        assert _connected_by_dilation(w), f"dense seed {seed}: start and goal not joined"
        width = passage_bottleneck_m(w.grid, w.start, w.goal)
        assert lo - res - 1e-9 <= width <= hi + 1e-9, f"seed {seed}: bottleneck {width} not in [{lo}, {hi}]"
        # A disc of diameter > hi + 2 cells cannot get through: every route has a passage no wider than that.
        r_cells = int(np.ceil(hi / (2 * res))) + 1
        blocked = ndimage.binary_dilation(w.grid.occupied_mask(), structure=disk(r_cells))
        labels, _ = ndimage.label(~blocked)
        (sr, sc), (gr, gc) = w.grid.world_to_cell(w.start[:2]), w.grid.world_to_cell(w.goal[:2])
        assert labels[sr, sc] == 0 or labels[sr, sc] != labels[gr, gc]
        # Dense means dense: far more obstacle than the plain clutter family at the same difficulty.
        assert w.grid.occupied_mask().mean() > 0.3


def test_passage_bottleneck_of_a_known_gap():
    data = np.zeros((60, 100), dtype=np.int8)
    data[0, :] = data[-1, :] = data[:, 0] = data[:, -1] = OCCUPIED
    data[:, 48:52] = OCCUPIED
    data[20:31, 48:52] = FREE  # an 11-cell (0.55 m) door
    g = OccupancyGrid(data, 0.05)
    assert passage_bottleneck_m(g, np.array([1.0, 1.5, 0.0]), np.array([4.0, 1.5, 0.0])) == pytest.approx(0.55)
    data[20:31, 48:52] = OCCUPIED
    assert passage_bottleneck_m(OccupancyGrid(data, 0.05), np.array([1.0, 1.5, 0]), np.array([4.0, 1.5, 0])) == 0.0


def test_dense_is_generated_only_when_named_and_width_comes_from_config():
    assert "dense" in ALL_KINDS and "dense" not in KINDS
    assert all(generate_world(s).kind in KINDS for s in range(1000, 1040))
    wide = WorldConfig(robot_width_m=0.45)
    assert wide.width_m == 0.45 and WorldConfig().width_m == pytest.approx(2 * WorldConfig().robot_radius_m)
    assert wide.dense_passage_m[1] == pytest.approx(0.675)
    # 1.5 x 0.3 m < the 0.55 m the 0.2 m disc + margins need: the floor wins, one cell of range above it
    narrow = WorldConfig(robot_width_m=0.3)
    assert narrow.dense_passage_m == pytest.approx((0.55, 0.6))
    assert narrow.dense_passage_factors == pytest.approx((0.55 / 0.3, 0.6 / 0.3))
    with pytest.raises(InputError, match="robot_width_m"):
        WorldConfig(robot_width_m=-1.0)


# --- moving obstacles -----------------------------------------------------------------------------------------------
def test_moving_obstacle_goes_back_and_forth_at_constant_speed():
    ob = MovingObstacle("cylinder", (0.2, 0.2), (1.0, 1.0), (3.0, 1.0), speed=0.5)
    np.testing.assert_allclose(ob.position(0.0), [1.0, 1.0])
    np.testing.assert_allclose(ob.position(2.0), [2.0, 1.0])
    np.testing.assert_allclose(ob.position(4.0), [3.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(ob.position(6.0), [2.0, 1.0])
    np.testing.assert_allclose(ob.velocity(1.0), [0.5, 0.0])
    np.testing.assert_allclose(ob.velocity(5.0), [-0.5, 0.0])
    np.testing.assert_allclose(ob.position(8.0 + 1.0), ob.position(1.0))  # period 2 L / speed = 8 s
    half = MovingObstacle("box", (0.2, 0.1), (1.0, 1.0), (3.0, 1.0), speed=0.5, phase=0.5)
    np.testing.assert_allclose(half.position(0.0), [3.0, 1.0])
    assert half.bounding_radius_m == pytest.approx(np.hypot(0.2, 0.1))
    with pytest.raises(InputError, match="shape"):
        MovingObstacle("cone", (0.2, 0.2), (0, 0), (1, 0), 0.5)


@pytest.mark.parametrize("kind", ["rooms", "clutter", "dense"])
def test_moving_obstacles_are_seeded_clear_of_walls_and_endpoints(kind):
    cfg = WorldConfig(moving_obstacles=3)
    a, b = generate_world(1003, cfg, kind=kind), generate_world(1003, cfg, kind=kind)
    assert a.moving == b.moving and len(a.moving) >= 1
    static = generate_world(1003, kind=kind)
    assert static.moving == ()
    np.testing.assert_array_equal(a.grid.data, static.grid.data)  # asking for movers leaves the static world alone
    np.testing.assert_array_equal(a.start, static.start)
    clear = clearance_map(a.grid)
    for ob in a.moving:
        lo, hi = cfg.moving_path_m
        assert lo - 1e-9 <= ob.length_m <= hi + 1e-9
        assert cfg.moving_speed_m_s[0] <= ob.speed <= cfg.moving_speed_m_s[1]
        for f in np.linspace(0.0, 1.0, 21):
            p = np.asarray(ob.a) + f * (np.asarray(ob.b) - np.asarray(ob.a))
            r, c = a.grid.world_to_cell(p)
            assert clear[r, c] > ob.bounding_radius_m  # never inside a wall
            for end in (a.start, a.goal):
                assert np.hypot(*(p - end[:2])) > ob.bounding_radius_m + cfg.inflation_m
    with pytest.raises(InputError, match="moving_obstacles"):
        WorldConfig(moving_obstacles=-1)
