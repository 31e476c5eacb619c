"""Closed-loop navigation episode: global path on the known map -> local SQP MPC on the sensed local grid -> command
at the control rate, replanning every step from the shifted previous solution (seed 002 §5.2: "For each MPC step,
one instance of trajectory optimization with SQP was run").

The same loop serves the demo, the evaluation and the dataset collection. A `StepObserver` sees every step as it
happens; the dataset's recorder (`mnemo_mpc.dataset.recorder.ExpertRecorder`) is one, and what it keeps comes back
as `EpisodeResult.record`. The loop itself knows nothing of datasets.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from scipy import ndimage

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.controller import Controller, ControllerConfig, ControlOutput
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.footprint import to_robot, to_world
from mnemo_mpc.planning.global_path import plan_global_path
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim.worlds import World

log = logging.getLogger(__name__)

CLEARANCE_CAP_M = 2.0  # minimum clearance is measured up to this distance; farther reads as this
# The grid's error (`GridError`) is sampled every GRID_ERROR_EVERY steps where the truth has an obstacle within
# GRID_ERROR_NEAR_M of the robot (where the error decides anything).
GRID_ERROR_EVERY, GRID_ERROR_NEAR_M = 5, 1.0
COLLISION_CONTEXT = 12  # steps (~0.5 s on the Jackal) kept with a collision's episode row


class GridError:
    """How far what the robot's local grid shows is from the world: at the robot's centre, the distance to the nearest
    obstacle on the world's map at the true pose less that on the local grid at the pose the robot knows (odometry).
    Positive: the grid shows obstacles nearer than they are (drift and noise fused into the walls: narrower passages);
    negative: farther (the unsafe side). Sampled only where that nearest obstacle lies in cells the grid has observed
    (an obstacle not seen yet is not an error of the grid). 0 for the ideal robot, whose grid is the map's lattice at
    the true pose. `field_errors`: the same for the distance field the MPC planned on (`ControlOutput.field`: the
    grid's cells or, with the lidar's returns, its surface points less their uncertainty -- `planning.surfaces`),
    whose low tail is how far the MPC may have believed a wall farther than it was."""

    def __init__(self, world: World) -> None:
        grid = world.grid
        self.world_grid = grid
        self.truth = DistanceField(grid, "free")  # its values: each cell centre's distance to the nearest obstacle
        occupied = grid.occupied_mask()
        self.nearest = ndimage.distance_transform_edt(~occupied, return_distances=False, return_indices=True)
        self.any = bool(occupied.any())
        self.errors: list[float] = []
        self.field_errors: list[float] = []

    def sample(self, k: int, obs: Any, truth: np.ndarray, field: DistanceField | None = None) -> None:
        if k % GRID_ERROR_EVERY or not self.any:
            return
        g = self.world_grid
        col, row = np.floor(g.world_to_grid(np.asarray(truth[:2], dtype=float))).astype(int)
        inside = 0 <= row < g.data.shape[0] and 0 <= col < g.data.shape[1]
        if not inside or self.truth.values[row, col] >= GRID_ERROR_NEAR_M:
            return
        r, c = self.nearest[:, row, col]
        wall = g.grid_to_world(np.array([c + 0.5, r + 0.5]))  # the nearest obstacle cell, map frame
        seen_at = to_world(to_robot(wall[None], np.asarray(truth, dtype=float)), np.asarray(obs.pose, dtype=float))
        local = obs.local_grid
        lc, lr = np.floor(local.world_to_grid(seen_at[0])).astype(int)
        h, w = local.data.shape
        if not (0 <= lr < h and 0 <= lc < w) or local.unknown_mask()[lr, lc]:
            return
        true_d = float(self.truth.distance(np.asarray(truth[:2], dtype=float)))
        seen_d = float(DistanceField(local, "free").distance(np.asarray(obs.pose[:2], dtype=float)))
        self.errors.append(true_d - seen_d)
        if field is not None and field.shape == local.shape:
            self.field_errors.append(true_d - float(field.distance(np.asarray(obs.pose[:2], dtype=float))))


@dataclass(frozen=True)
class EpisodeConfig:
    """Episode limits and what to keep. `time_limit_s=None` allows `time_base_s + time_per_m * path length`."""

    goal_tolerance_m: float = 0.25
    time_limit_s: float | None = None
    time_base_s: float = 20.0
    time_per_m: float = 5.0  # 2.5x the time at the reference speed (0.4 m/s) along the global path
    keep_plan_every: int = 10  # keep every k-th planned horizon for plots
    # False: the controller gets no global path and finds its own way (`ControllerConfig.plan_own_path`); the path
    # on the known map is still computed, for the time ratio and the time limit.
    global_path: bool = True

    def __post_init__(self) -> None:
        if not (math.isfinite(self.goal_tolerance_m) and self.goal_tolerance_m > 0):
            raise InputError(f"EpisodeConfig.goal_tolerance_m: expected > 0, got {self.goal_tolerance_m}")
        if self.time_limit_s is not None and not (math.isfinite(self.time_limit_s) and self.time_limit_s > 0):
            raise InputError(f"EpisodeConfig.time_limit_s: expected > 0 s, got {self.time_limit_s}")


@dataclass
class EpisodeResult:
    metrics: dict[str, Any]  # success, collision, timeout, time_s, path_length_m, ... (JSON-ready)
    steps: list[dict[str, Any]]  # per-step stats (JSON-ready)
    driven: np.ndarray  # (T+1, 3) poses
    global_path: np.ndarray  # (M, 2)
    plans: list[tuple[int, np.ndarray]]  # (step, planned states (N+1, 3)) every keep_plan_every steps
    world: World
    record: Any = None  # what the observer kept (`StepObserver.finish`); None without one
    extra: dict[str, Any] = field(default_factory=dict)


def percentiles(
    values: list[float] | np.ndarray, digits: int = 4, points: tuple[int, ...] = (50, 95, 99)
) -> dict[str, float | None]:
    """mean, the percentiles `points` ("p50", ...) and max of `values`, rounded; None for each when there are none."""
    a = np.asarray(values, dtype=float)
    keys = ["mean", *(f"p{q}" for q in points), "max"]
    if a.size == 0:
        return dict.fromkeys(keys)
    stats = [a.mean(), *np.percentile(a, points), a.max()]
    return {key: round(float(v), digits) for key, v in zip(keys, stats, strict=True)}


class StepObserver(Protocol):
    """Sees each control step of `run_episode` after the controller has decided it, before the simulator runs it."""

    def step(self, k: int, obs: Any, goal: np.ndarray, out: ControlOutput, controller: Controller) -> dict[str, Any]:
        """Step `k`: the observation the controller got, its goal (controller frame) and output. Returns extra
        per-step stats for `EpisodeResult.steps` (may be empty)."""
        ...

    def finish(self, grid_shape: tuple[int, int], n: int) -> Any:
        """What the observer kept, once the episode is over (local grids of `grid_shape`, horizons of `n` steps)."""
        ...


def solve_steps(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The steps of an episode that ran the SQP. A step that did not plan (the rotation shim, a recovery, a stop) got
    no start; counted as "cold" it hid the learned start's share (TurtleBot3 Waffle, hybrid: 1,270 such "cold")."""
    return [s for s in steps if s["status"] == "planned" or s["iterations"]]


def count_starts(steps: list[dict[str, Any]], into: dict[str, int] | None = None) -> dict[str, int]:
    """How many of the solves among `steps` each start served (`ControlOutput.warm_start_source`), added to `into`."""
    starts = {} if into is None else into
    for s in solve_steps(steps):
        starts[s["start"]] = starts.get(s["start"], 0) + 1
    return starts


def run_episode(
    world: World,
    sim: Any | None = None,
    controller: Controller | None = None,
    config: EpisodeConfig | None = None,
    robot: RobotModel | None = None,
    mpc_config: MPCConfig | None = None,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    observer: StepObserver | None = None,
) -> EpisodeResult:
    """Drive `world.start` -> `world.goal` in the simulator (a new `Simulator()` unless one is given).

    Raises `InfeasibleProblemError` when the world has no global path (start or goal in an obstacle, disconnected).
    `on_step` receives each per-step stats dict as it happens (progress printing, fault injection in tests);
    `observer` sees each step's full context (`StepObserver`; the dataset's recorder).
    """
    cfg = config or EpisodeConfig()
    robot = robot or RobotModel()
    if controller is None:
        controller = Controller(robot, mpc_config, ControllerConfig(goal_tolerance_m=cfg.goal_tolerance_m))
    robot = controller.robot
    goal = np.asarray(world.goal, dtype=float)
    t_wall = time.perf_counter()
    path = plan_global_path(world.grid, world.start[:2], goal[:2], robot)
    path_len = float(np.sum(np.hypot(*np.diff(path, axis=0).T)))
    time_limit = cfg.time_limit_s if cfg.time_limit_s is not None else cfg.time_base_s + cfg.time_per_m * path_len

    own_sim = sim is None
    if own_sim:
        from mnemo_mpc.sim.simulator import SimConfig, Simulator

        sim = Simulator(SimConfig.for_robot(robot, control_dt=controller.mpc_config.dt))
    _check_body(sim, robot)
    period = getattr(getattr(sim, "config", None), "control_dt", None)
    if isinstance(period, float) and not math.isclose(period, controller.mpc_config.dt, rel_tol=1e-6):
        log.warning(
            "run_episode: the simulator holds each command %.4f s but the MPC plans %.4f s steps (use "
            "SimConfig.for_robot(robot, control_dt=mpc.dt) or mnemo_mpc.sim.profile.closed_loop_setup)",
            period,
            controller.mpc_config.dt,
        )
    steps: list[dict[str, Any]] = []
    plans: list[tuple[int, np.ndarray]] = []
    try:
        obs = sim.reset(world)
        # What the robot knows (odometry + localiser, `Observation.pose`) drives the controller; the truth scores it.
        truth = getattr(obs, "true_pose", None)
        truth = obs.pose if truth is None else truth
        # Real time from the first step: compiled NLP, fallback and model loaded before the clock starts (the node's
        # warm-up); cheap when they already are. It also resets the controller for this episode.
        controller.warm_up(obs.local_grid.shape, obs.local_grid.resolution)
        driven = [truth.copy()]
        # Footprint-to-obstacle distance (static and moving) after every step, from the simulator's exact query;
        # a simulator without one (a test double) reports none.
        clearance_of = getattr(sim, "clearance", None)
        clearances = [clearance_of(CLEARANCE_CAP_M)] if clearance_of is not None else []
        grid_error = GridError(world)
        outcome = "timeout"
        cause = getattr(obs, "collision_cause", None)
        if obs.collision:
            outcome = "collision"
        k = 0
        # Goal and path reach the controller in the frame of its pose (odometry: through the localiser's latest
        # transform, re-expressed when it changes, as Nav2 transforms its plan); the map frame for the ideal robot.
        frame, goal_c, path_c = None, goal, path
        while outcome == "timeout" and obs.time_s < time_limit - 1e-9:
            fix = getattr(obs, "map_from_odom", None)
            if fix is not None and (frame is None or np.any(fix != frame)):
                frame, goal_c, path_c = fix.copy(), sim.to_odom(goal), sim.to_odom(path)
            scan = getattr(obs, "scan", None)  # the returns the grid was just fused with (its frame)
            out = controller.step(
                obs.local_grid,
                obs.pose,
                obs.velocity,
                goal_c,
                global_path=path_c if cfg.global_path else None,
                returns=None if scan is None else scan.points(),
            )
            if out.status == "goal_reached" and float(np.hypot(*(goal[:2] - truth[:2]))) <= cfg.goal_tolerance_m:
                outcome = "success"
                break
            plan = out.plan
            stat = {
                "step": k,
                "t": round(float(obs.time_s), 3),
                "pose": [round(float(v), 4) for v in truth],
                # the localiser's view of where the robot is, against the truth
                "pose_error_m": round(float(np.hypot(*(_to_map(sim, obs.pose)[:2] - truth[:2]))), 4),
                "velocity": [round(float(v), 4) for v in obs.velocity],
                "command": [round(float(v), 4) for v in out.command],
                "status": out.status,
                "flags": list(out.flags),
                "start": out.warm_start_source,
                "iterations": int(plan.iterations) if plan is not None else 0,
                "solve_time_s": float(plan.time_s) if plan is not None else 0.0,
                "solver_status": plan.status if plan is not None else (out.solve_error or "not solved"),
                "used_fallback": bool(plan.used_fallback) if plan is not None else False,
                "step_time_s": float(out.time_s),
                "dist_to_goal_m": round(float(np.hypot(*(goal[:2] - truth[:2]))), 4),
            }
            if plan is not None and cfg.keep_plan_every and k % cfg.keep_plan_every == 0:
                plans.append((k, plan.states.copy()))
            grid_error.sample(k, obs, truth, out.field)
            if observer is not None:
                stat.update(observer.step(k, obs, goal, out, controller))
            steps.append(stat)
            if on_step is not None:
                on_step(stat)
            t_sim = time.perf_counter()
            obs = sim.step(float(out.command[0]), float(out.command[1]))
            # the rest of the period, as a robot's controller has it (its prefetch worker runs then)
            controller.idle(controller.mpc_config.dt - out.time_s - (time.perf_counter() - t_sim))
            truth = obs.pose if getattr(obs, "true_pose", None) is None else obs.true_pose
            driven.append(truth.copy())
            if clearance_of is not None:
                clearances.append(clearance_of(CLEARANCE_CAP_M))
            k += 1
            if obs.collision:
                outcome = "collision"
                cause = getattr(obs, "collision_cause", None)
        if outcome == "timeout" and float(np.hypot(*(goal[:2] - truth[:2]))) <= cfg.goal_tolerance_m:
            outcome = "success"
    finally:
        if own_sim:
            sim.close()

    driven_arr = np.asarray(driven)
    iters = [s["iterations"] for s in steps if s["status"] == "planned" or s["iterations"]]
    times = [s["solve_time_s"] for s in steps if s["iterations"]]
    step_ms = np.asarray([s["step_time_s"] for s in steps]) * 1e3
    period_ms = controller.mpc_config.dt * 1e3
    metrics = {
        "world": world.name,
        "seed": int(world.seed),
        "kind": world.kind,
        "success": outcome == "success",
        "collision": outcome == "collision",
        "timeout": outcome == "timeout",
        "outcome": outcome,
        "time_s": round(float(obs.time_s), 3),
        "time_limit_s": round(float(time_limit), 3),
        "steps": len(steps),
        "path_length_m": round(float(np.sum(np.hypot(*np.diff(driven_arr[:, :2], axis=0).T))), 4),
        "global_path_length_m": round(path_len, 4),
        # Time over the time the global path takes at the top speed (issue 10 item 5); successful episodes only.
        "time_ratio": round(float(obs.time_s) / (path_len / robot.v_max), 4)
        if outcome == "success" and path_len > 0
        else None,
        "min_clearance_m": round(float(min(clearances)), 4) if clearances else None,
        # A collision ends the episode; its cause is "robot" (drove into it) or "obstacle" (a moving one ran into
        # a robot standing still or moving away), see mnemo_mpc.sim.simulator.
        "collision_cause": cause if outcome == "collision" else None,
        "collisions_robot_caused": int(outcome == "collision" and cause != "obstacle"),
        # What led to it: the last COLLISION_CONTEXT steps (a collision is rare and chaotic to reproduce)
        "collision_context": [_context(s) for s in steps[-COLLISION_CONTEXT:]] if outcome == "collision" else None,
        "collisions_obstacle_caused": int(outcome == "collision" and cause == "obstacle"),
        "moving_obstacles": len(world.moving),
        "final_dist_to_goal_m": round(float(np.hypot(*(goal[:2] - truth[:2]))), 4),
        # How far what the robot knew was from the truth (odometry drift between localiser fixes)
        "pose_error_m": percentiles([s["pose_error_m"] for s in steps], 4),
        # How far the local grid's walls are from the world's, near obstacles (`GridError`; positive: nearer)
        "grid_error_m": {**percentiles(grid_error.errors, 4), "min": _min(grid_error.errors)},
        # ... and the field the MPC planned on (negative: a wall believed farther than it was; the unsafe tail)
        "field_error_m": {**percentiles(grid_error.field_errors, 4, (1, 5, 50)), "min": _min(grid_error.field_errors)},
        "first_move_s": _first_move_s(driven_arr, controller.mpc_config.dt),
        "fallback_steps": int(sum(s["status"].startswith("fallback") for s in steps)),
        "clipped_steps": int(sum(any(f.startswith("clipped") for f in s["flags"]) for s in steps)),
        "rti_iterate_steps": int(sum("rti_iterate" in s["flags"] for s in steps)),  # sqp_mode rti, not converged
        "iterations": percentiles(iters, 3),
        "solve_time_ms": percentiles(np.asarray(times) * 1e3, 3),
        # The controller's whole step (distance field, references, warm start, solve, fallback, checks) against the
        # control period it must fit in.
        "step_time_ms": percentiles(step_ms, 3),
        "period_ms": round(period_ms, 3),
        "overrun_steps": int(np.sum(step_ms > period_ms)),
        "recovery_steps": int(sum(s["status"].startswith("recovery") for s in steps)),
        "recoveries": int(
            sum(
                s["status"].startswith("recovery") and (i == 0 or steps[i - 1]["status"] != s["status"])
                for i, s in enumerate(steps)
            )
        ),
        "failed": any(s["status"] == "failed" for s in steps),
        "global_path_given": cfg.global_path,
        "wall_time_s": round(time.perf_counter() - t_wall, 3),
    }
    record = observer.finish(obs.local_grid.shape, controller.mpc_config.N) if observer is not None else None
    return EpisodeResult(metrics, steps, driven_arr, path, plans, world, record)


def _context(stat: dict[str, Any]) -> dict[str, Any]:
    return {key: stat[key] for key in ("t", "pose", "velocity", "command", "status", "flags", "start")}


def _min(values: list[float]) -> float | None:
    return round(float(min(values)), 4) if values else None


def _to_map(sim: Any, pose: np.ndarray) -> np.ndarray:
    """The robot's pose in the map frame (`Simulator.to_map`; a simulator without one works in the map frame)."""
    to_map = getattr(sim, "to_map", None)
    return np.asarray(pose, dtype=float) if to_map is None else to_map(pose)


def _first_move_s(driven: np.ndarray, dt: float) -> float | None:
    """Simulated time at which the true pose first moved (1 cm, or 0.02 rad of heading) from the start; None never."""
    turned = np.abs((driven[:, 2] - driven[0, 2] + np.pi) % (2 * np.pi) - np.pi)
    moved = (np.hypot(*(driven[:, :2] - driven[0, :2]).T) > 0.01) | (turned > 0.02)
    return round(float(np.argmax(moved)) * dt, 3) if np.any(moved) else None


def _check_body(sim: Any, robot: RobotModel) -> None:
    """The simulated body must be the robot the controller plans for (same footprint): a disc-shaped simulator under
    a box controller would score collisions and clearances of the wrong robot. A simulator without a body config (a
    test double) is not checked."""
    body = getattr(getattr(sim, "config", None), "robot", None)
    if body is None or not hasattr(body, "footprint"):
        return
    if tuple(map(tuple, body.footprint)) != tuple(robot.footprint) or (
        not robot.footprint and not math.isclose(body.radius_m, robot.radius, rel_tol=1e-9, abs_tol=1e-12)
    ):
        raise InputError(
            f"run_episode: the simulator's robot body (footprint {body.footprint or f'disc r={body.radius_m}'}) is not "
            f"the controller's robot (footprint {robot.footprint or f'disc r={robot.radius}'}); build the simulator "
            "with SimConfig.for_robot(robot)"
        )
