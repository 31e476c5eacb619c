"""A ROS map_server map (YAML + PGM) loads as a simulation world and is drivable; bad start/goal are clear errors."""

import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError, MapFormatError
from mnemo_mpc.planning.grid import OCCUPIED

pytest.importorskip("pybullet")


def _write_map(tmp_path, origin=(-1.0, -2.0, 0.0)):
    """An 8 m x 5 m hall at 0.05 m (160 x 100 px): 254 free, 0 wall, 205 unknown around it, as map_server writes."""
    h, w = 100, 160
    img = np.full((h, w), 205, dtype=np.uint8)  # unknown
    img[10:90, 10:150] = 254  # free interior
    img[10:13, 10:150] = img[87:90, 10:150] = 0  # walls (image rows: row 0 is the top, +y)
    img[10:90, 10:13] = img[10:90, 147:150] = 0
    img[30:90, 78:82] = 0  # an inner wall from the top, leaving a 1 m gap at the bottom
    pgm = tmp_path / "hall.pgm"
    pgm.write_bytes(b"P5\n%d %d\n255\n" % (w, h) + img.tobytes())
    yaml = tmp_path / "hall.yaml"
    yaml.write_text(
        f"image: hall.pgm\nresolution: 0.05\norigin: [{origin[0]}, {origin[1]}, {origin[2]}]\n"
        "negate: 0\noccupied_thresh: 0.65\nfree_thresh: 0.196\n"
    )
    return yaml


def test_map_server_map_loads_as_world_and_drives(tmp_path):
    from mnemo_mpc.sim import Simulator
    from mnemo_mpc.sim.world import load_map_world

    yaml = _write_map(tmp_path)
    # Map frame: x = -1 + 0.05 * col, y = -2 + 0.05 * (99 - image row). Left room centre ~ (1.2, 0.5).
    world = load_map_world(yaml, [1.0, 0.5, 0.0], [5.0, 0.5, 0.0])
    assert world.kind == "map"
    g = world.grid
    assert g.shape == (100, 160) and g.origin == pytest.approx((-1.0, -2.0, 0.0))
    assert set(np.unique(g.data)) <= {0, OCCUPIED}  # unknown became walls
    # The inner wall (image cols 78..81, rows 30..89) sits at x = 2.9 .. 3.1, y from -2 + 0.05*10 = -1.5 up to 1.5.
    assert g.occupied_mask()[g.world_to_cell(np.array([3.0, 0.5]))[0], g.world_to_cell(np.array([3.0, 0.5]))[1]]
    with Simulator() as sim:
        obs = sim.reset(world)
        assert not obs.collision
        # The lidar sees the inner wall 2 m ahead (its face at x = 2.9, robot at x = 1.0).
        ahead = np.argmin(np.abs(obs.scan.angles))
        assert obs.scan.hit[ahead] and obs.scan.ranges[ahead] == pytest.approx(1.9, abs=0.05)
        for _ in range(10):
            obs = sim.step(0.5, 0.0)
        assert obs.pose[0] == pytest.approx(1.5, abs=0.01) and not sim.collided


def test_map_world_rejects_blocked_start_and_cut_off_goal(tmp_path):
    from mnemo_mpc.sim.world import load_map_world

    yaml = _write_map(tmp_path)
    with pytest.raises(InfeasibleProblemError, match="start .* inside an obstacle"):
        load_map_world(yaml, [3.0, 0.5, 0.0], [5.0, 0.5, 0.0])  # on the inner wall
    with pytest.raises(InfeasibleProblemError, match="goal .* (outside|inside)"):
        load_map_world(yaml, [1.0, 0.5, 0.0], [50.0, 0.5, 0.0])
    with pytest.raises(MapFormatError):
        load_map_world(tmp_path / "missing.yaml", [1.0, 0.5, 0.0], [5.0, 0.5, 0.0])
