"""Lidar -> local occupancy grid against known geometry: occupied cells on true walls, free cells truly free,
unobserved cells unknown, evidence kept when the window rolls."""

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.sim import LidarConfig, LocalGridConfig, SimConfig, Simulator
from mnemo_mpc.sim.lidar import LidarScan
from mnemo_mpc.sim.local_grid import LocalGrid
from mnemo_mpc.sim.worlds import World, world_from_grid

pytest.importorskip("pybullet")

RES = 0.05


def _box_room() -> World:
    """A 4 m x 3 m room (walls 0.1 m) inside an 8 m x 6 m map; a pillar at (2.5, 1.5); outside the room is free."""
    data = np.full((120, 160), FREE, dtype=np.int8)
    data[20:22, 40:120] = OCCUPIED  # y = 1.0 .. 1.1
    data[80:82, 40:120] = OCCUPIED  # y = 4.0 .. 4.1
    data[20:82, 40:42] = OCCUPIED  # x = 2.0 .. 2.1
    data[20:82, 118:120] = OCCUPIED  # x = 5.9 .. 6.0
    data[48:52, 68:72] = OCCUPIED  # pillar 3.4..3.6 x 2.4..2.6
    grid = OccupancyGrid(data, RES)
    return world_from_grid(grid, [3.0, 2.0, 0.3], [5.0, 3.5, 0.0])


def _distance_to_walls(world: World) -> np.ndarray:
    from scipy import ndimage

    return ndimage.distance_transform_edt(~world.grid.occupied_mask())  # cells


def test_local_grid_matches_box_room():
    world = _box_room()
    with Simulator(SimConfig(lidar=LidarConfig(noise_std_m=0.01))) as sim:
        obs = sim.reset(world)
        for _ in range(5):
            obs = sim.step(0.2, 0.4)
    g = obs.local_grid
    assert g.shape == (120, 120) and g.resolution == RES
    # The window is centred on the robot and snapped to the map's cell lattice.
    ox, oy, _ = g.origin
    assert abs(ox + 3.0 - obs.pose[0]) <= RES and abs(oy + 3.0 - obs.pose[1]) <= RES
    assert ox / RES == pytest.approx(round(ox / RES)) and oy / RES == pytest.approx(round(oy / RES))

    # Map every local cell to the ground-truth cell at the same place.
    rows, cols = np.mgrid[0:120, 0:120]
    truth_rc = (rows + int(round(oy / RES)), cols + int(round(ox / RES)))
    inside = (truth_rc[0] >= 0) & (truth_rc[0] < 120) & (truth_rc[1] >= 0) & (truth_rc[1] < 160)
    dist = np.full((120, 120), np.inf)
    dist[inside] = _distance_to_walls(world)[truth_rc[0][inside], truth_rc[1][inside]]

    occ, free, unknown = g.occupied_mask(), g.free_mask(), g.unknown_mask()
    assert occ.sum() > 200  # the four walls and the pillar are seen
    assert dist[occ].max() <= 2.0  # occupied cells lie within two cells of true walls
    truth_occ = np.zeros((120, 120), dtype=bool)
    truth_occ[inside] = world.grid.occupied_mask()[truth_rc[0][inside], truth_rc[1][inside]]
    assert not (free & truth_occ).any()  # free cells are truly free
    # Outside the room (beyond its walls) nothing can be observed: all unknown.
    x = ox + (cols + 0.5) * RES
    y = oy + (rows + 0.5) * RES
    outside = (x < 1.95) | (x > 6.05) | (y < 0.95) | (y > 4.15)
    assert unknown[outside].all()
    # Inside the room, most cells are observed free (the pillar's shadow is the exception).
    room = (x > 2.2) & (x < 5.8) & (y > 1.2) & (y < 3.9)
    assert free[room].mean() > 0.85
    # Directly behind the pillar (seen from the robot) stays unknown.
    assert (g.data == -1).sum() > 0


def _scan(pose, ranges, hit, angles):
    return LidarScan(angles=angles, ranges=ranges, hit=hit, pose=np.asarray(pose, float), range_max=5.0)


def test_window_rolls_and_keeps_evidence_in_map_frame():
    lg = LocalGrid(LocalGridConfig(size_m=2.0, resolution=0.1))
    lg.reset(np.zeros(2))
    angles = np.array([0.0])
    lg.update(_scan([0.0, 0.0, 0.0], np.array([0.55]), np.array([True]), angles))
    g0 = lg.occupancy_grid()
    hit_xy = g0.grid_to_world(np.argwhere(g0.occupied_mask())[:, ::-1] + 0.5)
    assert hit_xy.shape == (1, 2) and hit_xy[0] == pytest.approx([0.55, 0.05])
    # Move 0.35 m (3 cells); the same map-frame cell stays occupied and the origin follows.
    g1 = lg.update(_scan([0.35, 0.0, 0.0], np.array([5.0]), np.array([False]), np.array([np.pi / 2])))
    assert g1.origin[0] == pytest.approx(g0.origin[0] + 0.3)
    hit_xy1 = g1.grid_to_world(np.argwhere(g1.occupied_mask())[:, ::-1] + 0.5)
    assert hit_xy1 == pytest.approx(hit_xy)
    # Cells that entered the window were never seen.
    assert (g1.data[:, -3:] == -1).all()
    # Far away: everything forgotten.
    g2 = lg.update(_scan([10.0, 0.0, 0.0], np.array([0.5]), np.array([False]), angles))
    assert g2.occupied_mask().sum() == 0


def test_repeated_misses_clear_a_hit_and_logodds_clamp():
    cfg = LocalGridConfig(size_m=2.0, resolution=0.1)
    lg = LocalGrid(cfg)
    lg.reset(np.zeros(2))
    angles = np.array([0.0])
    for _ in range(10):
        lg.update(_scan([0.0, 0.0, 0.0], np.array([0.55]), np.array([True]), angles))
    assert lg.logodds.max() == pytest.approx(cfg.logodds_max)
    cell = lg.occupancy_grid().occupied_mask()
    assert cell.sum() == 1
    for _ in range(6):  # the obstacle moved away: beams now pass through
        g = lg.update(_scan([0.0, 0.0, 0.0], np.array([0.95]), np.array([True]), angles))
    assert g.free_mask()[cell].all()
    assert lg.logodds.min() >= cfg.logodds_min


def _passage_world() -> World:
    """A 0.55 m passage (y = 1.75 .. 2.3, x = 1 .. 7) between two blocks, the robot at its west end."""
    data = np.full((80, 160), FREE, dtype=np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = OCCUPIED
    data[2:35, 20:140] = OCCUPIED  # y < 1.75
    data[46:78, 20:140] = OCCUPIED  # y >= 2.3
    return world_from_grid(OccupancyGrid(data, RES), [0.5, 2.0, 0.0], [7.5, 2.0, 0.0])


def _drive_through(world: World, cfg: SimConfig) -> tuple[OccupancyGrid, np.ndarray]:
    """The local grid after 3 m along the passage, and the mask of its cells inside the passage."""
    with Simulator(cfg) as sim:
        obs = sim.reset(world)
        for _ in range(60):
            obs = sim.step(0.5, 0.0)
    g = obs.local_grid
    ox, oy, _ = g.origin
    rows, cols = np.mgrid[0 : g.shape[0], 0 : g.shape[1]]
    x, y = ox + (cols + 0.5) * RES, oy + (rows + 0.5) * RES
    return g, (y > 1.75) & (y < 2.3) & (x > 1.2) & (x < 6.8)


def test_a_passage_keeps_its_width_under_range_noise():
    """Driving along a 0.55 m passage with noisy returns (sigma 0.01 m), no cell inside it is marked occupied: a
    return measured short must still land in the wall's cell (`LocalGridConfig.hit_depth_m`, 3 sigma). With the
    former quarter-cell nudge (~10 % of returns short enough) the walls grow into the passage."""
    world = _passage_world()
    occupied = {}
    for depth in (0.0125, LocalGridConfig().hit_depth_m):
        cfg = SimConfig(lidar=LidarConfig(noise_std_m=0.01), local_grid=LocalGridConfig(hit_depth_m=depth))
        g, passage = _drive_through(world, cfg)
        assert passage.sum() > 1000 and g.free_mask()[passage].mean() > 0.95
        occupied[depth] = int(g.occupied_mask()[passage].sum())
    assert occupied[LocalGridConfig().hit_depth_m] == 0
    assert occupied[0.0125] > 5  # the mechanism the default removes
    with pytest.raises(InputError, match="hit_depth_m"):
        LocalGridConfig(hit_depth_m=0.1)


def test_a_noisier_lidar_gets_a_grid_tuned_to_its_noise():
    """The Jackal's lidar (sigma 0.02 m, `LocalGridConfig.for_sensor`): its walls stay out of a 0.55 m passage, where
    the default grid (tuned to sigma 0.01 m) grows them in (issue 24: the Jackal stood in dense worlds)."""
    world = _passage_world()
    occupied = {}
    for name, grid_cfg in (("default", LocalGridConfig()), ("for_sensor", LocalGridConfig.for_sensor(6.0, RES, 0.02))):
        g, passage = _drive_through(world, SimConfig(lidar=LidarConfig(noise_std_m=0.02), local_grid=grid_cfg))
        occupied[name] = int(g.occupied_mask()[passage].sum())
    assert LocalGridConfig.for_sensor(6.0, RES, 0.01) == LocalGridConfig()
    assert occupied["for_sensor"] == 0 and occupied["default"] > 5, occupied
