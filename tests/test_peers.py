"""The peers' pieces (issue 30), in process: settings refused with the field named, the dynamic window, the shared
safety check at a block corner, the critics, the pruned path, and `--controller` refused where it does not fit before
any work."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.cli import main
from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import ControllerConfig
from mnemo_mpc.peers import make_controller
from mnemo_mpc.peers.base import footprint_clearance, reachable
from mnemo_mpc.peers.critics import CriticConfig, Scene, score
from mnemo_mpc.peers.dwa import DWAConfig
from mnemo_mpc.peers.local_path import pruned_path
from mnemo_mpc.planning.collision import FootprintChecker
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import NavParams, build

JACKAL = Path(__file__).resolve().parents[1] / "config" / "robots" / "jackal.yaml"


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


def test_window_of_a_lagging_drive_holds_only_velocities_it_reaches():
    """On the Jackal's drive (lags 0.2 / 0.15 s) turning near its limit the window is narrower than the acceleration
    limits give, every velocity DWA samples is one the drive reaches (`Controller.as_driven` leaves it unchanged),
    and the safety check reads a proposal's first control as the drive reaches it."""
    params = NavParams.from_yaml(JACKAL)
    setup = build(params)
    ctrl = make_controller("dwa", setup.robot, setup.mpc, setup.controller_config)
    assert ctrl._actuation is not None
    velocity = np.array([0.42, -1.48])
    low, high = ctrl.window(velocity)
    acc_low, acc_high = reachable(velocity, setup.robot, setup.mpc.dt)
    assert low[1] > acc_low[1] + 0.04 and np.allclose(high, acc_high)
    for sample in ([low[0], low[1]], [high[0], low[1]], [low[0], high[1]], [high[0], high[1]]):
        assert np.allclose(ctrl.as_driven(np.array([sample]), velocity), [sample])
    unreachable = np.array([[0.5, acc_low[1]]])
    assert ctrl.as_driven(unreachable, velocity)[0, 1] > acc_low[1] + 0.04

    seen = []
    ctrl.trajectory_clearance = lambda field_, states, controls: seen.append(controls.copy()) or 1.0
    field_ = DistanceField(OccupancyGrid(np.zeros((80, 80), np.int8), 0.05, (0.0, 0.0, 0.0)))
    assert ctrl._plan_safe(field_, np.array([2.0, 2.0, 0.0]), unreachable, None, velocity=velocity)
    assert np.allclose(seen[-1][0], ctrl.as_driven(unreachable, velocity)[0])


def _scene(grid: OccupancyGrid, path: np.ndarray, goal=None) -> Scene:
    robot = RobotModel()
    return Scene(
        DistanceField(grid), FootprintChecker(robot, 0.1, 10), np.zeros(3), path, goal, robot.safety_margin, 0.1
    )


def _block_corner_grid() -> tuple[OccupancyGrid, np.ndarray]:
    """A 4 m x 4 m free grid (5 cm cells) with one 0.5 m block; returns it and the block's lower-left corner."""
    data = np.zeros((80, 80), np.int8)
    data[44:54, 40:50] = 100  # x 2.0-2.5 m, y 2.2-2.7 m
    return OccupancyGrid(data, 0.05, (0.0, 0.0, 0.0)), np.array([2.0, 2.2])


def _dense_1006_gap() -> OccupancyGrid:
    """Where DWA hit a block in dense-1006 (seed 1006 of the 20-world run): a 0.55 m gap between two blocks, the
    left one's corner at (6.70, 10.55), on the world's 5 cm grid (2 m around the gap's mouth)."""
    data = np.zeros((40, 40), np.int8)  # origin (6.0, 9.8): cell (row, col) covers y 9.8 + 0.05 row, x 6.0 + 0.05 col
    data[:15, :14] = 100  # the left block: x < 6.70, y < 10.55
    data[:15, 25:] = 100  # the right block: x >= 7.25
    return OccupancyGrid(data, 0.05, (6.0, 9.8, 0.0))


@pytest.mark.parametrize(
    "pose, velocity",
    [
        ([6.8935, 10.6885, -1.4869], [0.32, -0.06]),  # step 14: 3.8 cm from the corner (exact), the band's edge
        ([6.8957, 10.6365, -1.5619], [0.14, -0.15]),  # step 17: 1.4 cm
    ],
)
def test_safety_check_never_admits_a_stop_nearer_a_block_corner(pose, velocity):
    """Entering a gap past a block's corner, inside the margin band, every command the shared check admits stops
    (one period on it, then braking) no nearer the block than the robot is now, or than `MPCConfig.band_margin_m`
    when it is further (the MPC's band rule), on the exact distance to the cells: the bilinear field reads up to
    1.1 cm more there. Within 0.5 mm, what the check's 10 points a period can miss between them on an arc sampled at
    50. Broken once (`Controller._plan_safe`'s bilinear clearance against the exact margin less 1 mm): at step 14 it
    admitted DWA's (0.22, -0.36), whose stop comes to 2.1 cm of the corner, and the robot crept on into the block
    (docs/peers.md)."""
    peer = make_controller("dwa", RobotModel(), MPCConfig(N=30, dt=0.1), ControllerConfig(plan_own_path=False))
    field = DistanceField(_dense_1006_gap(), "occupied")
    pose, velocity, r, dt = np.array(pose), np.array(velocity), peer.robot.radius, peer.mpc_config.dt
    now = float(field.exact_distance(pose[None, :2])[0]) - r
    assert float(field.distance(pose[None, :2])[0]) - r > now + 0.008  # where the bilinear field reads more
    low, high = reachable(velocity, peer.robot, dt)
    for v in np.linspace(low[0], high[0], 11):
        for w in np.linspace(low[1], high[1], 21):
            command = np.array([v, w])
            if not peer._plan_safe(field, pose, command[None], None):
                continue
            controls = np.concatenate([command[None], peer.braking_tail(command)])
            states = peer.robot.rollout(pose, controls, dt)
            pts = peer.robot.densify(states, controls, dt, 50)
            nearest = float(np.min(field.exact_distance(pts))) - r
            assert nearest >= min(now, peer.mpc_config.band_margin_m) - 5e-4, (command, nearest, now)
    # Moving at the corner, the robot is past saving; nothing is admitted then (the fallback stops it). At rest there,
    # staying and turning in place (a round robot) are admitted: the check does not refuse everything.
    for command in ([0.0, 0.0], [0.0, 0.3], [0.0, -0.3]):
        assert peer._plan_safe(field, pose, np.array([command]), None), command


def test_footprint_clearance_is_the_stricter_of_the_exact_distance_and_the_buffered_field():
    peer = make_controller("dwa", RobotModel(), MPCConfig(N=30, dt=0.1), ControllerConfig(plan_own_path=False))
    grid, corner = _block_corner_grid()
    field = DistanceField(grid, "occupied")
    mpc, r, buffer = peer.mpc(grid.shape), peer.robot.radius, peer.mpc_config.clearance_buffer
    beside_wall = np.array([2.25, 2.2 - r - 0.04, 0.0])  # below the block's face: the field is exact there
    diagonal = np.array([*(corner - np.array([1.0, 1.0]) / np.sqrt(2.0) * (r + 0.04)), 0.0])
    got = footprint_clearance(mpc, field, np.stack([beside_wall, diagonal]))
    assert got[0] == pytest.approx(0.04 - buffer, abs=2e-3)  # the MPC's buffer where the field is right
    assert got[1] == pytest.approx(0.04, abs=1e-9)  # the exact distance where the field reads more


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


def test_local_planner_parameter_builds_the_peer_for_the_node_and_the_commands(tmp_path):
    """`local_planner` (node parameter) picks the planner the node's adapter runs and the planner `eval` / `demo`
    run without --controller; a wrong name is refused naming the parameter."""
    import argparse

    from mnemo_mpc.commands._args import check_controller
    from mnemo_mpc.peers.dwa import DWAController

    params = NavParams(local_planner="dwa")
    assert isinstance(params.controller(), DWAController)  # what the node's adapter runs (`NavAdapter.__init__`)
    assert type(NavParams().controller()).__name__ == "Controller"
    assert check_controller(argparse.Namespace(controller=None), params) == ("dwa",)
    assert check_controller(argparse.Namespace(controller=("mpc",)), params) == ("mpc",)
    assert check_controller(argparse.Namespace(controller=None), None) == ("mpc",)
    with pytest.raises(InputError, match="local_planner"):
        NavParams(local_planner="rpp")


def test_path_progress_is_the_arc_length_at_the_point_nearest_the_horizon_end():
    from mnemo_mpc.sim.stalls import path_progress

    path = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [1.0, 2.0]])
    assert path_progress(path, np.array([[0.0, 0.0, 0.0], [0.9, 0.1, 0.0]])) == pytest.approx(1.0)
    assert path_progress(path, np.array([[1.1, 1.9, 0.0]])) == pytest.approx(3.0)
    assert path_progress(path, np.zeros((1, 3))) == 0.0
    with pytest.raises(InputError, match="path_progress.path"):
        path_progress(np.zeros(3), np.zeros((1, 3)))


def test_a_peer_proposes_at_the_steps_margin_and_a_blocked_start_starts_the_clock():
    """A peer stands in for the MPC's solve (`PeerController._solve`): it proposes at the margin the step chose, and a
    start in collision starts the controller's blocked clock (the recoveries after `blocked_recovery_s`)."""
    peer = make_controller("dwa", RobotModel(), MPCConfig(N=30, dt=0.1), ControllerConfig(plan_own_path=False))
    data = np.zeros((60, 60), np.int8)
    data[25:35, 25:35] = 100  # a 0.5 m block in the middle of a 3 m room
    grid = OccupancyGrid(data, 0.05)
    margins = []
    propose = peer.propose
    peer.propose = lambda context, margin: margins.append(margin) or propose(context, margin)
    out = peer.step(grid, [0.5, 0.5, 0.0], [0.0, 0.0], [2.5, 0.5, 0.0])
    assert out.status != "fallback_stop_blocked" and margins and all(isinstance(m, float) for m in margins)
    peer.reset()
    out = peer.step(grid, [1.5, 1.5, 0.0], [0.0, 0.0], [2.5, 0.5, 0.0])  # inside the block
    assert out.status == "fallback_stop_blocked" and peer._blocked_since is not None
