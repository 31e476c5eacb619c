"""The simulated robot's departures from the planner's model (issue 24 item 1): each effect alone, in the drive model
and in the PyBullet simulator, and the levels a profile gives."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.profile import NavParams
from mnemo_mpc.sim.lidar import LidarConfig, LidarScan
from mnemo_mpc.sim.local_grid import LocalGrid
from mnemo_mpc.sim.realism import Drive, Realism, realism_for
from mnemo_mpc.sim.simulator import SimConfig, Simulator
from mnemo_mpc.sim.worlds import World

H = 1.0 / 240.0


def _drive(**values) -> Drive:
    d = Drive(Realism(level="profile", **values), np.random.default_rng(0))
    d.reset(np.zeros(3))
    return d


def _run(d: Drive, seconds: float, t0: float = 0.0) -> list[np.ndarray]:
    out = []
    for i in range(int(round(seconds / H))):
        out.append(d.body_velocity(t0 + (i + 1) * H, H).copy())
    return out


def test_latency_holds_the_old_command_until_the_new_one_is_due():
    d = _drive(latency_s=0.1)
    d.send(0.5, 0.0, 0.0)
    v = np.array(_run(d, 0.2))[:, 0]
    assert np.all(v[: int(0.1 / H) - 1] == 0.0)  # nothing for the first 0.1 s
    assert np.all(v[int(0.1 / H) + 1 :] == 0.5)


def test_first_order_lag_reaches_63_percent_in_one_time_constant():
    d = _drive(lag_v_s=0.2, lag_w_s=0.1)
    d.send(1.0, 1.0, 0.0)
    v = np.array(_run(d, 0.2))
    assert v[-1, 0] == pytest.approx(1 - math.exp(-1), abs=1e-9)
    assert v[int(round(0.1 / H)) - 1, 1] == pytest.approx(1 - math.exp(-1), abs=1e-9)


def test_acceleration_saturation_bounds_the_rise():
    d = _drive(accel_v_max=2.0)
    d.send(1.0, 0.0, 0.0)
    v = np.array(_run(d, 0.25))[:, 0]
    assert np.max(np.diff(v)) <= 2.0 * H + 1e-12
    assert v[int(0.25 / H) - 1] == pytest.approx(0.5, abs=1e-9)


def test_slip_moves_the_body_less_than_the_wheels_and_the_odometry_does_not_see_it():
    d = _drive(slip_v=0.9, slip_w=0.8, localization_period_s=100.0)
    d.send(1.0, 0.5, 0.0)
    body = _run(d, 0.01)[-1]
    assert body == pytest.approx([0.9, 0.4])
    assert d.measured_velocity(body[1]) == pytest.approx([1.0, 0.4])  # wheels' speed, gyro's (true) yaw rate


def test_odometry_drifts_between_localiser_fixes_and_the_fix_maps_it_back():
    d = _drive(slip_v=0.9, localization_period_s=1.0)
    d.send(1.0, 0.0, 0.0)
    true = np.zeros(3)
    for i in range(int(round(0.99 / H))):
        body = d.body_velocity((i + 1) * H, H)
        true = true + np.array([body[0] * H, 0.0, 0.0])
        d.odometry(float(body[1]), H, (i + 1) * H, true)
    assert d.estimate[0] - true[0] == pytest.approx(0.1 * d.estimate[0], rel=0.02)  # 10 % of the distance
    assert np.all(d.map_from_odom == 0.0)  # no fix yet
    body = d.body_velocity(1.0, H)
    true = true + np.array([body[0] * H, 0.0, 0.0])
    d.odometry(float(body[1]), H, 1.0, true)  # the fix
    goal_in_odom = d.to_odom(np.array([true[0], 0.0, 0.0]))
    assert goal_in_odom[0] == pytest.approx(d.estimate[0], abs=1e-9)  # the truth, seen from the drifted odom


def test_levels_from_a_profile():
    params = NavParams.from_yaml("config/robots/jackal.yaml")
    assert realism_for(params, "ideal").is_ideal
    profile = realism_for(params, "profile")
    assert profile.lidar_fov_deg == 270 and profile.lag_v_s == 0.2 and not profile.is_ideal
    harsh = realism_for(params, "harsh")
    assert harsh.latency_s > profile.latency_s and harsh.slip_w < profile.slip_w
    assert harsh.lidar_dropout > profile.lidar_dropout
    assert realism_for(None, "profile").is_ideal  # the built-in robot states no dynamics
    with pytest.raises(InputError, match="--realism"):
        realism_for(params, "real")
    with pytest.raises(InputError, match="latency_s"):
        Realism(latency_s=-0.1)


def _open_world() -> World:
    data = np.zeros((200, 200), np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    grid = OccupancyGrid(data, 0.05, (-5.0, -5.0, 0.0))
    return World(grid=grid, start=np.zeros(3), goal=np.array([3.0, 0.0, 0.0]), seed=0, kind="open")


def test_simulator_ideal_realism_is_the_ideal_robot_and_lagging_one_follows_the_drive():
    world = _open_world()
    poses = {}
    for name, realism in (("ideal", Realism()), ("lag", Realism(level="profile", lag_v_s=0.2, latency_s=0.1))):
        with Simulator(SimConfig(realism=realism)) as sim:
            sim.reset(world)
            for _ in range(5):
                obs = sim.step(0.5, 0.0)
            poses[name] = obs.true_pose
            assert np.allclose(obs.pose, obs.true_pose) or name == "lag"
    assert poses["ideal"][0] == pytest.approx(0.25, abs=2e-3)
    # 0.1 s dead time, then the lag's response: x = 0.5 (t - tau (1 - exp(-t / tau))) over the remaining 0.4 s
    t, tau = 0.4, 0.2
    assert poses["lag"][0] == pytest.approx(0.5 * (t - tau * (1 - math.exp(-t / tau))), abs=3e-3)


def test_limited_field_of_view_and_dropouts():
    world = _open_world()
    realism = Realism(level="profile", lidar_fov_deg=270.0, lidar_beams=270, lidar_dropout=0.2)
    with Simulator(SimConfig(realism=realism)) as sim:
        obs = sim.reset(world)
        scan = obs.scan
        assert scan.angles.min() == pytest.approx(-math.radians(135)) and len(scan.angles) == 270
        lost = ~scan.valid
        assert 0.1 < lost.mean() < 0.3 and np.all(np.isnan(scan.ranges[lost])) and not np.any(scan.hit[lost])
        # behind the robot nothing is seen: the cells there stay unknown
        grid = obs.local_grid
        behind = grid.world_to_cell(np.array([-1.0, 0.0]))
        ahead = grid.world_to_cell(np.array([1.0, 0.0]))
        assert grid.data[behind[0], behind[1]] == -1 and grid.data[ahead[0], ahead[1]] >= 0


def test_a_lost_beam_clears_nothing():
    lg = LocalGrid()
    lg.reset(np.zeros(2))
    angles = np.array([0.0, 0.1])
    wall = LidarScan(angles, np.array([2.0, 2.0]), np.array([True, True]), np.zeros(3), 5.0)
    for _ in range(3):
        lg.update(wall)
    before = lg.occupancy_grid().data.copy()
    lost = LidarScan(angles, np.array([np.nan, np.nan]), np.zeros(2, bool), np.zeros(3), 5.0, np.zeros(2, bool))
    for _ in range(5):
        after = lg.update(lost).data
    assert np.array_equal(before, after)


def test_lidar_config_rejects_a_bad_dropout():
    with pytest.raises(InputError, match="dropout"):
        LidarConfig(dropout=1.0)
    with pytest.raises(InputError, match="lidar_fov_deg"):
        dataclasses.replace(Realism(), lidar_fov_deg=400.0)


def test_grid_error_is_how_much_nearer_the_local_grid_shows_the_walls():
    """`GridError`: the world's clearance at the true pose less the local grid's at the pose the robot knows. A robot
    that believes itself 5 cm nearer a wall than it is (its grid fused in that drifted frame) reads +0.05; one whose
    knowledge is exact, 0; 5 cm the other way, -0.05 (the unsafe side). Far from every obstacle nothing is sampled."""
    from types import SimpleNamespace

    from mnemo_mpc.sim.episode import GRID_ERROR_EVERY, GridError

    data = np.zeros((40, 40), np.int8)
    data[:4, :] = 100  # a wall along y in [0, 0.2)
    grid = OccupancyGrid(data, 0.05)
    err = GridError(SimpleNamespace(grid=grid))
    truth = np.array([1.0, 0.6, 0.0])
    for k, dy in enumerate((0.0, -0.05, 0.05)):
        obs = SimpleNamespace(local_grid=grid, pose=truth + np.array([0.0, dy, 0.0]))
        err.sample(k * GRID_ERROR_EVERY, obs, truth)
    err.sample(1, SimpleNamespace(local_grid=grid, pose=truth), truth)  # not a sampled step
    far = np.array([1.0, 1.9, 0.0])  # 1.7 m from the wall: nothing to decide there
    err.sample(4 * GRID_ERROR_EVERY, SimpleNamespace(local_grid=grid, pose=far), far)
    unseen = np.full_like(data, -1)  # a grid that has not seen the wall: nothing to compare
    err.sample(5 * GRID_ERROR_EVERY, SimpleNamespace(local_grid=OccupancyGrid(unseen, 0.05), pose=truth), truth)
    assert err.errors == pytest.approx([0.0, 0.05, -0.05], abs=1e-9)
