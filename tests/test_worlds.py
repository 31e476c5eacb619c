"""Procedural worlds: deterministic, closed, and every start/goal pair joined by a path of the inflated footprint."""

import numpy as np
import pytest
from scipy import ndimage
from skimage.morphology import disk

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.planning.worlds import KINDS, WorldConfig, generate_world, validate_world, world_from_grid


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
