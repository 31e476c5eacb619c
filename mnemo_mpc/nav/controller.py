"""ROS-free receding-horizon controller: local grid + pose + velocity + goal (+ global path) -> checked (v, w).

Seed 002 §5.2: at every control step one SQP trajectory optimisation is run from a starting trajectory (the
previous solution shifted by one step, or a learned prediction), capped at 10 iterations, and the first control is
applied. Around that core this module adds what a robot needs and the paper does not spell out:

* the start (`ControllerConfig.warm_start`): "cold" (hold the pose), "shift" (the previous solution shifted one step,
  cold when there is none), "learned" (a warm-start provider, e.g. the spatial Mnemosyne ViT of
  `mnemo_mpc.warmstart`, called with a `WarmStartContext`), or "hybrid": the shifted and the learned candidate (and
  the cold one when there is no shift) compared on the NLP's own merit (`SQPMPC.merit`, cost + weighted constraint
  violation), the better one kept, so never worse than the shift by that measure;
* the global path -> sub-goal/reference (`mnemo_mpc.nav.reference`); with no path, a goal the grid has not seen as
  free yet is approached through the farthest known-free point on the line to it;
* safety: the output is always finite and inside the velocity and acceleration limits (clipped and flagged); a failed
  solve falls back to the previous plan's next control while that plan is still collision-free in the current grid,
  else to a stop that decelerates within the acceleration limits; at the goal the command goes to zero within the
  acceleration limits (zero at once when at rest).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.nav.reference import subgoal_and_reference, visible_subgoal
from mnemo_mpc.planning.esdf import UNKNOWN_POLICIES, DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, PlanResult, WarmStart
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.warmstart import MODES

log = logging.getLogger(__name__)


@dataclass
class WarmStartContext:
    """What a warm-start provider sees of this step's MPC problem (map frame)."""

    field: DistanceField  # the ESDF the MPC plans on
    pose: np.ndarray  # (x, y, yaw)
    velocity: np.ndarray  # (v, w)
    subgoal: np.ndarray  # (x, y, yaw): the goal the MPC is given
    reference: np.ndarray | None  # (N+1, 2) tracking points for knots 0..N, or None (track the sub-goal)


WarmStartProvider = Callable[[WarmStartContext], "WarmStart | None"]


@dataclass(frozen=True)
class ControllerConfig:
    """Controller settings around the MPC. Lengths in metres, speeds in m/s."""

    goal_tolerance_m: float = 0.25  # position tolerance; the goal yaw is shaped by the MPC but not required
    unknown_policy: str = "occupied"  # what the ESDF makes of unknown cells (safe default: obstacles)
    v_ref_fraction: float = 0.8  # reference speed along the global path, as a fraction of v_max
    subgoal_clearance_m: float = 0.15  # free space demanded around a sub-goal cell
    reuse_previous_plan: bool = True  # on a failed solve, follow the previous plan while it stays collision-free
    # mnemo_mpc.warmstart.MODES (module docstring); "learned" and "hybrid" need a warm-start provider
    warm_start: str = "shift"

    def __post_init__(self) -> None:
        if self.warm_start not in MODES:
            raise InputError(f"ControllerConfig.warm_start: expected one of {MODES}, got {self.warm_start!r}")
        if self.unknown_policy not in UNKNOWN_POLICIES:
            raise InputError(
                f"ControllerConfig.unknown_policy: expected one of {UNKNOWN_POLICIES}, got {self.unknown_policy!r}"
            )
        if not (_real(self.goal_tolerance_m) and self.goal_tolerance_m > 0):
            raise InputError(f"ControllerConfig.goal_tolerance_m: expected metres > 0, got {self.goal_tolerance_m!r}")
        if not (_real(self.v_ref_fraction) and 0 < self.v_ref_fraction <= 1):
            raise InputError(f"ControllerConfig.v_ref_fraction: expected (0, 1], got {self.v_ref_fraction!r}")
        if not (_real(self.subgoal_clearance_m) and self.subgoal_clearance_m >= 0):
            raise InputError(
                f"ControllerConfig.subgoal_clearance_m: expected metres >= 0, got {self.subgoal_clearance_m!r}"
            )
        if not isinstance(self.reuse_previous_plan, bool):
            raise InputError(
                f"ControllerConfig.reuse_previous_plan: expected True or False, got {self.reuse_previous_plan!r}"
            )


def _real(value: object) -> bool:
    """A finite real number (not a bool, a string or a NaN)."""
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


@dataclass
class ControlOutput:
    """One control step: the command sent, why, and what the planner did."""

    command: np.ndarray  # (v, w), finite, within limits
    status: str  # "planned" | "goal_reached" | "fallback_previous_plan" | "fallback_stop"
    plan: PlanResult | None
    flags: tuple[str, ...] = ()
    subgoal: np.ndarray | None = None
    reference: np.ndarray | None = None
    warm_start_source: str = "cold"  # the start the solve got: "cold" | "shift" | "learned"
    solve_error: str | None = None
    time_s: float = 0.0  # the whole step (ESDF, reference, solve, checks)
    field: DistanceField | None = None  # the ESDF the MPC planned on (for re-solves, e.g. the dataset's expert)
    warm_start: WarmStart | None = None  # the start the solve was given (None = cold)


def _vector(value: object, size: int, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"Controller.{name}: expected {size} numbers, got {value!r}") from exc
    if arr.size != size or not np.all(np.isfinite(arr)):
        raise InputError(f"Controller.{name}: expected {size} finite numbers, got {arr.tolist()}")
    return arr


class Controller:
    """Stateful controller: keeps the last solution for the shifted warm start and the path projection."""

    def __init__(
        self,
        robot: RobotModel | None = None,
        mpc_config: MPCConfig | None = None,
        config: ControllerConfig | None = None,
        warm_start_provider: WarmStartProvider | None = None,
    ) -> None:
        self.robot = robot or RobotModel()
        self.mpc_config = mpc_config or MPCConfig()
        self.config = config or ControllerConfig()
        self.warm_start_provider = warm_start_provider
        if self.config.warm_start in ("learned", "hybrid") and warm_start_provider is None:
            raise InputError(f"Controller: warm_start {self.config.warm_start!r} needs a warm-start provider (a model)")
        self._mpcs: dict[tuple[int, int], SQPMPC] = {}
        self._path: np.ndarray | None = None
        self._progress = 0
        self._given_path_id: int | None = None
        self._last_plan: PlanResult | None = None  # last successful plan
        self._plan_age = 0  # control steps applied since `_last_plan` was computed

    # --- public -------------------------------------------------------------------------------------------------
    def mpc(self, grid_shape: tuple[int, int]) -> SQPMPC:
        """The MPC for this grid shape (the NLP is built once per shape and reused)."""
        key = (int(grid_shape[0]), int(grid_shape[1]))
        if key not in self._mpcs:
            self._mpcs[key] = SQPMPC(self.robot, self.mpc_config, key)
        return self._mpcs[key]

    def reset(self) -> None:
        """Forget the previous plan and path projection (new episode or goal)."""
        self._path = None
        self._given_path_id = None
        self._progress = 0
        self._last_plan = None
        self._plan_age = 0

    def set_global_path(self, path: np.ndarray | None) -> None:
        """Track `path` (M, 2|3) from now on (None: plan straight to the goal)."""
        if path is not None:
            expected = "a finite (M, 2) or (M, 3) array of map-frame points, M >= 1"
            if isinstance(path, (str, bytes, dict)):
                raise InputError(f"Controller.global_path: expected {expected}, got a {type(path).__name__}")
            try:
                arr = np.asarray(path, dtype=float)
            except (TypeError, ValueError) as exc:  # ragged lists, strings inside, objects
                raise InputError(f"Controller.global_path: expected {expected} ({exc})") from None
            if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] not in (2, 3):
                raise InputError(f"Controller.global_path: expected {expected}, got shape {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise InputError(f"Controller.global_path: expected {expected}, got non-finite values")
            path = arr[:, :2].copy()
        self._path = path
        self._progress = 0

    def step(
        self,
        grid: OccupancyGrid,
        pose: np.ndarray,
        velocity: np.ndarray,
        goal: np.ndarray,
        global_path: np.ndarray | None = None,
        max_iter: int | None = None,
    ) -> ControlOutput:
        """Compute the command for this control period (dt = MPCConfig.dt)."""
        t0 = time.perf_counter()
        if not isinstance(grid, OccupancyGrid):
            raise InputError(f"Controller.grid: expected an OccupancyGrid, got {type(grid).__name__}")
        pose = _vector(pose, 3, "pose")
        velocity = _vector(velocity, 2, "velocity")
        goal = _vector(goal, 3, "goal")
        if max_iter is not None and (isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1):
            raise InputError(f"Controller.step.max_iter: expected an integer >= 1 or None, got {max_iter!r}")
        if global_path is not None and id(global_path) != self._given_path_id:
            self.set_global_path(global_path)
            self._given_path_id = id(global_path)

        if float(np.hypot(*(goal[:2] - pose[:2]))) <= self.config.goal_tolerance_m:
            # Zero command, reached as fast as the acceleration limits allow (exactly zero once at rest).
            self._last_plan = None
            return ControlOutput(self.stop_command(velocity), "goal_reached", None, time_s=time.perf_counter() - t0)

        cfg, mcfg = self.config, self.mpc_config
        n, dt = mcfg.N, mcfg.dt
        subgoal, reference = goal, None
        if self._path is not None:
            subgoal, reference, self._progress = subgoal_and_reference(
                self._path,
                pose,
                goal,
                grid,
                n,
                dt,
                cfg.v_ref_fraction * self.robot.v_max,
                self._progress,
                cfg.subgoal_clearance_m,
            )
        else:
            subgoal = visible_subgoal(grid, pose, goal, cfg.subgoal_clearance_m)

        field_ = DistanceField(grid, cfg.unknown_policy)
        context = WarmStartContext(field_, pose, velocity, np.asarray(subgoal, dtype=float), reference)
        warm, source = self._warm_start(context)
        plan: PlanResult | None = None
        solve_error = None
        try:
            plan = self.mpc(grid.shape).solve(
                field_,
                pose,
                velocity,
                subgoal,
                reference=reference,
                warm_start=warm,
                max_iter=max_iter,
                start_label=source,
            )
        except InfeasibleProblemError as exc:
            solve_error = str(exc)
            log.warning("MPC problem infeasible: %s", exc)

        flags: list[str] = []
        if plan is not None and plan.success:
            command = plan.controls[0].copy()
            status = "planned"
            self._last_plan, self._plan_age = plan, 0
        else:
            flags.append("solve_failed")
            command, status = self._fallback(field_, pose, velocity)
        command, clip_flags = self.check_command(command, velocity)
        flags.extend(clip_flags)
        if status != "planned":
            self._plan_age += 1
        return ControlOutput(
            command=command,
            status=status,
            plan=plan,
            flags=tuple(flags),
            subgoal=np.asarray(subgoal, dtype=float),
            reference=reference,
            warm_start_source=source,
            solve_error=solve_error,
            time_s=time.perf_counter() - t0,
            field=field_,
            warm_start=warm,
        )

    def check_command(self, command: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, list[str]]:
        """Make `command` finite and within the velocity and acceleration limits; return it with flags."""
        robot, dt = self.robot, self.mpc_config.dt
        flags = []
        cmd = np.asarray(command, dtype=float).reshape(-1)
        if cmd.size != 2 or not np.all(np.isfinite(cmd)):
            flags.append("non_finite_command")
            return self.stop_command(velocity), flags
        clipped = robot.clip_control(cmd)
        if np.any(np.abs(clipped - cmd) > 1e-9):
            flags.append("clipped_velocity")
        current = robot.clip_control(velocity)
        step = robot.accel_limits * dt
        limited = np.clip(clipped, current - step, current + step)
        if np.any(np.abs(limited - clipped) > 1e-6):
            flags.append("clipped_acceleration")
        return limited, flags

    def stop_command(self, velocity: np.ndarray) -> np.ndarray:
        """Decelerate towards (0, 0) as fast as the acceleration limits allow."""
        current = self.robot.clip_control(np.nan_to_num(np.asarray(velocity, dtype=float), nan=0.0))
        step = self.robot.accel_limits * self.mpc_config.dt
        return np.clip(np.zeros(2), current - step, current + step)

    # --- internals ----------------------------------------------------------------------------------------------
    def _shifted(self) -> WarmStart | None:
        if self._last_plan is None:
            return None
        ws = self._last_plan.shifted()
        for _ in range(self._plan_age):
            ws = _shift_again(ws, self.robot, self.mpc_config.dt)
        return ws

    def _learned(self, context: WarmStartContext) -> WarmStart | None:
        try:
            guess = self.warm_start_provider(context)
        except Exception as exc:  # a learned model must never take the controller down
            log.warning("warm-start provider failed (%s: %s); not using it this step", type(exc).__name__, exc)
            return None
        n = self.mpc_config.N
        if guess is not None and (
            np.shape(guess.states) != (n + 1, 3)
            or np.shape(guess.controls) != (n, 2)
            or not (np.all(np.isfinite(guess.states)) and np.all(np.isfinite(guess.controls)))
        ):
            log.warning("warm-start provider returned a malformed guess; not using it this step")
            return None
        return guess

    def _warm_start(self, context: WarmStartContext) -> tuple[WarmStart | None, str]:
        mode = self.config.warm_start
        if mode == "cold":
            return None, "cold"
        shift = self._shifted()
        learned = self._learned(context) if mode in ("learned", "hybrid") else None
        if mode == "hybrid":
            return choose_start(self.mpc(context.field.shape), context, shift, learned)
        if learned is not None:
            return learned, "learned"
        return (shift, "shift") if shift is not None else (None, "cold")

    def _fallback(self, field_: DistanceField, pose: np.ndarray, velocity: np.ndarray) -> tuple[np.ndarray, str]:
        """Next control of the previous plan if that plan, re-anchored at the current pose, is still collision-free;
        otherwise a stop within the acceleration limits."""
        plan, k = self._last_plan, self._plan_age + 1
        if self.config.reuse_previous_plan and plan is not None and k < plan.controls.shape[0]:
            controls = plan.controls[k:]
            states = self.robot.rollout(pose, controls, self.mpc_config.dt)
            pts = self.robot.densify(states, controls, self.mpc_config.dt, self.mpc_config.densify)
            if field_.min_clearance(pts) >= self.robot.clearance - 1e-3:
                return controls[0].copy(), "fallback_previous_plan"
        return self.stop_command(velocity), "fallback_stop"


def choose_start(
    mpc: SQPMPC, context: WarmStartContext, shift: WarmStart | None, learned: WarmStart | None
) -> tuple[WarmStart | None, str]:
    """The "hybrid" start: the candidate (shift, learned, and cold when there is no shift) with the lowest merit
    (`SQPMPC.merit`, f + sigma * constraint violation, sigma = max(1, 1.01 |lambda_g|_inf) of the shift's multipliers
    as the SQP's line search would set it). The learned start inherits the shift's multipliers: they belong to this
    problem too, and with a start at the optimum let the SQP stop at iteration 0."""
    candidates: list[tuple[str, WarmStart | None]] = []
    sigma = 1.0
    if shift is not None:
        candidates.append(("shift", shift))
        if shift.lam_g is not None:
            sigma = max(sigma, 1.01 * float(np.abs(shift.lam_g).max(initial=0.0)))
    if learned is not None:
        lam = (shift.lam_g, shift.lam_x) if shift is not None else (None, None)
        candidates.append(("learned", WarmStart(learned.states, learned.controls, *lam)))
    if shift is None:
        candidates.append(("cold", None))
    if len(candidates) == 1:
        return candidates[0][1], candidates[0][0]
    controls = [mpc.cold_start(context.pose).controls if ws is None else ws.controls for _, ws in candidates]
    try:
        merits = mpc.merit(
            context.field, context.pose, context.velocity, context.subgoal, context.reference, controls, sigma
        )
    except InfeasibleProblemError:
        return candidates[0][1], candidates[0][0]
    name, ws = candidates[int(np.argmin(merits))]
    return ws, name


def _shift_again(ws: WarmStart, robot: RobotModel, dt: float) -> WarmStart:
    states = np.concatenate([ws.states[1:], ws.states[-1:]], axis=0)
    controls = np.concatenate([ws.controls[1:], ws.controls[-1:]], axis=0)
    states[-1] = robot.step(states[-2], controls[-1], dt)
    return WarmStart(states, controls)
