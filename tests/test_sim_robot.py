"""The simulated robot follows the unicycle model, and the physics engine reports wall collisions."""

import math

import numpy as np
import pytest

from mnemo_mpc.errors import InfeasibleProblemError, InputError, MnemoError
from mnemo_mpc.planning.grid import FREE, OCCUPIED, OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim import SimConfig, Simulator
from mnemo_mpc.sim.worlds import World, generate_world, world_from_grid

pytest.importorskip("pybullet")


def _empty_hall(size=10.0, res=0.05) -> World:
    n = int(round(size / res))
    data = np.full((n, n), FREE, dtype=np.int8)
    data[:3], data[-3:], data[:, :3], data[:, -3:] = OCCUPIED, OCCUPIED, OCCUPIED, OCCUPIED
    return world_from_grid(OccupancyGrid(data, res), [2.0, 5.0, 0.0], [8.0, 5.0, 0.0])


@pytest.fixture(scope="module")
def sim():
    s = Simulator()
    yield s
    s.close()


def test_follows_unicycle_model(sim):
    world = _empty_hall()
    obs = sim.reset(world)
    model = RobotModel()
    controls = np.array([[0.5, 0.0]] * 10 + [[0.4, 0.8]] * 15 + [[0.3, -1.2]] * 10 + [[0.0, 1.0]] * 5)
    expected = model.rollout(obs.pose, controls, 0.1)
    got = [obs.pose]
    for v, w in controls:
        obs = sim.step(v, w)
        got.append(obs.pose)
        # Measured velocity is the commanded one (motors track within a substep).
        assert obs.velocity == pytest.approx([v, w], abs=1e-3)
    got = np.array(got)
    assert np.abs(got[:, :2] - expected[:, :2]).max() < 0.01  # metres, after 4 s of driving
    yaw_err = (got[:, 2] - expected[:, 2] + math.pi) % (2 * math.pi) - math.pi
    assert np.abs(yaw_err).max() < 0.01
    assert obs.time_s == pytest.approx(4.0)
    assert obs.step == len(controls)
    assert not sim.collided


def test_wall_collision_detected_and_not_penetrated(sim):
    world = _empty_hall()
    obs = sim.reset(world, start=np.array([8.5, 5.0, 0.0]))  # facing the x = 9.85 wall, its face 1.35 m away
    assert not obs.collision and sim.clearance(2.0) > 0.9
    first = None
    for k in range(40):
        obs = sim.step(0.5, 0.0)
        if obs.collision and first is None:
            first = k
    assert first is not None and sim.collided
    # Contact when the chassis (radius 0.2) reaches the wall: 1.35 - 0.2 = 1.15 m at 0.5 m/s = 2.3 s, i.e. the
    # 23rd or 24th control step (k = 22 ends exactly at touching distance).
    assert 22 <= first <= 23
    # The wall stops the robot: it stays outside the wall by at most a contact tolerance.
    assert obs.pose[0] == pytest.approx(9.85 - 0.2, abs=0.02)
    assert sim.clearance() > -0.02
    # Backing off clears the contact flag for the step but the episode stays collided.
    obs = sim.step(-0.3, 0.0)
    obs = sim.step(-0.3, 0.0)
    assert not obs.collision and sim.collided


def test_generated_world_episode_runs_and_lidar_sees_walls(sim):
    world = generate_world(11, kind="corridor")
    obs = sim.reset(world)
    assert not obs.collision
    assert obs.scan.hit.all()  # closed maze, 5 m range: every beam returns
    assert obs.scan.ranges.min() > world.config.endpoint_clearance_m - 0.05


def test_start_inside_obstacle_and_bad_commands_raise():
    world = _empty_hall()
    with pytest.raises(InfeasibleProblemError, match="start .* inside an obstacle"):
        world_from_grid(world.grid, [0.05, 5.0, 0.0], [8.0, 5.0, 0.0])
    with Simulator() as s:
        with pytest.raises(MnemoError, match="reset"):
            s.step(0.1, 0.0)
        s.reset(world)
        with pytest.raises(InputError, match="finite"):
            s.step(float("nan"), 0.0)
        with pytest.raises(InputError, match="dt"):
            s.step(0.1, 0.0, dt=-1.0)
    with pytest.raises(InputError, match="physics_hz"):
        SimConfig(physics_hz=0.0)
