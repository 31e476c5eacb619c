"""The peers' pieces (issue 30), in process: settings refused with the field named, the dynamic window, the critics,
the pruned path, and `--controller` refused where it does not fit before any work."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.errors import InputError
from mnemo_mpc.peers import make_controller
from mnemo_mpc.peers.base import reachable
from mnemo_mpc.peers.critics import CriticConfig, Scene, score
from mnemo_mpc.peers.dwa import DWAConfig
from mnemo_mpc.peers.local_path import pruned_path
from mnemo_mpc.planning.collision import FootprintChecker
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: DWAConfig(v_samples=1), "DWAConfig.v_samples"),
        (lambda: DWAConfig(heading_weight=float("nan")), "DWAConfig.heading_weight"),
        (lambda: DWAConfig(sim_time_s=-1.0), "DWAConfig.sim_time_s"),
        (lambda: CriticConfig(path_align_point_step=0), "CriticConfig.path_align_point_step"),
        (lambda: CriticConfig(goal_weight=-1.0), "CriticConfig.goal_weight"),
        (lambda: CriticConfig(path_align_max_occupancy=2.0), "CriticConfig.path_align_max_occupancy"),
        (lambda: make_controller("rpp", RobotModel(), None, None), "controller"),
    ],
)
def test_bad_settings_name_the_field(make, field):
    with pytest.raises(InputError, match=field):
        make()


def test_mppi_config_names_the_field():
    pytest.importorskip("pytorch_mppi")
    from mnemo_mpc.peers.mppi import MPPIConfig

    with pytest.raises(InputError, match="MPPIConfig.batch_size"):
        MPPIConfig(batch_size=1)
    with pytest.raises(InputError, match="MPPIConfig.temperature"):
        MPPIConfig(temperature=0.0)


def test_dynamic_window_is_the_reachable_velocities_inside_the_limits():
    robot = RobotModel(v_max=0.5, w_max=1.5, a_max=1.0, alpha_max=3.0)
    low, high = reachable(np.array([0.45, -1.4]), robot, 0.1)
    assert np.allclose(low, [0.35, -1.5]) and np.allclose(high, [0.5, -1.1])


def _scene(grid: OccupancyGrid, path: np.ndarray, goal=None) -> Scene:
    robot = RobotModel()
    return Scene(
        DistanceField(grid), FootprintChecker(robot, 0.1, 10), np.zeros(3), path, goal, robot.safety_margin, 0.1
    )


def test_obstacle_critic_charges_a_collision_and_prefers_room():
    data = np.zeros((60, 60), np.int8)
    data[:, 40:] = 100  # a wall from x = 0.5 m (grid origin at -1.5 m)
    grid = OccupancyGrid(data, 0.05, (-1.5, -1.5, 0.0))
    path = np.stack([np.linspace(0, 0.3, 7), np.zeros(7)], axis=-1)
    t = np.arange(1, 11)[None, :]
    into = np.stack([0.1 * t, 0 * t, 0 * t], axis=-1).astype(float)  # straight into the wall, to x = 1.0
    along = np.stack([0.0 * t, -0.05 * t, -np.pi / 2 + 0 * t], axis=-1).astype(float)  # away from it
    poses = np.concatenate([into, along])
    zero = np.zeros(poses.shape[:2] + (2,))
    s = score(CriticConfig(), _scene(grid, path), poses, zero, zero, enabled=("obstacles",))
    assert s.terms["obstacles"][0] >= CriticConfig().critical_weight * CriticConfig().collision_cost
    assert s.terms["obstacles"][1] < 100.0 and not s.all_collide


def test_goal_critic_only_near_the_goal():
    grid = OccupancyGrid(np.zeros((60, 60), np.int8), 0.05, (-1.5, -1.5, 0.0))
    t = np.arange(1, 11)[None, :]
    poses = np.stack([0.05 * t, 0 * t, 0 * t], axis=-1).astype(float)
    zero = np.zeros(poses.shape[:2] + (2,))
    near = _scene(grid, np.array([[0.0, 0.0], [1.0, 0.0]]), goal=np.array([1.0, 0.0, 0.0]))
    assert score(CriticConfig(), near, poses, zero, zero, enabled=("goal",)).terms["goal"][0] > 0
    far = _scene(grid, np.array([[0.0, 0.0], [2.0, 0.0]]), goal=np.array([2.0, 0.0, 0.0]))
    assert score(CriticConfig(), far, poses, zero, zero, enabled=("goal",)).terms["goal"][0] == 0


def test_pruned_path_starts_at_the_robot_and_is_cut_at_the_prune_distance():
    path = np.stack([np.linspace(0, 5, 11), np.zeros(11)], axis=-1)
    out = pruned_path(path, np.array([1.02, 0.3, 0.0]), np.array([5.0, 0.0, 0.0]), 0.0, 1.7, 0.05)
    assert np.allclose(out[0], [1.02, 0.0]) and np.allclose(out[-1], [2.72, 0.0])
    assert np.allclose(np.hypot(*np.diff(out, axis=0).T)[:-1], 0.05)
    to_goal = pruned_path(None, np.zeros(3), np.array([0.5, 0.0, 0.0]), 0.0, 1.7, 0.05)
    assert np.allclose(to_goal[-1], [0.5, 0.0])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["eval", "--worlds", "1", "--controller", "dwa", "--warmstart", "shift"], "--warmstart: the MPC's"),
        (["eval", "--worlds", "1", "--controller", "mppi,dwa", "--sqp-mode", "rti"], "--sqp-mode: the MPC's"),
        (["eval", "--worlds", "1", "--controller", "rpp"], "--controller"),
        (["eval", "--worlds", "1", "--controller", "dwa,dwa"], "each planner once"),
        (["demo", "--controller", "mpc,dwa"], "--controller: one planner here"),
    ],
)
def test_controller_flag_refused_before_any_work(tmp_path, capsys, argv, message):
    assert main([*argv, "--out", str(tmp_path / "o.json")]) == 2
    assert message in capsys.readouterr().err
