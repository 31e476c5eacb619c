"""Moving obstacles in the simulator: they move as their World says, the lidar and the local grid see them, a
collision gets its cause (robot drove into it / obstacle ran into the robot), and episodes and `eval` report time
ratio, minimum clearance and collisions by cause."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mnemo_mpc.planning.grid import OCCUPIED, OccupancyGrid
from mnemo_mpc.sim.worlds import MovingObstacle, World, WorldConfig, generate_world

pytest.importorskip("pybullet")


def room(moving: tuple[MovingObstacle, ...], start=(1.0, 2.0, 0.0), goal=(5.0, 2.0, 0.0)) -> World:
    """An empty 6 m x 4 m room."""
    data = np.zeros((80, 120), dtype=np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = OCCUPIED
    return World(OccupancyGrid(data, 0.05), np.array(start), np.array(goal), seed=3, kind="test", moving=moving)


@pytest.fixture(scope="module")
def sim():
    from mnemo_mpc.sim.simulator import Simulator

    with Simulator() as s:
        yield s


def _body_xy(sim, body: int) -> np.ndarray:
    import pybullet as p

    return np.asarray(p.getBasePositionAndOrientation(body, physicsClientId=sim.client)[0][:2])


def test_obstacles_follow_their_motion_and_the_lidar_grid_sees_them(sim):
    ob = MovingObstacle("box", (0.25, 0.25), (3.0, 1.0), (3.0, 3.0), speed=0.4)
    obs = sim.reset(room((ob,), start=(2.0, 2.0, 0.0)))
    assert len(sim.moving_bodies) == 1
    for _ in range(25):  # 2.5 s at 0.4 m/s: from y = 1 to the robot's line y = 2
        obs = sim.step(0.0, 0.0)
    np.testing.assert_allclose(_body_xy(sim, sim.moving_bodies[0]), ob.position(obs.time_s), atol=1e-9)
    # The beam straight ahead (yaw 0) ends on the box's near face, 3.0 - 0.25 - 2.0 m away.
    i = int(np.argmin(np.abs(np.angle(np.exp(1j * obs.scan.angles)))))
    y_now = ob.position(obs.time_s)[1]
    assert abs(y_now - 2.0) < 0.05 and obs.scan.hit[i]
    assert obs.scan.ranges[i] == pytest.approx(0.75, abs=0.05)
    # The fused local grid marks the box where it is now.
    g = obs.local_grid
    occ = g.occupied_mask()
    assert occ[tuple(g.world_to_cell(np.array([2.8, y_now])))]
    assert not occ[tuple(g.world_to_cell(np.array([2.4, y_now])))]  # and the free space in front of it as free
    # The engine's clearance query counts the moving box too (the walls are 1.7 m from the chassis).
    assert sim.clearance(3.0) == pytest.approx(0.75 - 0.2, abs=0.01)


def test_same_world_same_motion_and_scans():
    from mnemo_mpc.sim.simulator import Simulator

    world = generate_world(1001, WorldConfig(moving_obstacles=3), kind="clutter")
    runs = []
    for _ in range(2):
        with Simulator() as s:
            s.reset(world)
            for _ in range(15):
                obs = s.step(0.0, 0.3)
            runs.append(([_body_xy(s, b) for b in s.moving_bodies], obs.scan.ranges.copy()))
    np.testing.assert_allclose(runs[0][0], runs[1][0])
    np.testing.assert_array_equal(runs[0][1], runs[1][1])


def test_driving_into_an_obstacle_is_the_robots_fault(sim):
    slow = MovingObstacle("cylinder", (0.2, 0.2), (2.5, 2.0), (2.5, 3.0), speed=0.05)  # drifting aside slowly
    obs = sim.reset(room((slow,)))
    for _ in range(40):
        obs = sim.step(0.5, 0.0)
        if obs.collision:
            break
    assert obs.collision and obs.collision_cause == "robot"
    assert sim.collision_causes["robot"] == 1 and sim.collided


def test_standing_still_and_getting_hit_is_not(sim):
    ram = MovingObstacle("box", (0.2, 0.2), (3.0, 2.0), (1.0, 2.0), speed=0.5)  # comes straight at the robot
    obs = sim.reset(room((ram,)))
    for _ in range(60):
        obs = sim.step(0.0, 0.0)
        if obs.collision:
            break
    assert obs.collision and obs.collision_cause == "obstacle"
    assert sim.collision_causes == {"robot": 0, "obstacle": 1}
    # Backing off is impossible (v_min = 0); turning away while it closes in is not driving into it either.
    obs = sim.reset(room((MovingObstacle("box", (0.2, 0.2), (3.0, 2.0), (1.0, 2.0), speed=0.5),)))
    for _ in range(60):
        obs = sim.step(0.0, 1.0)
        if obs.collision:
            break
    assert obs.collision_cause == "obstacle"


def test_a_wall_is_always_the_robots_fault(sim):
    obs = sim.reset(room((), start=(5.5, 2.0, 0.0)))
    for _ in range(20):
        obs = sim.step(0.5, 0.0)
        if obs.collision:
            break
    assert obs.collision and obs.collision_cause == "robot"


def test_episode_metrics_time_ratio_clearance_and_cause(sim):
    from mnemo_mpc.nav.controller import Controller
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode

    controller = Controller()
    world = room((), start=(2.0, 2.0, 0.0), goal=(3.5, 2.0, 0.0))
    res = run_episode(world, sim=sim, controller=controller, config=EpisodeConfig())
    m = res.metrics
    assert m["success"], m
    assert m["time_ratio"] == pytest.approx(m["time_s"] / (m["global_path_length_m"] / controller.robot.v_max), 1e-3)
    assert m["time_ratio"] >= 1.0  # nothing beats the top speed along the global path
    # The walls are 1.9 m from the robot's centre at the start (x = 2, y = 2); the chassis' 0.2 m radius leaves
    # 1.7 m there, and a few centimetres of sideways drift on the way is all that can take off.
    assert 1.6 < m["min_clearance_m"] <= 1.7 + 1e-3
    assert m["collision_cause"] is None and m["collisions_robot_caused"] == m["collisions_obstacle_caused"] == 0
    ram = MovingObstacle("box", (0.3, 0.3), (3.2, 3.4), (3.2, 0.6), speed=0.4)  # sweeps across the route
    world = room((ram,), start=(2.0, 2.0, 0.0), goal=(4.5, 2.0, 0.0))
    res = run_episode(world, sim=sim, controller=controller, config=EpisodeConfig())
    m = res.metrics
    assert m["moving_obstacles"] == 1 and m["min_clearance_m"] < 1.0
    if m["collision"]:
        assert m["collision_cause"] in ("robot", "obstacle")
        assert m["collisions_robot_caused"] + m["collisions_obstacle_caused"] == 1


def test_eval_reports_the_new_columns(tmp_path, capsys):
    from mnemo_mpc.cli import main
    from mnemo_mpc.commands._args import WORLD_KINDS
    from mnemo_mpc.sim.worlds import ALL_KINDS

    assert WORLD_KINDS == ALL_KINDS
    out = tmp_path / "e.json"
    argv = ["eval", "--worlds", "2", "--seed", "1000", "--world-kinds", "any,dense", "--moving-obstacles", "2"]
    assert main([*argv, "--time-limit", "0.5", "--warmstart", "shift", "--out", str(out), "--no-progress"]) == 0
    d = json.loads(out.read_text())
    assert [e["kind"] for e in d["episodes"]][1] == "dense"
    assert d["episodes"][0]["kind"] == generate_world(1000).kind
    assert d["source"]["world_kinds"] == ["any", "dense"] and d["source"]["moving_obstacles"] == 2
    for e in d["episodes"]:
        assert e["moving_obstacles"] == 2
        assert e["min_clearance_m"] is not None and math.isfinite(e["min_clearance_m"])
        assert "time_ratio" in e and "collision_cause" in e
    for key in ("robot_caused_collision_rate", "obstacle_caused_collision_rate", "time_ratio", "min_clearance_m"):
        assert key in d
    assert d["min_clearance_min_m"] == min(e["min_clearance_m"] for e in d["episodes"])
    assert "collisions caused by the robot" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--worlds", "1", "--world-kinds", "castle"], "--world-kinds"),
        (["--worlds", "1", "--moving-obstacles", "-2"], "--moving-obstacles"),
        (["--worlds", "1", "--moving-kind", "herd"], "--moving-kind"),
        (["--map", "m.yaml", "--start", "0,0,0", "--goal", "1,0,0", "--moving-kind", "crossing"], "--moving-kind"),
    ],
)
def test_eval_rejects_bad_world_flags(tmp_path, capsys, argv, message):
    from mnemo_mpc.cli import main

    assert main(["eval", *argv, "--out", str(tmp_path / "o.json")]) == 2
    assert message in capsys.readouterr().err
