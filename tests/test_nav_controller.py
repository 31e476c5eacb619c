"""ROS-free controller: safety of the command under bad input and failed solves; a kinematic closed loop."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig, choose_start
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import Footprint
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


def test_a_failed_solve_drives_the_escape_from_a_predicted_body(monkeypatch):
    """A solve that fails with a moving obstacle predicted (`PlanResult.escape`, here backing away) and no previous
    plan to follow: the robot drives the escape, not a stop, while it keeps the footprint clear of the grid; with a
    wall right behind it, it stops."""
    robot = RobotModel(v_min=-0.35)
    ctl = Controller(robot, MPCConfig(fallback=None, plan_v_min=0.0), ControllerConfig(rotation_shim=None))
    grid, goal = room(obstacle=False), np.array([2.5, 1.5, 0.0])
    pose, vel = np.array([1.5, 1.5, 0.0]), np.zeros(2)
    mpc = ctl.mpc(grid.shape)
    back = mpc.escape_motions(vel, robot.control_lower)[-3]  # straight back at v_min
    assert back[-1, 0] == pytest.approx(robot.v_min)
    real_solve = mpc.solve

    def failing_solve(*a, **k):
        res = real_solve(*a, **k)
        return dataclasses.replace(res, success=False, status="injected failure", escape=back)

    monkeypatch.setattr(mpc, "solve", failing_solve)
    out = ctl.step(grid, pose, vel, goal)
    assert out.status == "fallback_escape" and "solve_failed" in out.flags
    np.testing.assert_allclose(out.command, back[0], atol=1e-9)
    assert out.command[0] < 0.0 and in_limits(ctl, out.command, vel)
    ctl.reset()
    walled = grid.data.copy()
    walled[:, 20:24] = 100  # 0.1 m behind the disc's back
    out = ctl.step(OccupancyGrid(walled, RES), pose, vel, goal)
    assert out.status == "fallback_stop" and np.all(out.command == 0.0)


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

    config = ControllerConfig(warm_start="learned", prefetch_start=False)  # on the step (prefetch: the next test)
    c = Controller(controller.robot, controller.mpc_config, config, provider)
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


def test_the_learned_start_is_predicted_during_the_period_for_the_next_step(controller, caplog):
    """Off the critical path (nav.prefetch): the first step runs the model itself; each later step finds the start
    predicted on the worker thread for where the last plan said it would be, rolled out from where it is; a pose that
    jumped gets a prediction of its own, and a model that raises on the worker is not run again on the step."""
    import threading

    n, grid, goal = controller.mpc_config.N, room(False), np.array([2.5, 1.5, 0.0])
    calls = []

    def provider(ctx):
        calls.append((threading.current_thread() is threading.main_thread(), np.array(ctx.pose)))
        return WarmStart(np.tile(ctx.pose, (n + 1, 1)), np.tile([0.1, 0.0], (n, 1)))

    c = Controller(controller.robot, controller.mpc_config, ControllerConfig(warm_start="learned"), provider)
    c._mpcs = controller._mpcs
    out = c.step(grid, [0.5, 1.5, 0.0], [0, 0], goal)
    assert out.warm_start_source == "learned" and calls[0][0]  # nothing predicted yet: on the step
    predicted_for = out.plan.states[1]
    pose = np.array(predicted_for) + [0.01, 0.0, 0.0]
    c._prefetch.wait()  # the control period: the worker has finished (the step takes it only if ready)
    out = c.step(grid, pose, out.plan.controls[0], goal)
    assert out.warm_start_source == "learned" and len(calls) == 2
    on_main, ctx_pose = calls[1]
    assert not on_main and np.allclose(ctx_pose, predicted_for)
    np.testing.assert_allclose(out.warm_start.states[0], pose)  # re-anchored on this step's start
    jumped = pose + [0.6, 0.0, 0.0]
    out = c.step(grid, jumped, out.command, goal)  # the prediction does not fit: the model runs on the step
    assert out.warm_start_source == "learned" and any(main and np.allclose(p, jumped) for main, p in list(calls))

    def broken(ctx):
        raise RuntimeError("model exploded")

    c.warm_start_provider = broken
    out = c.step(grid, out.plan.states[1], out.plan.controls[0], goal)  # then predicted on the worker with `broken`
    pending = c._prefetch._pending
    assert isinstance(pending.future.exception(timeout=5.0), RuntimeError)
    caplog.clear()
    out = c.step(grid, pending.pose, out.plan.controls[0], goal)
    assert out.warm_start_source == "shift" and out.status == "planned"
    assert caplog.text.count("model exploded") == 1  # said once, and the model not run again on the step


@pytest.mark.parametrize("given_path", [True, False])
def test_the_prefetched_problem_has_the_next_steps_subgoal_and_reference(controller, given_path):
    """The model is given the problem the next step will solve: at the predicted start, the sub-goal and reference
    the next step computes there from the path (not this step's sub-goal with its reference advanced one knot, which
    cost ~0.15 SQP iterations per fresh step in `bench pipeline`); with no path, the goal as the grid shows it."""
    grid = room(False)
    goal = np.array([9.0, 1.5, 0.0]) if given_path else np.array([2.5, 1.8, 0.0])  # the path runs out of the window
    path = np.array([[0.5, 1.5], [2.0, 1.5], [9.0, 1.5]]) if given_path else None
    seen = []
    c = _crawling_controller(controller, ControllerConfig(warm_start="learned"), seen)
    out = c.step(grid, [0.5, 1.5, 0.0], [0.2, 0.0], goal, global_path=path)
    predicted, command = out.plan.states[1], out.command
    c._prefetch.wait()  # the control period
    out = c.step(grid, predicted, command, goal, global_path=path)  # the robot went where the plan said
    assert out.status == "planned" and len(seen) == 2
    ahead = seen[1]  # made on the worker during the first period
    np.testing.assert_allclose(ahead.pose, predicted)
    np.testing.assert_allclose(ahead.velocity, command)
    np.testing.assert_allclose(ahead.subgoal, out.subgoal, atol=1e-9)
    if given_path:
        assert not np.allclose(out.subgoal, seen[0].subgoal)  # the sub-goal moved on along the path
        np.testing.assert_allclose(ahead.reference, out.reference, atol=1e-9)
    else:
        assert ahead.reference is None and out.reference is None


@pytest.mark.parametrize("solve_ahead", [True, False])
def test_the_next_start_is_solved_ahead_on_the_worker(controller, solve_ahead):
    """`solve_ahead` (nav.prefetch, "Solved ahead"): during the period the worker solves the predicted problem from
    the model's start, and the next step starts from that solution with its multipliers. A robot that goes where the
    plan said meets the problem solved ahead: its step converges at once, where the model's rough start alone takes
    SQP iterations. A predicted start in collision is not solved ahead (the model's start stands)."""
    grid, goal = room(False), np.array([2.5, 1.8, 0.0])
    c = _crawling_controller(controller, ControllerConfig(warm_start="learned", solve_ahead=solve_ahead))
    out = c.step(grid, [0.5, 1.5, 0.0], [0.2, 0.0], goal)
    c._prefetch.wait()  # the control period
    out = c.step(grid, out.plan.states[1], out.plan.controls[0], goal)  # the robot went where the plan said
    assert out.status == "planned" and out.warm_start_source == "learned"
    if solve_ahead:
        assert out.warm_start.lam_g is not None and out.plan.iterations <= 1
        context, _ = c.next_problem(out)
        inside = dataclasses.replace(context, pose=np.array([1.5, 1.5, 0.0]))
        guess = c.warm_start_provider(inside)
        assert c._solve_ahead(dataclasses.replace(inside, field=DistanceField(room())), guess) is None
    else:
        assert out.warm_start.lam_g is None and out.plan.iterations >= 2


def test_hybrid_solves_ahead_from_the_shift_and_runs_no_model_for_it(controller):
    """In "hybrid" with `solve_ahead`, where the next step will have a fresh shift and the plan it shifts took more
    than one iteration, the worker solves the predicted problem from that shift (no model run), and the step starts
    from the solution: the start "ahead". After a plan that converged at once the shift is taken as it is."""
    grid, goal, calls = room(False), np.array([2.5, 1.8, 0.0]), []
    c = _crawling_controller(controller, ControllerConfig(warm_start="hybrid"), calls)
    out = c.step(grid, [0.5, 1.5, 0.0], [0.2, 0.0], goal)
    assert out.warm_start_source == "learned" and len(calls) == 1  # a fresh problem: the model, on the step
    assert out.plan.iterations > 1
    for source in ("ahead", "shift"):
        c._prefetch.wait()  # the control period
        out = c.step(grid, out.plan.states[1], out.plan.controls[0], goal)
        assert out.status == "planned" and out.warm_start_source == source and out.plan.iterations <= 1
        assert (out.warm_start.lam_g is not None) if source == "ahead" else c._prefetch._pending is None
    assert len(calls) == 1


def _crawling_controller(controller: Controller, config: ControllerConfig, calls: list | None = None) -> Controller:
    """A controller whose "model" predicts a crawl straight on from the pose (a poor start), each call recorded in
    `calls`; the NLPs are `controller`'s."""
    n = controller.mpc_config.N

    def crawl(ctx):
        if calls is not None:
            calls.append(ctx)
        return WarmStart(np.tile(ctx.pose, (n + 1, 1)), np.tile([0.1, 0.0], (n, 1)))

    c = Controller(controller.robot, controller.mpc_config, config, crawl)
    c._mpcs = controller._mpcs
    return c


def _oracle_controller(controller: Controller, config: ControllerConfig) -> tuple[Controller, list]:
    """A controller whose "model" returns the step's own optimum (converged at once), recording each call."""
    calls: list = []

    def oracle(ctx):
        calls.append(ctx)
        res = c.mpc(ctx.field.grid.shape).solve(ctx.field, ctx.pose, ctx.velocity, ctx.subgoal, ctx.reference)
        return WarmStart(res.states, res.controls)

    c = Controller(controller.robot, controller.mpc_config, config, oracle)
    c._mpcs = controller._mpcs
    return c, calls


def test_hybrid_takes_the_learned_start_on_fresh_problems_and_the_shift_otherwise(controller):
    """The rule (`choose_start`): the first step of a goal and a new goal are fresh problems (the learned start, here
    the problem's own optimum: converged at once); with a previous solution for the same goal, the shift, and the
    model is not run on the step at all."""
    grid, goal = room(False), np.array([2.5, 1.5, 0.0])
    c, calls = _oracle_controller(controller, ControllerConfig(warm_start="hybrid", prefetch_start=False))
    out = c.step(grid, [0.5, 1.5, 0.0], [0, 0], goal)
    assert out.warm_start_source == "learned" and out.plan.iterations <= 1 and len(calls) == 1
    pose = c.robot.step(np.array([0.5, 1.5, 0.0]), out.command, 0.1)
    out = c.step(grid, pose, out.command, goal)
    assert out.warm_start_source == "shift" and out.status == "planned" and len(calls) == 1
    pose = c.robot.step(pose, out.command, 0.1)
    c._plan_age = 1  # as a step that fell back leaves it: the shift already failed on this problem
    out = c.step(grid, pose, out.command, goal)
    assert out.warm_start_source == "learned" and out.plan.iterations <= 1 and len(calls) == 2
    pose = c.robot.step(pose, out.command, 0.1)
    out = c.step(grid, pose, out.command, np.array([2.0, 2.6, 1.5]))  # the shift plans for the old goal
    assert out.warm_start_source == "learned" and out.plan.iterations <= 1 and len(calls) == 3


def test_rti_goes_on_from_a_refused_iterate(controller, monkeypatch):
    """RTI spreads one solve over ticks: a tick whose iterate was refused (not sent) leaves that iterate as the next
    tick's start -- not the model, not the last accepted plan (`_warm_start`; restarting threw every tick's iteration
    away: Jackal corridor-1001 refused 524 in a row and failed). Once an iterate is sent, the shift takes over."""
    grid, goal, n = room(False), np.array([2.5, 2.6, 1.5]), controller.mpc_config.N
    calls = []

    def hold(ctx):  # a poor start: one iteration from it does not converge
        calls.append(ctx)
        return WarmStart(np.tile(ctx.pose, (n + 1, 1)), np.zeros((n, 2)))

    c = Controller(
        controller.robot,
        controller.mpc_config,
        ControllerConfig(warm_start="hybrid", prefetch_start=False, sqp_mode="rti", rotation_shim=None),
        hold,
    )
    c._mpcs = controller._mpcs
    pose = np.array([0.5, 1.5, 0.0])
    monkeypatch.setattr(c, "_plan_safe", lambda *a, **k: False)  # every iterate refused
    out = c.step(grid, pose, [0, 0], goal)
    assert out.warm_start_source == "learned" and out.plan.status == "max_iter" and out.status.startswith("fallback")
    refused = out.plan
    out = c.step(grid, pose, out.command, goal)
    assert out.warm_start_source == "rti_iterate" and len(calls) == 1
    np.testing.assert_array_equal(out.warm_start.states, refused.states)
    np.testing.assert_array_equal(out.warm_start.controls, refused.controls)
    monkeypatch.undo()
    out = c.step(grid, pose, out.command, goal)  # goes on from the second refused iterate, and is sent
    assert out.warm_start_source == "rti_iterate" and out.status == "planned" and len(calls) == 1
    pose = c.robot.step(pose, out.command, c.mpc_config.dt)
    out = c.step(grid, pose, out.command, goal)
    assert out.warm_start_source == "shift" and len(calls) == 1


def test_rti_checks_its_iterate_over_the_horizon_as_a_converged_plan_is(controller, monkeypatch):
    """An RTI iterate is sent when its horizon keeps the footprint clear, as the solver's own constraints promise a
    converged plan; the braking tail past the horizon (`_plan_safe`) guards only plans followed without re-solving.
    With the tail, RTI refused 586 of 703 clear iterates on Jackal corridor-1001. Here every braking tail would
    collide (it drives 10 m on): iterates are still sent."""
    c = Controller(controller.robot, controller.mpc_config, ControllerConfig(sqp_mode="rti", rotation_shim=None))
    c._mpcs = controller._mpcs
    monkeypatch.setattr(c, "braking_tail", lambda velocity: np.tile([0.5, 0.0], (200, 1)))
    grid, goal, pose, vel = room(), np.array([2.6, 2.6, 0.0]), np.array([0.4, 0.4, 0.0]), np.zeros(2)
    sent = 0
    for _ in range(40):
        out = c.step(grid, pose, vel, goal)
        sent += "rti_iterate" in out.flags
        pose, vel = c.robot.step(pose, out.command, c.mpc_config.dt), out.command
    assert sent > 0
    field_ = DistanceField(room(False))
    ahead = np.tile([0.5, 0.0], (c.mpc_config.N, 1))
    assert c._plan_safe(field_, np.array([0.5, 1.5, 0.0]), ahead, None, braking=False)
    assert not c._plan_safe(field_, np.array([0.5, 1.5, 0.0]), ahead, None)


def test_choose_start_is_shift_then_learned_then_cold():
    shift, learned = WarmStart(np.zeros((2, 3)), np.zeros((1, 2))), WarmStart(np.ones((2, 3)), np.ones((1, 2)))
    for args, want, name in (((shift, learned), shift, "shift"), ((None, learned), learned, "learned")):
        got, label = choose_start(*args)
        assert got is want and label == name
    assert choose_start(None, None) == (None, "cold")
    # A stale shift (aged by steps that did not plan) gives way to the learned start, and is kept where there is none.
    assert choose_start(shift, learned, shift_fresh=False) == (learned, "learned")
    assert choose_start(shift, None, shift_fresh=False) == (shift, "shift")


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


def test_rti_runs_one_iteration_a_tick_and_continues_from_its_iterate():
    """sqp_mode "rti": every solve stops after one SQP iteration, without the fallback solver behind it; an iterate
    that is not converged but keeps the footprint clear is sent (flag "rti_iterate") and is what the next tick
    shifts; one that is not clear is a failed solve."""
    c = Controller(RobotModel(), MPCConfig(), ControllerConfig(sqp_mode="rti", rotation_shim=None))
    assert c.mpc_config.fallback is not None  # the profile's fallback solver exists, and RTI does not use it
    grid, goal, pose, vel = room(), np.array([2.6, 2.6, 0.0]), np.array([0.4, 0.4, 0.0]), np.zeros(2)
    iterates = 0
    for _ in range(40):
        out = c.step(grid, pose, vel, goal)
        assert out.plan.iterations <= 1 and not out.plan.used_fallback
        if "rti_iterate" in out.flags:
            iterates += 1
            assert out.status == "planned" and c._last_plan is out.plan and out.plan.status == "max_iter"
        else:
            assert out.plan.success or out.status.startswith("fallback")
        pose, vel = c.robot.step(pose, out.command, c.mpc_config.dt), out.command
    assert iterates > 0
    with pytest.raises(InputError, match="sqp_mode"):
        ControllerConfig(sqp_mode="two")


def drive(c: Controller, grid: OccupancyGrid, pose, goal, steps: int = 120):
    """Kinematic closed loop (the command is the velocity over dt): the statuses and the final pose."""
    pose, vel, dt, statuses = np.asarray(pose, float), np.zeros(2), c.mpc_config.dt, []
    for _ in range(steps):
        out = c.step(grid, pose, vel, goal)
        assert in_limits(c, out.command, vel), (out.status, out.command, vel)
        statuses.append(out.status)
        vel = out.command
        pose = pose + dt * np.array([vel[0] * np.cos(pose[2]), vel[0] * np.sin(pose[2]), vel[1]])
        if out.status == "goal_reached" and not np.any(vel):
            break
    return statuses, pose


def test_at_the_position_the_robot_turns_in_place_to_the_goals_yaw():
    c = Controller(RobotModel(), MPCConfig(fallback=None), ControllerConfig(yaw_goal_tolerance=0.1))
    goal = np.array([1.5, 1.5, 2.0])
    statuses, pose = drive(c, room(obstacle=False), [1.5, 1.45, 0.0], goal)
    assert statuses[0] == "aligning_to_goal" and statuses[-1] == "goal_reached", statuses
    assert abs(np.angle(np.exp(1j * (goal[2] - pose[2])))) <= 0.1
    assert np.hypot(*(pose[:2] - [1.5, 1.45])) < 1e-9  # in place: v stayed 0
    assert c.last_goal_check.reached and c.last_goal_check.xy_error_m < 0.06


def test_without_a_yaw_tolerance_the_heading_is_reported_not_required():
    c = Controller(RobotModel(), MPCConfig(fallback=None))  # yaw_goal_tolerance pi: Nav2 users set 0.25
    out = c.step(room(obstacle=False), [1.5, 1.45, 0.0], [0.0, 0.0], [1.5, 1.5, 2.0])
    assert out.status == "goal_reached" and not np.any(out.command)
    assert out.goal_check.yaw_error_rad == pytest.approx(2.0)


def test_a_turn_that_would_hit_a_wall_stops_and_says_so():
    # A long thin body beside a wall: turning by 90 degrees swings its front into the wall.
    robot = RobotModel.from_footprint(Footprint(((0.5, 0.12), (0.5, -0.12), (-0.5, -0.12), (-0.5, 0.12))))
    c = Controller(robot, MPCConfig(fallback=None), ControllerConfig(yaw_goal_tolerance=0.1))
    data = np.zeros(SHAPE, np.int8)
    data[:, 38:] = 100  # a wall 0.4 m to the robot's left at x = 1.9 m
    grid = OccupancyGrid(data, RES)
    pose = [1.5, 1.5, math.pi / 2]  # pointing along the wall
    out = c.step(grid, pose, [0.0, 0.0], [1.5, 1.5, 0.0])
    assert out.status == "goal_yaw_blocked" and "rotation_blocked" in out.flags and not np.any(out.command)


def test_lidar_returns_place_the_walls_the_mpc_plans_on_finer_than_a_cell():
    """With the returns the grid was fused from, a wall inside its cells reads where the returns are: the step's
    field is the refined one (the recoveries' `cells_only` keeps whole cells); without `surfaces` the grid alone.
    Returns that are not (K, 2) points are refused by name."""
    c = Controller(RobotModel(), MPCConfig(fallback=None))
    grid = room(obstacle=False)
    ys = np.linspace(0.12, 2.88, 200)
    wall = np.stack([np.full_like(ys, 2.92), ys], axis=-1)  # the right wall's cells start at x = 2.9
    out = None
    for _ in range(6):  # 3.6 returns a cell each: the count reaches max_count (20)
        out = c.step(grid, [1.5, 1.5, 0.0], [0, 0], [2.0, 1.5, 0.0], returns=wall)
    q = np.array([[2.7, 1.5]])
    assert out.field.distance(q)[0] == pytest.approx(0.22 - 2 * 0.01 / math.sqrt(20), abs=2e-3)
    assert out.field.cells_only.distance(q)[0] == pytest.approx(0.2, abs=1e-9)
    plain = Controller(RobotModel(), MPCConfig(fallback=None), ControllerConfig(surfaces=None))
    out = plain.step(grid, [1.5, 1.5, 0.0], [0, 0], [2.0, 1.5, 0.0], returns=wall)
    assert out.field.distance(q)[0] == pytest.approx(0.2, abs=1e-9)
    for bad in (np.zeros((4, 3)), "wall", np.zeros((200_000, 2))):
        with pytest.raises(InputError, match="returns"):
            c.step(grid, [1.5, 1.5, 0.0], [0, 0], [2.0, 1.5, 0.0], returns=bad)
    with pytest.raises(InputError, match="ControllerConfig.surfaces"):
        ControllerConfig(surfaces={"noise_m": 0.02})


def test_the_recoveries_drive_on_whole_cells_not_on_surface_points(monkeypatch):
    """A recovery under way (a stand-in that records the field it is given) gets the step's field without the
    returns' points: the recoveries run the footprint to millimetres from what the grid shows."""
    c = Controller(RobotModel(), MPCConfig(fallback=None))
    grid = room(obstacle=False)
    ys = np.linspace(0.12, 2.88, 200)
    wall = np.stack([np.full_like(ys, 2.92), ys], axis=-1)
    seen = []

    class Recording:
        name, reason, started_s = "recording", "", 0.0

        def target(self, mpc, field_, pose, velocity, now):
            seen.append(field_)
            return np.zeros(2)

    c.step(grid, [1.5, 1.5, 0.0], [0, 0], [2.0, 1.5, 0.0], returns=wall)
    c._behaviour = Recording()
    refined = []
    original = DistanceField._refined_values
    monkeypatch.setattr(DistanceField, "_refined_values", lambda f, pad: refined.append(f) or original(f, pad))
    out = c.step(grid, [1.5, 1.5, 0.0], [0, 0], [2.0, 1.5, 0.0], returns=wall)
    assert out.status == "recording" and len(seen) == 1
    assert seen[0].surfaces is None and seen[0].grid.shape == grid.shape
    # ... and the step never computed the refined field (~3-5 ms on the 120 x 120 window): a recovery step is the
    # slowest there is already (the manoeuvre's lattice search)
    assert refined == []
