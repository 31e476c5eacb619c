"""ROS-free controller: safety of the command under bad input and failed solves; a kinematic closed loop."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import MPCConfig, WarmStart
from mnemo_mpc.planning.robot import RobotModel

RES = 0.05
SHAPE = (60, 60)  # 3 m x 3 m window


def room(obstacle: bool = True) -> OccupancyGrid:
    data = np.zeros(SHAPE, np.int8)
    data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
    if obstacle:
        data[25:35, 27:33] = 100  # a box between start and goal
    return OccupancyGrid(data, RES)


@pytest.fixture(scope="module")
def controller() -> Controller:
    return Controller(RobotModel(), MPCConfig(fallback=None))


def in_limits(c: Controller, cmd: np.ndarray, vel: np.ndarray) -> bool:
    r, dt = c.robot, c.mpc_config.dt
    return (
        bool(np.all(np.isfinite(cmd)))
        and r.v_min - 1e-9 <= cmd[0] <= r.v_max + 1e-9
        and abs(cmd[1]) <= r.w_max + 1e-9
        and bool(np.all(np.abs(cmd - r.clip_control(vel)) <= r.accel_limits * dt + 1e-6))
    )


def test_bad_inputs_raise(controller):
    grid = room()
    with pytest.raises(InputError, match="pose"):
        controller.step(grid, [np.nan, 1.0, 0.0], [0, 0], [2, 2, 0])
    with pytest.raises(InputError, match="velocity"):
        controller.step(grid, [0.5, 0.5, 0.0], [np.inf, 0], [2, 2, 0])
    with pytest.raises(InputError, match="goal"):
        controller.step(grid, [0.5, 0.5, 0.0], [0, 0], [2, 2])
    with pytest.raises(InputError, match="OccupancyGrid"):
        controller.step(np.zeros(SHAPE), [0.5, 0.5, 0.0], [0, 0], [2, 2, 0])
    with pytest.raises(InputError, match="global_path"):
        controller.step(room(), [0.5, 0.5, 0.0], [0, 0], [2, 2, 0], global_path=np.array([[np.nan, 0.0]]))


def test_goal_reached_gives_zero_command(controller):
    controller.reset()
    out = controller.step(room(), [2.5, 2.5, 0.0], [0.0, 0.0], [2.6, 2.5, 0.0])
    assert out.status == "goal_reached" and np.all(out.command == 0.0)
    # Arriving at speed: brake towards zero within the acceleration limits.
    out = controller.step(room(), [2.5, 2.5, 0.0], [0.35, 0.1], [2.6, 2.5, 0.0])
    assert out.status == "goal_reached" and in_limits(controller, out.command, np.array([0.35, 0.1]))
    assert out.command[0] == pytest.approx(0.25) and out.command[1] == 0.0


def test_check_command_clips_and_flags(controller):
    cmd, flags = controller.check_command(np.array([5.0, -9.0]), np.zeros(2))
    assert "clipped_velocity" in flags and "clipped_acceleration" in flags
    assert in_limits(controller, cmd, np.zeros(2))
    cmd, flags = controller.check_command(np.array([np.nan, 0.0]), np.array([0.4, 0.0]))
    assert "non_finite_command" in flags and np.all(np.isfinite(cmd))
    assert cmd[0] == pytest.approx(0.4 - controller.robot.a_max * controller.mpc_config.dt)


def test_failed_solve_falls_back_safely(controller, monkeypatch):
    controller.reset()
    grid = room(obstacle=False)
    pose, vel, goal = np.array([0.5, 1.5, 0.0]), np.array([0.3, 0.0]), np.array([2.5, 1.5, 0.0])
    good = controller.step(grid, pose, vel, goal)
    assert good.status == "planned" and good.plan.success
    mpc = controller.mpc(grid.shape)
    real_solve = mpc.solve

    def failing_solve(*a, **k):
        res = real_solve(*a, **k)
        return dataclasses.replace(res, success=False, status="injected failure")

    monkeypatch.setattr(mpc, "solve", failing_solve)
    pose2 = controller.robot.step(pose, good.command, 0.1)
    out = controller.step(grid, pose2, good.command, goal)
    # The previous plan is still collision-free: follow its next control.
    assert out.status == "fallback_previous_plan" and "solve_failed" in out.flags
    np.testing.assert_allclose(out.command, good.plan.controls[1], atol=1e-9)
    assert in_limits(controller, out.command, good.command)
    # A wall right in front of the robot invalidates the old plan: decelerate within the limits.
    blocked = grid.data.copy()
    blocked[:, 16:20] = 100
    out = controller.step(OccupancyGrid(blocked, RES), pose2, good.command, goal)
    assert out.status == "fallback_stop"
    assert in_limits(controller, out.command, good.command)
    assert out.command[0] < good.command[0]


def test_start_in_collision_stops_instead_of_raising(controller):
    controller.reset()
    grid = room()
    out = controller.step(grid, [1.5, 1.5, 0.0], [0.2, 0.0], [2.7, 2.7, 0.0])  # inside the box
    # the status says why the robot stops: its start is in collision on the grid
    assert out.status == "fallback_stop_blocked" and out.solve_error and "collision" in out.solve_error
    assert in_limits(controller, out.command, np.array([0.2, 0.0]))


def test_learned_mode_uses_the_provider_and_survives_a_broken_one(controller):
    calls = []
    n = controller.mpc_config.N

    def provider(ctx):
        calls.append(ctx)
        return WarmStart(np.tile(ctx.pose, (n + 1, 1)), np.zeros((n, 2)))

    c = Controller(controller.robot, controller.mpc_config, ControllerConfig(warm_start="learned"), provider)
    c._mpcs = controller._mpcs  # reuse the built NLP
    out = c.step(room(False), [0.5, 1.5, 0.0], [0, 0], [2.5, 1.5, 0.0])
    assert calls and out.warm_start_source == "learned" and out.status == "planned"
    ctx = calls[0]
    assert (
        ctx.field is out.field and np.allclose(ctx.pose, [0.5, 1.5, 0.0]) and np.allclose(ctx.subgoal[:2], [2.5, 1.5])
    )

    def broken(ctx):
        raise RuntimeError("model exploded")

    c.warm_start_provider = broken
    out = c.step(room(False), [0.6, 1.5, 0.0], out.command, [2.5, 1.5, 0.0])
    assert out.warm_start_source == "shift" and out.status == "planned"
    c.warm_start_provider = lambda ctx: WarmStart(np.zeros((3, 3)), np.zeros((2, 2)))
    out = c.step(room(False), [0.7, 1.5, 0.0], out.command, [2.5, 1.5, 0.0])
    assert out.warm_start_source == "shift"


def test_hybrid_picks_the_candidate_with_the_lower_merit(controller):
    """A provider that returns the problem's own optimum beats the shift; one that returns nonsense loses to it."""
    n = controller.mpc_config.N
    grid, goal = room(False), np.array([2.5, 1.5, 0.0])
    best = {}

    def oracle(ctx):
        res = c.mpc(grid.shape).solve(ctx.field, ctx.pose, ctx.velocity, ctx.subgoal, ctx.reference)
        best["controls"] = res.controls
        return WarmStart(res.states, res.controls)

    c = Controller(controller.robot, controller.mpc_config, ControllerConfig(warm_start="hybrid"), oracle)
    c._mpcs = controller._mpcs
    out = c.step(grid, [0.5, 1.5, 0.0], [0, 0], goal)  # fresh: learned (the optimum) vs cold
    assert out.warm_start_source == "learned" and out.plan.iterations <= 1
    pose = c.robot.step(np.array([0.5, 1.5, 0.0]), out.command, 0.1)
    new_goal = np.array([2.0, 2.6, 1.5])  # the shift plans for the old goal: the learned optimum must win
    out = c.step(grid, pose, out.command, new_goal)
    assert out.warm_start_source == "learned" and out.plan.iterations <= 1
    np.testing.assert_allclose(out.plan.controls, best["controls"], atol=1e-4)  # both converged to tol_du

    rng = np.random.default_rng(0)
    c.warm_start_provider = lambda ctx: WarmStart(np.zeros((n + 1, 3)), rng.uniform(-1.5, 1.5, (n, 2)))
    pose = c.robot.step(pose, out.command, 0.1)
    out = c.step(grid, pose, out.command, new_goal)
    assert out.warm_start_source == "shift" and out.status == "planned"


def test_modes_that_need_a_model_refuse_to_start_without_one(controller):
    with pytest.raises(InputError, match="provider"):
        Controller(controller.robot, controller.mpc_config, ControllerConfig(warm_start="hybrid"))
    with pytest.raises(InputError, match="warm_start"):
        ControllerConfig(warm_start="magic")


def test_kinematic_closed_loop_reaches_goal_around_obstacle(controller):
    controller.reset()
    grid = room()
    from mnemo_mpc.planning.global_path import plan_global_path

    pose, vel, goal = np.array([0.5, 1.5, 0.0]), np.zeros(2), np.array([2.5, 1.5, 0.0])
    path = plan_global_path(grid, pose[:2], goal[:2], controller.robot)
    sources = set()
    for _ in range(120):
        out = controller.step(grid, pose, vel, goal, global_path=path)
        assert in_limits(controller, out.command, vel)
        if out.status == "goal_reached":
            break
        assert out.status in ("planned", "rotating_to_path")  # the path leaves 45+ degrees off the start heading
        if out.status == "planned":
            sources.add(out.warm_start_source)
        pose = controller.robot.step(pose, out.command, controller.mpc_config.dt)
        vel = out.command
        from mnemo_mpc.planning.esdf import DistanceField

        assert DistanceField(grid).distance(pose[:2]) >= controller.robot.radius
    assert out.status == "goal_reached"
    assert sources == {"cold", "shift"}
