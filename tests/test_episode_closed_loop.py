"""Closed loop in the PyBullet simulator: a short episode, timeouts, bad worlds, recording and the plot."""

from __future__ import annotations

import numpy as np
import pytest

from mnemo_mpc.dataset.recorder import ExpertRecorder
from mnemo_mpc.errors import InfeasibleProblemError
from mnemo_mpc.nav.controller import Controller
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
from mnemo_mpc.sim.worlds import World, world_from_grid

pytest.importorskip("pybullet")


def small_world() -> World:
    """A 4 m x 3 m room with a pillar; start and goal 2.6 m apart on either side of it."""
    data = np.zeros((60, 80), np.int8)
    data[:3, :] = data[-3:, :] = data[:, :3] = data[:, -3:] = 100
    data[22:38, 36:44] = 100
    grid = OccupancyGrid(data, 0.05)
    return world_from_grid(grid, np.array([0.7, 1.5, 0.0]), np.array([3.3, 1.5, 0.0]), kind="test", seed=1)


@pytest.fixture(scope="module")
def sim():
    from mnemo_mpc.sim.simulator import Simulator

    with Simulator() as s:
        yield s


@pytest.fixture(scope="module")
def controller():
    return Controller()


def test_episode_reaches_goal_without_collision(sim, controller, tmp_path):
    world = small_world()
    res = run_episode(
        world, sim=sim, controller=controller, config=EpisodeConfig(keep_plan_every=5), observer=ExpertRecorder()
    )
    m = res.metrics
    assert m["success"] and not m["collision"] and not m["timeout"], m
    assert m["collision_context"] is None
    assert m["grid_error_m"]["p50"] == 0.0  # the ideal robot's grid is the map at the true pose
    assert m["field_error_m"]["p50"] == pytest.approx(0.0, abs=1e-6)  # and the MPC's field is its cells
    assert m["final_dist_to_goal_m"] <= 0.25
    assert m["path_length_m"] >= 2.6 - 0.3
    assert m["steps"] == len(res.steps) == res.record["pose"].shape[0]
    assert res.driven.shape == (m["steps"] + 1, 3)
    for s in res.steps:
        assert np.all(np.isfinite(s["command"]))
        assert -1e-9 <= s["command"][0] <= controller.robot.v_max + 1e-4
    rec = res.record
    assert rec["grid"].shape[1:] == (120, 120)
    assert rec["expert_states"].shape[1:] == (controller.mpc_config.N + 1, 3)
    assert rec["reference"].shape[1:] == (controller.mpc_config.N + 1, 2)
    # The expert trajectory starts at the recorded pose and obeys the dynamics.
    np.testing.assert_allclose(rec["expert_states"][:, 0], rec["pose"], atol=1e-5)
    ok = rec["expert_success"]
    assert ok.mean() > 0.9
    for k in np.flatnonzero(ok)[:5]:
        roll = controller.robot.rollout(rec["pose"][k], rec["expert_controls"][k], controller.mpc_config.dt)
        np.testing.assert_allclose(roll, rec["expert_states"][k], atol=1e-4)

    from mnemo_mpc.sim.plot import plot_episode

    png = plot_episode(res, tmp_path / "trajectory.png")
    assert png.stat().st_size > 10_000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_time_limit_gives_timeout(sim, controller):
    res = run_episode(small_world(), sim=sim, controller=controller, config=EpisodeConfig(time_limit_s=1.0))
    m = res.metrics
    assert m["timeout"] and not m["success"] and m["steps"] == 10


def test_a_collision_keeps_the_steps_that_led_to_it(sim):
    """A collision is rare and hard to reproduce: its episode row keeps the last steps (status, pose, command, ...).
    A controller that drives blindly into the pillar."""
    from mnemo_mpc.nav.controller import ControlOutput
    from mnemo_mpc.sim.episode import COLLISION_CONTEXT

    class Blind(Controller):
        def step(self, grid, pose, velocity, goal, global_path=None, **kwargs):
            return ControlOutput(np.array([0.5, 0.0]), "planned", None)

    m = run_episode(small_world(), sim=sim, controller=Blind(), config=EpisodeConfig(time_limit_s=5.0)).metrics
    assert m["collision"] and m["collisions_robot_caused"] == 1
    context = m["collision_context"]
    assert len(context) == COLLISION_CONTEXT and all(c["status"] == "planned" for c in context)
    assert context[-1]["command"] == [0.5, 0.0] and context[-1]["pose"][0] > context[0]["pose"][0]


def test_start_inside_obstacle_is_a_clear_error(sim, controller):
    world = small_world()
    bad = World(world.grid, np.array([2.0, 1.5, 0.0]), world.goal, seed=2, kind="test")  # inside the pillar
    with pytest.raises(InfeasibleProblemError, match="start"):
        run_episode(bad, sim=sim, controller=controller)


def test_a_step_that_planned_nothing_is_recorded_with_the_goal_as_its_sub_goal():
    """A recovery step has no sub-goal and no reference: the dataset row takes the goal for both (collecting with the
    Jackal profile raised on its first recovery, and every world was stored as an error)."""
    from types import SimpleNamespace

    from mnemo_mpc.dataset.recorder import _record_step
    from mnemo_mpc.nav.controller import ControlOutput

    world = small_world()
    goal = np.array([3.3, 1.5, 0.0])
    obs = SimpleNamespace(local_grid=world.grid, pose=np.array([0.7, 1.5, 0.0]), velocity=np.zeros(2))
    rec: dict = {}
    _record_step(rec, 0, obs, goal, ControlOutput(np.zeros(2), "recovery_rotate", None), None, 30)
    np.testing.assert_array_equal(rec["subgoal"][0], goal)
    np.testing.assert_array_equal(rec["reference"][0], np.tile(goal[:2], (31, 1)))
    assert rec["expert_success"] == [False]
