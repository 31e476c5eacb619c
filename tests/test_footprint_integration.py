"""The robot profile's footprint outside the controller (issue 10 items 1-2): `--params` on demo / eval / collect,
the global path and world validation for a footprint, the simulator's body, contacts and clearance, and the plots."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.errors import InfeasibleProblemError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.global_path import (
    footprint_path_clearance,
    inflation_radius,
    plan_global_path,
    robot_width,
)
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import NavParams
from mnemo_mpc.sim.worlds import WorldConfig, generate_world, world_from_grid

ROOT = Path(__file__).resolve().parents[1]
JACKAL_YAML = ROOT / "config" / "robots" / "jackal.yaml"
JACKAL = NavParams.from_yaml(JACKAL_YAML).robot_model()

# Global paths of the default robot on seeds 1000-1019, computed with the planner before footprints reached it (the
# disc inflation of radius + margin): (seed, points, length m, sum of x, sum of y). A disc robot's path must not move.
DEFAULT_PATHS = [
    (1000, 245, 12.162237, 1586.375, 1292.375),
    (1001, 196, 9.733792, 916.5451, 1262.9724),
    (1002, 124, 6.131715, 864.0119, 731.7087),
    (1003, 237, 11.783929, 763.2229, 1598.189),
    (1004, 283, 14.049303, 1609.6344, 1662.8064),
    (1005, 235, 11.674749, 1441.5839, 1362.7111),
    (1006, 102, 5.020588, 644.4347, 1116.4141),
    (1007, 301, 14.971785, 1461.9321, 1350.0978),
    (1008, 143, 7.08661, 1011.762, 963.1272),
    (1009, 221, 10.991026, 2095.5656, 1064.373),
    (1010, 305, 15.151948, 1974.6245, 1921.1862),
    (1011, 138, 6.79823, 726.8092, 516.4707),
    (1012, 153, 7.579134, 453.4613, 1216.205),
    (1013, 116, 5.725373, 772.7611, 515.2282),
    (1014, 218, 10.803624, 1470.7592, 1859.9273),
    (1015, 133, 6.553471, 612.7785, 835.3346),
    (1016, 213, 10.551788, 1232.2401, 1991.251),
    (1017, 177, 8.765379, 1035.2127, 1406.3539),
    (1018, 205, 10.175604, 774.8607, 1263.0153),
    (1019, 146, 7.20853, 815.2253, 994.0606),
]


def gap_grid(gap_m: float, size=(7.0, 4.0), wall_x: float = 3.5, res: float = 0.05) -> OccupancyGrid:
    """A closed room with a 0.15 m wall across it at x = wall_x, holding one gap of `gap_m` centred on the room."""
    h, w = int(round(size[1] / res)), int(round(size[0] / res))
    data = np.zeros((h, w), np.int8)
    data[:3, :] = data[-3:, :] = data[:, :3] = data[:, -3:] = 100
    c0 = int(round(wall_x / res))
    data[:, c0 : c0 + 3] = 100
    cells = int(round(gap_m / res))
    r0 = (h - cells) // 2
    data[r0 : r0 + cells, c0 : c0 + 3] = 0
    return OccupancyGrid(data, res)


def crosses_wall(path: np.ndarray, wall_x: float = 3.5) -> bool:
    return bool(path[:, 0].min() < wall_x < path[:, 0].max())


# --- defaults unchanged -----------------------------------------------------------------------------------------------
def test_default_robot_global_paths_unchanged_on_seeds_1000_to_1019():
    robot = RobotModel()
    for seed, n, length, sx, sy in DEFAULT_PATHS:
        w = generate_world(seed)
        path = plan_global_path(w.grid, w.start[:2], w.goal[:2], robot)
        got = (len(path), float(np.sum(np.hypot(*np.diff(path, axis=0).T))), path[:, 0].sum(), path[:, 1].sum())
        assert got[0] == n, seed
        assert got[1:] == pytest.approx((length, sx, sy), abs=1e-4), seed


def test_default_profile_is_todays_defaults():
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import SimConfig

    assert WorldConfig.for_robot(RobotModel()) == WorldConfig()
    assert SimConfig.for_robot(RobotModel()) == SimConfig()
    setup = closed_loop_setup()
    # The closed loop on a lidar grid tolerates half a cell of apparent start penetration (MPCConfig docs).
    mpc = dataclasses.replace(MPCConfig(), start_tolerance_m=0.025)
    assert (setup.robot, setup.mpc, setup.sim, setup.world) == (RobotModel(), mpc, SimConfig(), WorldConfig())
    real_time = closed_loop_setup(real_time=True).mpc
    assert real_time.fallback is None and real_time.max_time_s == pytest.approx(0.3 * real_time.dt)
    assert inflation_radius(RobotModel()) == RobotModel().radius


def test_jackal_profile_reaches_every_part():
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.robot import diff_drive_config

    params = NavParams.from_yaml(JACKAL_YAML)
    setup = closed_loop_setup(params.robot_model(), sensor_range_m=params.sensor_range_m)
    assert setup.robot == JACKAL
    assert setup.sim.robot == diff_drive_config(JACKAL)
    assert setup.sim.lidar.range_max_m == params.sensor_range_m
    # The control period is the MPC step, held for a whole number of physics substeps of at least 240 Hz.
    assert setup.sim.control_dt == setup.mpc.dt < 0.1
    substeps = setup.sim.control_dt * setup.sim.physics_hz
    assert substeps == pytest.approx(round(substeps), abs=1e-9) and setup.sim.physics_hz >= 240.0
    # The generator inflates by half the box's width (0.43 m), not its 0.333 m circumscribed radius.
    assert setup.world.robot_radius_m == pytest.approx(0.215)
    assert setup.world.robot_width_m == pytest.approx(0.43)
    assert setup.world.endpoint_clearance_m > JACKAL.radius + JACKAL.safety_margin  # room to turn at the ends


def test_robot_width_is_across_the_direction_of_travel():
    # A TurtleBot3 Burger-like base is wider (y) than long (x): a diff drive passes gaps with its width.
    wide = RobotModel.from_footprint(Footprint.rectangle(0.14, 0.18, x_offset=-0.03))
    assert robot_width(wide) == pytest.approx(0.18)
    assert inflation_radius(wide) == pytest.approx(0.09)


# --- narrow gap: the box passes where its circumscribed circle does not --------------------------------------------
def test_rectangle_global_path_passes_a_gap_its_circumscribed_circle_does_not():
    grid = gap_grid(0.70)
    start, goal = np.array([1.5, 2.0]), np.array([5.5, 2.0])
    disc = RobotModel(radius=JACKAL.radius, safety_margin=JACKAL.safety_margin)
    assert 2 * disc.clearance > 0.70  # the circumscribed circle (+ margin) does not fit
    with pytest.raises(InfeasibleProblemError, match="no collision-free path"):
        plan_global_path(grid, start, goal, disc)
    path = plan_global_path(grid, start, goal, JACKAL)
    assert crosses_wall(path)
    fit = footprint_path_clearance(DistanceField(grid), path, JACKAL)
    assert fit.min() > 0.0  # the box, oriented along the path, clears the gap's sides everywhere
    # World validation uses the same inflation: the gap joins start and goal for the box robot.
    cfg = WorldConfig.for_robot(JACKAL)
    world_from_grid(grid, np.r_[start, 0.0], np.r_[goal, 0.0], robot_radius_m=cfg.robot_radius_m,
                    safety_margin_m=cfg.safety_margin_m)  # fmt: skip
    with pytest.raises(InfeasibleProblemError):
        world_from_grid(grid, np.r_[start, 0.0], np.r_[goal, 0.0], robot_radius_m=disc.radius)


def test_path_where_the_oriented_footprint_cannot_turn_is_reported(caplog):
    # A 0.5 m wide L-shaped corridor: a 0.9 x 0.3 m body's centre fits (inflation 0.15 + 0.05 m) but the body cannot
    # turn the corner (a right-angle turn of width a fits at most 2 (a sqrt 2 - w) = 0.81 m of length).
    res = 0.05
    data = np.full((80, 80), 100, np.int8)
    data[10:20, 10:70] = 0  # along x, y in [0.5, 1.0]
    data[10:70, 60:70] = 0  # along y, x in [3.0, 3.5]
    grid = OccupancyGrid(data, res)
    long_robot = RobotModel.from_footprint(Footprint.rectangle(0.9, 0.3), safety_margin=0.05)
    with caplog.at_level(logging.WARNING, logger="mnemo_mpc.planning.global_path"):
        path = plan_global_path(grid, np.array([1.0, 0.75]), np.array([3.25, 3.0]), long_robot)
    assert footprint_path_clearance(DistanceField(grid), path, long_robot).min() < 0.0
    assert any("footprint oriented along the path overlaps" in r.getMessage() for r in caplog.records)


# --- simulator: the profile's chassis collides and measures clearance --------------------------------------------
@pytest.fixture(scope="module")
def jackal_sim():
    pytest.importorskip("pybullet")
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import Simulator

    with Simulator(closed_loop_setup(JACKAL).sim) as sim:
        yield sim


def test_simulator_builds_the_profiles_chassis(jackal_sim):
    from mnemo_mpc.sim.robot import urdf_footprint

    assert urdf_footprint(jackal_sim.urdf_path) == JACKAL.shape


@pytest.mark.parametrize("yaw", [0.0, 0.4, -1.1])
def test_simulator_clearance_is_the_footprint_polygons_distance(jackal_sim, yaw):
    grid = gap_grid(0.70)  # the wall's face nearest the robot is x = 3.5 (no gap near y = 1.0)
    pose = np.array([2.9, 1.0, yaw])
    world = world_from_grid(grid, pose, np.array([5.5, 2.0, 0.0]), robot_radius_m=0.215)
    jackal_sim.reset(world, pose)
    face = np.stack([np.full(400, 3.5), np.linspace(0.15, 1.6, 400)], axis=1)  # wall face points near the robot
    expected = float(JACKAL.shape.world_signed_distance(pose, face).min())
    assert jackal_sim.clearance(2.0) == pytest.approx(expected, abs=2e-3)


def test_collision_is_the_box_not_its_circumscribed_circle(jackal_sim):
    grid = gap_grid(0.70)
    goal = np.array([5.5, 2.0, 0.0])
    # Front face 0.046 m from the wall: the circumscribed circle would overlap it, the box does not.
    pose = np.array([3.5 - 0.30, 1.0, 0.0])
    assert JACKAL.radius > 0.30
    world = world_from_grid(grid, pose, goal, robot_radius_m=0.1, safety_margin_m=0.0)
    assert not jackal_sim.reset(world, pose).collision
    # Turned 45 degrees in the same place, a corner reaches past the wall's face: a contact.
    turned = np.array([3.5 - 0.30, 1.0, math.pi / 4])
    assert JACKAL.shape.outline(turned)[:, 0].max() > 3.5
    assert jackal_sim.reset(world, turned).collision


def test_jackal_closed_loop_passes_the_narrow_gap(jackal_sim):
    from mnemo_mpc.nav.controller import Controller
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
    from mnemo_mpc.sim.profile import closed_loop_setup

    setup = closed_loop_setup(JACKAL)
    cfg = setup.world
    world = world_from_grid(gap_grid(0.70), np.array([1.5, 2.0, 0.0]), np.array([5.5, 2.0, 0.0]),
                            robot_radius_m=cfg.robot_radius_m, safety_margin_m=cfg.safety_margin_m)  # fmt: skip
    controller = Controller(setup.robot, setup.mpc)
    res = run_episode(world, sim=jackal_sim, controller=controller, config=EpisodeConfig(time_limit_s=15.0))
    m = res.metrics
    assert m["outcome"] == "success", m
    assert not m["collision"] and m["min_clearance_m"] > 0.0
    assert crosses_wall(res.driven[:, :2])


def test_episode_refuses_a_simulator_of_another_body():
    pytest.importorskip("pybullet")
    from mnemo_mpc.errors import InputError
    from mnemo_mpc.nav.controller import Controller
    from mnemo_mpc.sim.episode import run_episode
    from mnemo_mpc.sim.simulator import Simulator

    world = world_from_grid(gap_grid(0.70), np.array([1.5, 2.0, 0.0]), np.array([5.5, 2.0, 0.0]), robot_radius_m=0.2)
    with Simulator() as sim, pytest.raises(InputError, match="SimConfig.for_robot"):
        run_episode(world, sim=sim, controller=Controller(JACKAL))


# --- commands ------------------------------------------------------------------------------------------------------
def test_demo_with_the_jackal_profile_drives_an_open_world(tmp_path, capsys):
    pytest.importorskip("pybullet")
    out = tmp_path / "demo"
    rc = main(["demo", "--seed", "7", "--kind", "open", "--params", str(JACKAL_YAML), "--out", str(out), "--quiet"])
    payload = json.loads((out / "episode.json").read_text())
    m = payload["metrics"]
    assert rc == 0 and m["success"] and not m["collision"], m
    assert RobotModel(**payload["config"]["robot"]) == JACKAL
    assert [tuple(v) for v in payload["config"]["sim"]["robot"]["footprint"]] == list(JACKAL.footprint)
    assert payload["config"]["mpc"]["dt"] < 0.1  # sized for 2 m/s
    assert (out / "trajectory.png").stat().st_size > 0
    # the starts of the solves only, as `eval` counts them: a step that did not plan (the rotation shim) has none
    solves = [s for s in payload["steps"] if s["status"] == "planned" or s["iterations"]]
    assert sum(payload["starts_used"].values()) == len(solves) < len(payload["steps"]), payload["starts_used"]


@pytest.mark.parametrize("command", ["demo", "eval", "collect"])
@pytest.mark.parametrize("problem", ["missing", "bad_footprint", "not_yaml"])
def test_params_errors_are_one_line_exit_2(tmp_path, capsys, command, problem):
    params = tmp_path / "robot.yaml"
    if problem == "bad_footprint":  # the rotation centre lies outside the polygon
        params.write_text("/**:\n  ros__parameters:\n    footprint: '[[1.0, 1.0], [2.0, 1.0], [2.0, 2.0]]'\n")
    elif problem == "not_yaml":
        params.write_text("/**: [unclosed\n")
    out = tmp_path / "out"
    argv = {
        "demo": ["demo", "--out", str(out)],
        "eval": ["eval", "--worlds", "1", "--out", str(out / "e.json")],
        "collect": ["collect", "--worlds", "1", "--out", str(out)],
    }[command] + ["--params", str(params)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--params" in err, err
    assert {"missing": "not found", "bad_footprint": "footprint", "not_yaml": "robot.yaml"}[problem] in err
    assert not out.exists()  # nothing written before the error
