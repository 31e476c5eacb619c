"""ROS-free receding-horizon controller: local grid + pose + velocity + goal (+ global path) -> checked (v, w).

Seed 002 §5.2: at every control step one SQP trajectory optimisation is run from a starting trajectory (the
previous solution shifted by one step, or a learned prediction), capped at 10 iterations, and the first control is
applied. Around that core this module adds what a robot needs and the paper does not spell out:

* the start (`ControllerConfig.warm_start`): "cold" (hold the pose), "shift" (the previous solution shifted one step,
  cold when there is none), "learned" (a warm-start provider, e.g. the spatial Mnemosyne ViT of
  `mnemo_mpc.warmstart`, called with a `WarmStartContext`), or "hybrid": the shift when there is one, else the
  learned start (`choose_start`: where a previous solution exists the shift needs ~1.1 iterations and costs nothing;
  the model pays where there is none). The model runs off the critical path (`mnemo_mpc.nav.prefetch`): at the end of
  each step it predicts the next step's start on a worker thread while the robot drives, for the problem the next
  step will solve (`next_problem`: the state the next step will plan from, and the sub-goal and reference the path
  gives there), and the worker solves that problem from it (`solve_ahead`; in "hybrid" from the shift where there is
  one: the start "ahead"), so the step itself only corrects for what the prediction missed;
* the global path -> sub-goal/reference (`mnemo_mpc.nav.reference`); with no path, a goal the grid has not seen as
  free yet is approached through the farthest known-free point on the line to it;
* no global path (`ControllerConfig.plan_own_path`): while nothing seen lies on the straight line to the goal, the
  MPC heads for it (through the known-free point closest to it when the goal has not been seen free); otherwise the
  controller plans its own path on what its local grids have shown and tracks it like a given one
  (`mnemo_mpc.nav.own_path`, re-planned every `replan_period_s` and when the path ahead gets blocked);
* getting unstuck (`mnemo_mpc.nav.recovery`): no progress of `required_movement_m` within `progress_timeout_s`, or
  standing still (creeping included) for `stall_recovery_s` (a moving obstacle in view holds that clock, for at most
  `stall_wait_s`), starts the recoveries manoeuvre onto the path -> rotate in place -> back off (v_min < 0 only) ->
  re-plan, each with its status and a log line, and "failed" after `max_recoveries` of the progress checker's without
  progress (a stop, until a new goal); a manoeuvre driven to its end is progress;
* the drive as it is (`mnemo_mpc.nav.actuation`, `ControllerConfig.actuation`): the state is predicted over the
  measurement's age and the command latency with the commands already sent, the MPC plans from that prediction, and
  the first planned velocity is turned into the command a lagging drive needs to reach it;
* moving obstacles (`ControllerConfig.tracking`, issue 28): tracked from the grids (`mnemo_mpc.nav.tracking`), taken
  out of the grid and met as predicted over the horizon by the MPC's time-varying constraints, with a stop zone the
  robot may not drive into (`mnemo_mpc.nav.prediction`); the rotation shim stands aside while one is predicted near;
  the detector (`mnemo_mpc.nav.moving_obstacles`) guards what moves but is not tracked yet;
* the robot's own cells are known free (`mnemo_mpc.nav.clearing`): the footprint, and unknown cells in its turning
  circle, so a limited field of view never freezes it; a start that is truly blocked stops with status
  "fallback_stop_blocked" and starts the recoveries after `blocked_recovery_s`;
* safety: the output is always finite and inside the velocity and acceleration limits (clipped and flagged); a failed
  solve falls back to the previous plan's next control while that plan is still collision-free in the current grid
  (every covering disc of the footprint, as the MPC checks it),
  else to a stop that decelerates within the acceleration limits; at the goal the command goes to zero within the
  acceleration limits (zero at once when at rest).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mnemo_mpc.errors import InfeasibleProblemError, InputError, StartInCollisionError, is_real
from mnemo_mpc.nav import recovery, rotation_shim
from mnemo_mpc.nav.actuation import ActuationModel, CommandHistory
from mnemo_mpc.nav.clearing import clear_robot_cells
from mnemo_mpc.nav.goal_checker import ALIGN, REACHED, GoalCheck, GoalChecker, align_in_place
from mnemo_mpc.nav.hold import OccupancyHold
from mnemo_mpc.nav.maneuver import Maneuver, plan_maneuver
from mnemo_mpc.nav.modes import MODES, SQP_MODES
from mnemo_mpc.nav.moving_obstacles import MovingObstacleConfig, MovingObstacles, stopping_reach
from mnemo_mpc.nav.own_path import OwnPath
from mnemo_mpc.nav.prediction import (
    PredictionConfig,
    approach_guard,
    near_tracks,
    predicted_obstacles,
    without_tracks,
)
from mnemo_mpc.nav.prefetch import Prefetcher, Targets, next_context
from mnemo_mpc.nav.recovery import Behaviour, ProgressChecker
from mnemo_mpc.nav.reference import regulated_speed, subgoal_and_reference, visible_subgoal
from mnemo_mpc.nav.rotation_shim import RotationShim, ShimConfig
from mnemo_mpc.nav.step_inputs import check_step_inputs
from mnemo_mpc.nav.tracking import Track, Tracker
from mnemo_mpc.planning.esdf import UNKNOWN_POLICIES, DistanceField
from mnemo_mpc.planning.global_path import inflation_radius
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, PlanResult, PredictedObstacles, WarmStart
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.planning.surfaces import MAX_RETURNS, CellSurfaces, ReturnMeans, SurfaceConfig

log = logging.getLogger(__name__)

# SQP statuses of a solve cut short by its caps (not refused, not diverged): its iterate may still be a safe plan.
UNFINISHED = ("time_limit", "max_iter")


@dataclass
class WarmStartContext:
    """What a warm-start provider sees of this step's MPC problem (map frame)."""

    field: DistanceField  # the ESDF the MPC plans on
    pose: np.ndarray  # (x, y, yaw)
    velocity: np.ndarray  # (v, w)
    subgoal: np.ndarray  # (x, y, yaw): the goal the MPC is given
    reference: np.ndarray | None  # (N+1, 2) tracking points for knots 0..N, or None (track the sub-goal)
    margin: float | None = None  # the clearance margin the step's MPC keeps (None: the robot's safety margin)


WarmStartProvider = Callable[[WarmStartContext], "WarmStart | None"]


def solve_context(mpc: SQPMPC, context: WarmStartContext, warm_start: WarmStart | None, **options: Any) -> PlanResult:
    """`mpc.solve` on `context`'s problem (its field, start state, sub-goal, reference and margin) from `warm_start`;
    `options` are `SQPMPC.solve`'s others (max_iter, start_label, use_fallback, obstacles)."""
    return mpc.solve(
        context.field,
        context.pose,
        context.velocity,
        context.subgoal,
        reference=context.reference,
        warm_start=warm_start,
        margin=context.margin,
        **options,
    )


@dataclass(frozen=True)
class ControllerConfig:
    """Controller settings around the MPC. Lengths in metres, speeds in m/s."""

    goal_tolerance_m: float = 0.25  # position tolerance (Nav2's xy_goal_tolerance)
    # Heading tolerance at the goal (Nav2's yaw_goal_tolerance): once within goal_tolerance_m the robot turns in place
    # to the goal's yaw (`nav.goal_checker`); pi or more: the heading is not required, only reported.
    yaw_goal_tolerance: float = math.pi
    unknown_policy: str = "occupied"  # what the ESDF makes of unknown cells (safe default: obstacles)
    v_ref_fraction: float = 0.8  # reference speed along the global path, as a fraction of v_max
    # Speed regulated by the room the path ahead leaves (nav.reference.regulated_speed; after Nav2's Regulated Pure
    # Pursuit): the reference speed falls from v_ref_fraction * v_max, with `regulated_full_room_m` of room beside the
    # body and its margin, to `regulated_min_speed` (capped by that) at none, braking towards it at half of a_max.
    regulated_min_speed: float = 0.25  # m/s (Nav2 RPP regulated_linear_scaling_min_speed)
    regulated_full_room_m: float = 0.3
    subgoal_clearance_m: float = 0.15  # free space demanded around a sub-goal cell
    # Narrow passages: the MPC keeps the robot's safety margin where the reference path ahead leaves room for it and
    # narrows it to what that path offers, never below this floor, where it does not (a passage 1.1x the robot's
    # width has 5 % of the width to spare on each side; the full margin would stop the robot in front of it).
    min_margin_m: float = 0.01
    reuse_previous_plan: bool = True  # on a failed solve, follow the previous plan while it stays collision-free
    # mnemo_mpc.nav.modes.MODES; "learned" and "hybrid" need a warm-start provider
    warm_start: str = "shift"
    # Run the provider for the next step during this period (nav.prefetch); False: on the step, before its solve
    prefetch_start: bool = True
    # With prefetch_start: the worker also solves the predicted problem from the provider's start (in "hybrid", where
    # the next step will have a fresh shift of a plan that took more than one iteration, from that shift), and the
    # next step starts from that solution and its multipliers (nav.prefetch, "Solved ahead"); False: from the
    # provider's start, or the shift
    solve_ahead: bool = True
    # mnemo_mpc.nav.modes.SQP_MODES: "full" iterates to convergence (up to MPCConfig.max_iter); "rti" runs one SQP
    # iteration per tick from the start (real-time iteration: the next tick starts from this iterate, shifted) and
    # sends its first control when the iterate keeps the footprint collision-free over the horizon, else falls back as
    # a failed solve and the next tick goes on from the refused iterate
    sqp_mode: str = "full"
    # Getting unstuck (issue 10 item 4; names after Nav2's planner server, progress checker and behaviours).
    plan_own_path: bool = True  # with no global path given, plan one on what the local grids have shown (own_path)
    planner_unknown_policy: str = "free"  # unseen cells for that path: "free" (explore) or "occupied" (known only)
    replan_period_s: float = 1.0  # re-plan the own path at least this often (and at once when it gets blocked)
    # ... in a worker process, off the control step (nav.own_path; a real-time profile's setting); False: on the step
    plan_own_path_async: bool = False
    seen_map_max_m: float = 40.0  # side of the remembered area the own path is planned on
    required_movement_m: float = 0.5  # Nav2 SimpleProgressChecker.required_movement_radius
    progress_timeout_s: float = 10.0  # Nav2 SimpleProgressChecker.movement_time_allowance
    max_recoveries: int = 6  # recoveries without progress before "failed" (Nav2's RecoveryNode number_of_retries)
    spin_dist_rad: float = 1.57  # Nav2 Spin spin_dist: the rotate-in-place recovery's angle
    spin_speed: float = 1.0  # rad/s, capped by w_max
    backup_dist_m: float = 0.3  # Nav2 BackUp backup_dist (reverse only when v_min < 0)
    backup_speed: float = 0.1  # m/s, capped by -v_min
    recovery_time_allowance_s: float = 10.0  # Nav2 behaviours' time_allowance: a recovery motion ends by then
    # Turn in place towards the path before tracking it (mnemo_mpc.nav.rotation_shim); None: the MPC does it all
    rotation_shim: ShimConfig | None = field(default_factory=ShimConfig)
    # Moving obstacles detected in the grids get the room they can cover while the robot stops
    # (mnemo_mpc.nav.moving_obstacles); None: the MPC sees every grid as a still world
    moving_obstacles: MovingObstacleConfig | None = field(default_factory=MovingObstacleConfig)
    # Moving obstacles tracked (mnemo_mpc.nav.tracking) and met as predicted over the horizon: their cells out of the
    # grid, their predicted centres in the MPC's time-varying constraints (mnemo_mpc.nav.prediction); the detector
    # above keeps guarding what moves but is not tracked yet. None: the detector alone.
    tracking: PredictionConfig | None = None
    # The drive's latency and lags, compensated (mnemo_mpc.nav.actuation); None: commands act at once, as planned
    actuation: ActuationModel | None = None
    # The robot's own cells known free (mnemo_mpc.nav.clearing); False: the grid as given
    clear_footprint: bool = True
    # A start in collision for this long starts the recoveries (instead of waiting for the progress checker)
    blocked_recovery_s: float = 1.0
    # A robot standing still (within STILL_M and STILL_RAD of where it stood) this long, with no moving obstacle in
    # view, is stuck too: a Jackal whose MPC rests in a local minimum at a junction of the dense worlds' lanes
    # otherwise waited out the progress checker's 10 s each time (a third of its time limit). Not counted towards
    # max_recoveries (`_recovery_step`).
    stall_recovery_s: float = 3.0
    # ... and a moving obstacle in view holds that clock for at most this long: the robot waits for a body to pass,
    # not for good. On the drifting Jackal the detector fires on wall faces its own odometry moves (static dense
    # worlds: 4 detections in a 54 s episode, one holding a robot stalled at a junction for 8 s).
    stall_wait_s: float = 3.0
    # Wall positions finer than a cell from the lidar returns given to `step` (mnemo_mpc.planning.surfaces): a face
    # cell with enough of them about it is where they put the face, not the whole cell. None: the grid's cells alone.
    surfaces: SurfaceConfig | None = field(default_factory=SurfaceConfig)
    # A cell occupied within this long that reads free next to an occupied one is held occupied (mnemo_mpc.nav.hold:
    # a wall's partial cell flickers, and the wall steps a cell back); 0: the grid as given
    occupancy_hold_s: float = 0.5

    def __post_init__(self) -> None:
        if self.warm_start not in MODES:
            raise InputError(f"ControllerConfig.warm_start: expected one of {MODES}, got {self.warm_start!r}")
        if self.sqp_mode not in SQP_MODES:
            raise InputError(f"ControllerConfig.sqp_mode: expected one of {SQP_MODES}, got {self.sqp_mode!r}")
        if self.unknown_policy not in UNKNOWN_POLICIES:
            raise InputError(
                f"ControllerConfig.unknown_policy: expected one of {UNKNOWN_POLICIES}, got {self.unknown_policy!r}"
            )
        if self.surfaces is not None and not isinstance(self.surfaces, SurfaceConfig):
            raise InputError(f"ControllerConfig.surfaces: expected a SurfaceConfig or None, got {self.surfaces!r}")
        if not (is_real(self.goal_tolerance_m) and self.goal_tolerance_m > 0):
            raise InputError(f"ControllerConfig.goal_tolerance_m: expected metres > 0, got {self.goal_tolerance_m!r}")
        if not (is_real(self.yaw_goal_tolerance) and self.yaw_goal_tolerance > 0):
            raise InputError(
                f"ControllerConfig.yaw_goal_tolerance: expected radians > 0, got {self.yaw_goal_tolerance!r}"
            )
        if not (is_real(self.v_ref_fraction) and 0 < self.v_ref_fraction <= 1):
            raise InputError(f"ControllerConfig.v_ref_fraction: expected (0, 1], got {self.v_ref_fraction!r}")
        if not (is_real(self.min_margin_m) and self.min_margin_m >= 0):
            raise InputError(f"ControllerConfig.min_margin_m: expected metres >= 0, got {self.min_margin_m!r}")
        if not (is_real(self.subgoal_clearance_m) and self.subgoal_clearance_m >= 0):
            raise InputError(
                f"ControllerConfig.subgoal_clearance_m: expected metres >= 0, got {self.subgoal_clearance_m!r}"
            )
        for name in (
            "reuse_previous_plan",
            "prefetch_start",
            "solve_ahead",
            "plan_own_path",
            "plan_own_path_async",
            "clear_footprint",
        ):
            if not isinstance(getattr(self, name), bool):
                raise InputError(f"ControllerConfig.{name}: expected True or False, got {getattr(self, name)!r}")
        if self.planner_unknown_policy not in UNKNOWN_POLICIES:
            raise InputError(
                f"ControllerConfig.planner_unknown_policy: expected one of {UNKNOWN_POLICIES}, got "
                f"{self.planner_unknown_policy!r}"
            )
        for name, unit in (
            ("regulated_min_speed", "m/s"),
            ("regulated_full_room_m", "metres"),
            ("replan_period_s", "seconds"),
            ("seen_map_max_m", "metres"),
            ("required_movement_m", "metres"),
            ("progress_timeout_s", "seconds"),
            ("spin_dist_rad", "radians"),
            ("spin_speed", "rad/s"),
            ("backup_dist_m", "metres"),
            ("backup_speed", "m/s"),
            ("recovery_time_allowance_s", "seconds"),
            ("blocked_recovery_s", "seconds"),
            ("stall_recovery_s", "seconds"),
            ("stall_wait_s", "seconds"),
        ):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"ControllerConfig.{name}: expected {unit} > 0, got {value!r}")
        if not (is_real(self.occupancy_hold_s) and self.occupancy_hold_s >= 0):
            raise InputError(f"ControllerConfig.occupancy_hold_s: expected seconds >= 0, got {self.occupancy_hold_s!r}")
        if isinstance(self.max_recoveries, bool) or not isinstance(self.max_recoveries, (int, np.integer)):
            raise InputError(f"ControllerConfig.max_recoveries: expected an integer >= 0, got {self.max_recoveries!r}")
        if self.max_recoveries < 0:
            raise InputError(f"ControllerConfig.max_recoveries: expected an integer >= 0, got {self.max_recoveries!r}")
        if self.actuation is not None and not isinstance(self.actuation, ActuationModel):
            raise InputError(
                f"ControllerConfig.actuation: expected an ActuationModel or None, got {type(self.actuation).__name__}"
            )
        if self.tracking is not None and not isinstance(self.tracking, PredictionConfig):
            raise InputError(
                f"ControllerConfig.tracking: expected a PredictionConfig or None, got {type(self.tracking).__name__}"
            )
        if self.rotation_shim is not None and not isinstance(self.rotation_shim, ShimConfig):
            raise InputError(
                "ControllerConfig.rotation_shim: expected a ShimConfig or None, got "
                f"{type(self.rotation_shim).__name__}"
            )


@dataclass
class ControlOutput:
    """One control step: the command sent, why, and what the planner did."""

    command: np.ndarray  # (v, w), finite, within limits
    # "planned" | "goal_reached" | "rotating_to_path" (the rotation shim) | "fallback_unconverged" |
    # "fallback_previous_plan" | "fallback_escape" (away from a predicted moving obstacle) | "fallback_stop" |
    # "recovery_maneuver" | "recovery_rotate" | "recovery_back_off" | "recovery_replan" | "failed" (no progress after
    # max_recoveries; stops until a new goal) | "aligning_to_goal" (at the position, turning in place to the goal's
    # yaw) | "goal_yaw_blocked" (that turn would not keep the footprint's margin: stopped)
    status: str
    plan: PlanResult | None
    flags: tuple[str, ...] = ()
    subgoal: np.ndarray | None = None
    reference: np.ndarray | None = None
    warm_start_source: str = "cold"  # the start the solve got: "cold" | "shift" | "learned"
    solve_error: str | None = None
    time_s: float = 0.0  # the whole step (ESDF, reference, solve, checks)
    field: DistanceField | None = None  # the ESDF the MPC planned on (for re-solves, e.g. the dataset's expert)
    warm_start: WarmStart | None = None  # the start the solve was given (None = cold)
    margin: float | None = None  # the clearance margin the MPC kept (a planned step's)
    # (x, y, yaw, v, w) the step planned from: the measurement predicted to when the command acts (nav.actuation)
    start_state: np.ndarray | None = None
    tracks: tuple[Track, ...] = ()  # the confirmed tracks of this step's grid (ControllerConfig.tracking)
    predicted: PredictedObstacles | None = None  # those the MPC was constrained against, over its horizon
    goal_check: GoalCheck | None = None  # the goal checker's phase and both errors at the start state


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
        self.config = config or ControllerConfig()
        self.mpc_config = mpc_config or MPCConfig()
        # Nav2's SimpleGoalChecker, stateful: once at the position, the heading is turned to in place
        self.goal_checker = GoalChecker(self.config.goal_tolerance_m, self.config.yaw_goal_tolerance, stateful=True)
        self.last_goal_check: GoalCheck | None = None  # the last step's (for the node's diagnostics)
        self._tracker: Tracker | None = None
        if self.config.tracking is not None:
            self._tracker = Tracker(self.config.tracking.tracker)
            self.mpc_config = replace(self.mpc_config, moving_obstacles=self.config.tracking.slots)
        self._tracks: list[Track] = []
        self._predicted: PredictedObstacles | None = None
        self._sensed_s = 0.0  # the caller's time of this step's measurement (now_s less the observation's age)
        self._lead_s = 0.0  # from the measurement to the start state the step plans from
        self._tracked_s = -np.inf  # the measurement time the tracks are of
        self.warm_start_provider = warm_start_provider
        if self.config.warm_start in ("learned", "hybrid") and warm_start_provider is None:
            raise InputError(f"Controller: warm_start {self.config.warm_start!r} needs a warm-start provider (a model)")
        self._mpcs: dict[tuple[int, int], SQPMPC] = {}
        self._ahead_mpcs: dict[tuple[int, int], SQPMPC] = {}  # the prefetch worker's own (`_solve_ahead`)
        self._prefetch = (
            Prefetcher(
                lambda context: self.warm_start_provider(context),
                self.robot,
                self.mpc_config.dt,
                refine=self._solve_ahead if self.config.solve_ahead else None,
            )
            if warm_start_provider is not None
            and self.config.prefetch_start
            and self.config.warm_start in ("learned", "hybrid")
            else None
        )
        self._goal_changed = True  # this step's goal is not the last one's (set by _plan)
        self._path: np.ndarray | None = None
        self._progress = 0
        self._given_path_id: int | None = None
        self._last_plan: PlanResult | None = None  # last successful plan
        self._targets: Targets | None = None  # the last step's sub-goal and reference as a function of the pose
        self._plan_age = 0  # control steps applied since `_last_plan` was computed
        # RTI: the last iterate, when it was refused (not sent): the solve goes on from it next tick (`_warm_start`)
        self._rti_iterate: WarmStart | None = None
        cfg = self.config
        self._own = OwnPath(
            self.robot, cfg.planner_unknown_policy, cfg.replan_period_s, cfg.seen_map_max_m, cfg.plan_own_path_async
        )
        self._own_progress = 0.0
        self._checker = ProgressChecker(cfg.required_movement_m, cfg.progress_timeout_s)
        self._clock = 0.0  # controller time: one control period (MPCConfig.dt) per step
        self._actuation = cfg.actuation if cfg.actuation is not None and not cfg.actuation.is_identity else None
        self._history = CommandHistory(self._actuation) if self._actuation is not None else None
        # this step's measurement (pose, velocity, its time) and the step's time, for predicting the next start
        self._measured: tuple[np.ndarray, np.ndarray, float, float] | None = None
        self._blocked_since: float | None = None  # controller time the start was first found in collision
        self._shim = RotationShim(cfg.rotation_shim) if cfg.rotation_shim is not None else None
        self._moving = (
            None
            if cfg.moving_obstacles is None
            else MovingObstacles(
                cfg.moving_obstacles,
                stopping_reach(cfg.moving_obstacles.speed_m_s, self.robot.v_max, self.robot.a_max, self.mpc_config.dt),
            )
        )
        # the returns' running mean per cell (built at the first returns, on their grid's lattice)
        self._returns: ReturnMeans | None = None
        self._surfaces: CellSurfaces | None = None  # this step's, for its grid
        self._hold = OccupancyHold(cfg.occupancy_hold_s)
        self._reset_recovery(None)

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
        self._rti_iterate = None
        self._own.reset()
        self._own_progress = 0.0
        self._clock = 0.0
        self._blocked_since = None
        if self._history is not None:
            self._history.reset()
        self._measured = None
        self._reset_recovery(None)
        self._goal_changed = True
        if self._moving is not None:
            self._moving.reset()
        if self._tracker is not None:
            self._tracker.reset()
        self._tracks, self._predicted, self._tracked_s = [], None, -np.inf
        self._returns, self._surfaces = None, None
        self._hold.reset()
        if self._prefetch is not None:
            self._prefetch.clear()

    def warm_up(self, grid_shape: tuple[int, int], resolution: float) -> float:
        """Build (or load) the NLP for `grid_shape`, the fallback solver and the warm-start model, and run one step on
        a free grid, so that a real-time loop's first step is as fast as any other (the first solve loads compiled
        code and the model: ~0.15 s). Resets the controller; returns the seconds it took."""
        t0 = time.perf_counter()
        self.mpc(grid_shape).build_fallback()
        if self._prefetch is not None and self._prefetch.refine is not None:
            self._ahead_mpc(grid_shape)  # the worker's: built here, not on the worker during the first steps
        h, w = grid_shape
        free = OccupancyGrid(
            np.zeros(grid_shape, np.int8), resolution, (-0.5 * w * resolution, -0.5 * h * resolution, 0.0)
        )
        self.step(free, np.zeros(3), np.zeros(2), np.array([1.0, 0.0, 0.0]))
        if self._prefetch is not None:
            self._prefetch.wait()  # the worker's first run (its model session) finishes before the clock starts
        self.reset()
        return time.perf_counter() - t0

    @property
    def own_path(self) -> np.ndarray | None:
        """The path the controller planned itself (no global path given), or None."""
        return self._own.path

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
        now_s: float | None = None,
        observation_age_s: float = 0.0,
        grid_age_s: float | None = None,
        returns: np.ndarray | None = None,
    ) -> ControlOutput:
        """Compute the command for this control period (dt = MPCConfig.dt) from the grid and the pose and velocity
        measured `observation_age_s` ago; `now_s` is the caller's clock (default: one dt per step); `grid_age_s`: how
        long ago the grid was sensed (default: as the pose), the time the tracker takes its cells at. The stages: the
        state predicted to when the command acts (`nav.actuation`), the robot's own cells cleared (`nav.clearing`),
        the plan (`_plan`), and the command the drive needs to follow it. `returns`: the lidar returns (K, 2) the
        grid was last updated with, in its frame; with `ControllerConfig.surfaces` they place walls finer than a
        cell (`planning.surfaces`)."""
        t0 = time.perf_counter()
        check_step_inputs(pose, velocity, goal, global_path)  # bounded, not just finite (nav.step_inputs)
        if not isinstance(grid, OccupancyGrid):
            raise InputError(f"Controller.grid: expected an OccupancyGrid, got {type(grid).__name__}")
        pose = _vector(pose, 3, "pose")
        velocity = _vector(velocity, 2, "velocity")
        goal = _vector(goal, 3, "goal")
        if max_iter is not None and (isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1):
            raise InputError(f"Controller.step.max_iter: expected an integer >= 1 or None, got {max_iter!r}")
        if not (is_real(observation_age_s) and 0.0 <= observation_age_s <= 10.0):
            raise InputError(
                f"Controller.step.observation_age_s: expected seconds in [0, 10], got {observation_age_s!r}"
            )
        if grid_age_s is not None and not (is_real(grid_age_s) and 0.0 <= grid_age_s <= 10.0):
            raise InputError(f"Controller.step.grid_age_s: expected seconds in [0, 10] or None, got {grid_age_s!r}")
        if now_s is not None and not is_real(now_s):
            raise InputError(f"Controller.step.now_s: expected a finite time in seconds, got {now_s!r}")
        t_now = self._clock if now_s is None else float(now_s)
        act, history = self._actuation, self._history
        # The tracker runs on the caller's clock (a node's ticks need not be dt apart, nor its grids fresh each tick).
        self._sensed_s = t_now - float(observation_age_s if grid_age_s is None else grid_age_s)
        self._lead_s = t_now - self._sensed_s + (act.latency_s if act is not None else 0.0)
        if act is not None and history is not None:
            start_pose, start_vel = history.predict(pose, velocity, t_now - observation_age_s, t_now + act.latency_s)
            self._measured = (pose, velocity, t_now - observation_age_s, t_now)  # `next_problem` predicts from it
        else:
            start_pose, start_vel = pose, velocity
        self._surfaces = self._surfaces_for(grid, returns, pose)
        grid = self._hold.apply(grid, t_now)  # before the footprint's clearing: the body's cells stay free
        if self.config.clear_footprint:
            reach = self.robot.radius + self.robot.safety_margin + self.mpc_config.clearance_buffer + grid.resolution
            grid = clear_robot_cells(grid, self.robot, pose, reach, also_unknown_at=start_pose[None])
        out = self._plan(grid, start_pose, start_vel, goal, global_path, max_iter, t0)
        out.start_state = np.concatenate([start_pose, start_vel])
        out.tracks, out.predicted = tuple(self._tracks), self._predicted
        if self.config.tracking is not None and out.status != "goal_reached":
            points = self._moving.detected_points() if self._moving is not None else np.zeros((0, 2))
            mpc = self.mpc(grid.shape)
            guarded, stopped = approach_guard(
                out.command, start_pose, mpc.outer_radius, self._tracks, points, self.config.tracking.stop_zone_m
            )
            if stopped:
                out.command, _ = self.check_command(guarded, start_vel)
                out.flags = (*out.flags, "approach_stop")
        if act is not None and history is not None:
            # The velocity to reach one step on -> the command a lagging drive needs for it, within the limits.
            out.command = self.robot.clip_control(act.command_for(out.command, start_vel, self.mpc_config.dt))
            history.record(t_now, out.command)
        if self._prefetch is not None:
            self._prefetch_next(out)
        out.time_s = time.perf_counter() - t0
        return out

    def _surfaces_for(self, grid: OccupancyGrid, returns: np.ndarray | None, pose: np.ndarray) -> CellSurfaces | None:
        """The wall positions of `grid`'s cells from the returns so far, `returns` added (`planning.surfaces`)."""
        config = self.config.surfaces
        if config is None:
            return None
        if returns is not None:
            try:
                pts = np.asarray(returns, dtype=float)
            except (TypeError, ValueError):
                pts = None
            if pts is None or pts.ndim != 2 or pts.shape[1] != 2 or len(pts) > MAX_RETURNS:
                raise InputError(
                    f"Controller.step.returns: expected a (K, 2) array of points with K <= {MAX_RETURNS}, got "
                    f"{getattr(returns, 'shape', type(returns).__name__)}"
                )
            means = self._returns
            if means is None or not math.isclose(means.resolution, grid.resolution, rel_tol=1e-9):
                means = self._returns = ReturnMeans(grid.resolution, config)
            means.integrate(pts, pose[:2])
        return None if self._returns is None else self._returns.surfaces(grid)

    def _plan(
        self,
        grid: OccupancyGrid,
        pose: np.ndarray,
        velocity: np.ndarray,
        goal: np.ndarray,
        global_path: np.ndarray | None,
        max_iter: int | None,
        t0: float,
    ) -> ControlOutput:
        """The velocity (v, w) the robot should have one step on, from `pose` and `velocity` (the start state), in
        named stages: the goal's bookkeeping (`_track_goal`), the stop at the goal or after failing, the recoveries
        (`_recovery_step`), the route (`_route`: path, sub-goal, reference), the rotation shim, the solve from the
        chosen start (`_solve`) and the command from its result (`_command`)."""
        if global_path is not None and id(global_path) != self._given_path_id:
            self.set_global_path(global_path)
            self._given_path_id = id(global_path)
        self._track_goal(goal, pose)
        self._trail.add(pose)
        now = self._clock
        self._clock += self.mpc_config.dt
        # Planned on from here: tracked obstacles out of the grid and predicted (nav.prediction), the room the
        # untracked ones can cover marked (nav.moving_obstacles); the own path's memory takes what was seen.
        seen = grid
        self._predicted, guard = None, None
        if self._tracker is not None:
            if self._sensed_s > self._tracked_s:  # a new measurement (a tick on the same grid keeps its tracks)
                self._tracks, self._tracked_s = self._tracker.update(grid, self._sensed_s), self._sensed_s
            guard = near_tracks(grid, self._tracks, self.config.tracking.track_guard_m)
        if self._moving is not None:
            grid = self._moving.update(grid, now, ignore=guard)
        if self._tracks:
            grid = without_tracks(grid, self._tracks)
            n, dt = self.mpc_config.N, self.mpc_config.dt
            lead = self._lead_s + self._sensed_s - self._tracked_s  # the tracks' time to the start state
            self._predicted = predicted_obstacles(self._tracks, pose, self.robot, n, dt, lead, self.config.tracking)

        check = self.last_goal_check = self.goal_checker.check(pose, goal)
        if check.phase == REACHED:
            # Zero command, reached as fast as the acceleration limits allow (exactly zero once at rest).
            self._last_plan, self._behaviour = None, None
            return ControlOutput(
                self.stop_command(velocity), "goal_reached", None, time_s=time.perf_counter() - t0, goal_check=check
            )
        if check.phase == ALIGN and not self._failed:
            return self._align_to_goal(grid, pose, velocity, check, t0)
        if self._failed:
            return ControlOutput(self.stop_command(velocity), "failed", None, time_s=time.perf_counter() - t0)

        cfg = self.config
        field_ = DistanceField(grid, cfg.unknown_policy, self._surfaces)
        own = self._path is None and cfg.plan_own_path
        if own:
            self._own.seen.update(seen)  # also while a recovery turns to re-observe
        blocked = self._blocked_since is not None and now - self._blocked_since >= cfg.blocked_recovery_s - 1e-9
        # The recoveries drive at millimetres from what the grid shows: on its whole cells, never on the surface
        # points the MPC plans on (a shallow copy: the refined field is computed only if the MPC plans)
        recovered = self._recovery_step(grid, field_.cells_only, pose, velocity, goal, now, t0, blocked)
        if recovered is not None:
            return recovered

        subgoal, reference = self._route(grid, field_, pose, goal, own, now)
        margin = self._step_margin(field_, grid.shape, reference)
        # The shim turns in place blind to moving obstacles: with one predicted near, the MPC (which sees it) turns.
        if self._shim is not None and self._predicted is None:
            # Its turn is checked on the whole cells, as the recoveries' turns are: a turn in place runs the corners
            # millimetres from the walls, nearer than the surface points can say (a shim turn touched a block,
            # dense-1069 mapless, realistic, twenty-second session)
            turn = self._shim.target(self.mpc(grid.shape), field_.cells_only, pose, velocity, reference, margin)
            if turn is not None:
                self._last_plan = None  # planned for the old heading: neither a start nor a fallback any more
                command, flags = self.check_command(turn, velocity)
                return ControlOutput(
                    command,
                    rotation_shim.STATUS,
                    None,
                    tuple(flags),
                    subgoal=np.asarray(subgoal, dtype=float),
                    reference=reference,
                    time_s=time.perf_counter() - t0,
                    field=field_,
                    margin=margin,
                )
        context = WarmStartContext(field_, pose, velocity, np.asarray(subgoal, dtype=float), reference, margin)
        warm, source = self._warm_start(context)
        plan, solve_error = self._solve(context, warm, source, max_iter, now, self._predicted)
        command, status, flags = self._command(plan, field_, pose, velocity, margin)
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
            margin=margin,
        )

    def _align_to_goal(
        self, grid: OccupancyGrid, pose: np.ndarray, velocity: np.ndarray, check: GoalCheck, t0: float
    ) -> ControlOutput:
        """At the goal's position, off its yaw: the final in-place turn (`goal_checker.align_in_place`, the rotation
        shim's braking law aimed at the yaw), or a stop when turning would not keep the footprint's margin (a
        rectangular body beside a wall), status "goal_yaw_blocked", which the node reports and FollowPath aborts on
        after its failure_tolerance."""
        self._last_plan, self._behaviour = None, None
        field_ = DistanceField(grid, self.config.unknown_policy, self._surfaces)
        if not recovery.rotation_free(self.mpc(grid.shape), field_.cells_only, pose, check.yaw_error_rad):
            status, command, flags = "goal_yaw_blocked", self.stop_command(velocity), ["rotation_blocked"]
        else:
            robot = self.robot
            turn = align_in_place(
                check.yaw_error_rad, float(velocity[1]), self.mpc_config.dt, robot.w_max, robot.alpha_max
            )
            status, (command, flags) = "aligning_to_goal", self.check_command(turn, velocity)
        return ControlOutput(
            command, status, None, tuple(flags), time_s=time.perf_counter() - t0, field=field_, goal_check=check
        )

    def _track_goal(self, goal: np.ndarray, pose: np.ndarray) -> None:
        """A new goal (not this one re-expressed, `same_goal`) starts afresh: recoveries, own path, RTI iterate and
        the prefetched start were all for the old one."""
        self._targets = None
        self._goal_changed = self._goal is None or self._new_goal(goal, pose)
        if self._goal_changed:
            self.goal_checker.reset()
            self._reset_recovery(goal)
            self._own.clear_path()
            self._rti_iterate = None
            if self._prefetch is not None:
                self._prefetch.clear()  # predicted for the old goal
        self._goal = goal.copy()  # the same goal re-expressed (a localiser's frame update) moves with it

    def _route(
        self, grid: OccupancyGrid, field_: DistanceField, pose: np.ndarray, goal: np.ndarray, own: bool, now: float
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """(sub-goal, reference) for this step: along the given path, or the own path planned on what was seen
        (`own`; where the robot cannot turn half round in place on `field_`'s cells, a path leaving it backwards
        costs more: `OwnPath.plan`), or straight to the goal when nothing seen lies in the way; the progress along
        the path moves on and the targets as a function of the pose (`_targets_at`, for the prefetch) are kept."""
        cfg = self.config
        path, straight = self._path, False
        if own:
            if self._own.seen.segment_clear(pose, goal, self.robot.radius):
                self._own.clear_path()  # nothing seen in the way: straight to the goal
                cell = grid.world_to_cell(goal[:2])
                if not (grid.in_bounds(cell) and grid.free_mask()[cell[0], cell[1]]):
                    # Beyond what the grid shows as free: the line to it is the reference, so a goal behind the
                    # robot is turned to (tracking the goal alone, the MPC can rest in that local minimum).
                    path, straight = np.stack([pose[:2], goal[:2]]), True
            else:
                if self._own.poll():
                    self._own_progress = 0.0
                why = self._own.needs_replan(grid, self._own_progress, now)
                if why is not None:
                    # Half a turn either way sweeps the body's whole circumscribed disc (a footprint symmetric about
                    # its centre): one distance, not a rotation's poses (5 ms in a lane), and the bilinear one (the
                    # exact one builds a k-d tree, 2-3 ms): it weighs a path, it keeps nothing clear
                    room = float(field_.cells_only.distance(pose[:2]))
                    if self._own.plan(
                        pose, goal, cfg.subgoal_clearance_m, now, why, room >= self.mpc(grid.shape).outer_radius
                    ):
                        self._own_progress = 0.0
                path = self._own.path
        progress = 0.0 if path is None or straight else self._own_progress if own else self._progress
        subgoal, reference, progress = self._subgoal_and_reference(grid, pose, goal, path, progress)
        if path is not None and not straight:
            if own:
                self._own_progress = progress
            else:
                self._progress = progress
        self._targets = self._targets_at(grid, goal, path, progress, straight)
        return subgoal, reference

    def _solve(
        self,
        context: WarmStartContext,
        warm: WarmStart | None,
        source: str,
        max_iter: int | None,
        now: float,
        obstacles: PredictedObstacles | None = None,
    ) -> tuple[PlanResult | None, str | None]:
        """The SQP from the chosen start at the context's margin (one iteration in RTI, without the fallback solver);
        (plan, error) where a start in collision starts the blocked clock and an infeasible problem is logged."""
        rti = self.config.sqp_mode == "rti"
        if rti and max_iter is None:
            max_iter = 1
        try:
            plan = solve_context(
                self.mpc(context.field.shape),
                context,
                warm,
                max_iter=max_iter,
                start_label=source,
                use_fallback=not rti,
                obstacles=obstacles,
            )
        except StartInCollisionError as exc:
            if self._blocked_since is None:
                self._blocked_since = now
                log.warning("start blocked: %s; recoveries in %.1f s", exc, self.config.blocked_recovery_s)
            return None, str(exc)
        except InfeasibleProblemError as exc:  # the start passed its check: the goal is the problem
            self._blocked_since = None
            log.warning("MPC problem infeasible: %s", exc)
            return None, str(exc)
        self._blocked_since = None  # a start out of collision ends a blocked spell
        return plan, None

    def _command(
        self,
        plan: PlanResult | None,
        field_: DistanceField,
        pose: np.ndarray,
        velocity: np.ndarray,
        margin: float,
    ) -> tuple[np.ndarray, str, list[str]]:
        """(command, status, flags) from the solve: its first control when it converged; in RTI, an unconverged
        iterate whose horizon keeps the footprint clear; else a fallback (`_fallback`), and a refused RTI iterate is
        kept for the next tick to go on from. The command is then made finite and within the limits."""
        rti = self.config.sqp_mode == "rti"
        flags: list[str] = ["moving_obstacle"] if self._moving_in_view() else []
        self._rti_iterate = None
        if plan is not None and plan.success and not self._creep_clear_of_cells(field_, plan, margin):
            flags.append("creep_cuts_cells")
            command, status = self.stop_command(velocity), "fallback_stop"
        elif plan is not None and plan.success:
            command = plan.controls[0].copy()
            status = "planned"
            self._last_plan, self._plan_age = plan, 0
        elif (
            rti
            and plan is not None
            and plan.status in UNFINISHED
            and self._plan_safe(field_, pose, plan.controls, margin, braking=False)
        ):
            command = plan.controls[0].copy()  # the real-time iterate, its horizon checked as the solver's would be
            status = "planned"
            flags.append("rti_iterate")
            self._last_plan, self._plan_age = plan, 0
        else:
            flags.append("solve_failed")
            if rti and plan is not None and plan.status in UNFINISHED and np.all(np.isfinite(plan.controls)):
                self._rti_iterate = WarmStart(plan.states.copy(), plan.controls.copy())
            command, status = self._fallback(field_, pose, velocity, margin, plan)
            if status == "fallback_stop" and self._blocked_since is not None:
                status = "fallback_stop_blocked"  # the start is in collision on this grid: why the robot stops
        command, clip_flags = self.check_command(command, velocity)
        flags.extend(clip_flags)
        if status != "planned":
            self._plan_age += 1
        return command, status, flags

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

    def as_driven(self, controls: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        """`controls` (M, 2) with the first replaced by the velocity the drive reaches one period on from `velocity`
        when asked for it (`ActuationModel.reached`: the lag-inverting command clipped to the velocity limits, as
        `step` sends it); unchanged for an ideal drive. A check that took the first control as reached checked a
        turn the Jackal does not make: DWA, turning at -1.48 rad/s, asked for -1.66, the command clipped at -2.0 and
        the body reached -1.61 (dense-1055; that episode's collision had another cause, docs/peers.md)."""
        controls = np.array(controls, dtype=float).reshape(-1, 2)
        if self._actuation is not None and controls.shape[0]:
            low, high = self.robot.control_lower, self.robot.control_upper
            controls[0] = self._actuation.reached(controls[0], velocity, low, high, self.mpc_config.dt)
        return controls

    def braking_tail(self, velocity: np.ndarray) -> np.ndarray:
        """(M, 2) controls that take `velocity` to rest, each step as hard as the acceleration limits allow
        (`stop_command` repeated; M = 0 when already at rest)."""
        tail, u = [], self.robot.clip_control(np.asarray(velocity, dtype=float))
        while np.any(np.abs(u) > 1e-9):
            u = self.stop_command(u)
            tail.append(u)
        return np.asarray(tail, dtype=float).reshape(-1, 2)

    # --- internals ----------------------------------------------------------------------------------------------
    def _moving_in_view(self) -> bool:
        return bool(self._tracks) or (self._moving is not None and bool(self._moving.last_detections))

    def _shifted(self) -> WarmStart | None:
        if self._last_plan is None:
            return None
        ws = self._last_plan.shifted()
        for _ in range(self._plan_age):
            ws = _shift_again(ws, self.robot, self.mpc_config.dt)
        return ws

    def next_problem(self, out: ControlOutput) -> tuple[WarmStartContext, Targets | None] | None:
        """The next step's problem as the step that just returned `out` predicts it, for `Prefetcher.submit`: the
        context (`nav.prefetch.next_context`) and the function giving the sub-goal and reference the next step will
        compute at its pose (this step's path, progress and grid; None after a step that computed none, a recovery).
        None when the step had no sub-goal to predict from."""
        if out.field is None or out.subgoal is None or out.start_state is None:
            return None
        state, dt = out.start_state, self.mpc_config.dt
        here = WarmStartContext(out.field, state[:3], state[3:], out.subgoal, out.reference, out.margin)
        context = next_context(here, out.plan, out.command, self.robot, dt)
        if self._history is not None and self._actuation is not None and self._measured is not None:
            # A lagging drive: where the next step will predict its start to be -- from this measurement, through
            # the commands sent, this one included (`CommandHistory.predict`) -- not where the plan's unicycle is one
            # knot on (the plan assumes its first control from the start; the loops take a period to reach it).
            pose, velocity, measured_s, now = self._measured
            start = self._history.predict(pose, velocity, measured_s, now + dt + self._actuation.latency_s)
            context = replace(context, pose=start[0], velocity=start[1])
        return context, self._targets

    def _prefetch_next(self, out: ControlOutput) -> None:
        """Start the worker on the next step's problem as this step predicts it (`next_problem`): in "learned" mode
        the model after every step that has a sub-goal; in "hybrid" the model where the next step will have no fresh
        shift to start from (after a rotation to the path, a re-plan, a step that did not plan; the first step of a
        goal runs the model itself). With `solve_ahead` the worker then solves that problem from the model's start,
        and in "hybrid" where the next step has a fresh shift, from this plan shifted (the start "ahead") when this
        plan took more than one iteration: where the shift converges at once, as it mostly does on a slow robot, the
        start solved ahead saves nothing and taking it costs ~0.05 ms (TurtleBot3 `bench pipeline`, steady steps)."""
        assert self._prefetch is not None
        # hybrid: the model only where the next step will have no fresh shift (none, or one aged by a step that did
        # not plan); nothing where a refused RTI iterate is to be gone on from (`_warm_start`)
        fresh_shift = self.config.warm_start == "hybrid" and self._last_plan is not None and self._plan_age == 0
        # Not with a moving obstacle predicted: the solve ahead knows none (the step's start that breaks its rows
        # gives way to the escape), and its thread holds the interpreter while the step solves (Jackal, moving
        # corridor-1011: steps of 42 ms, the step's solve and the one ahead each taking 20 ms of it)
        ahead = self.config.solve_ahead and self._predicted is None
        needed = not fresh_shift or (ahead and self._last_plan.iterations > 1)
        problem = self.next_problem(out) if needed and self._rti_iterate is None else None
        if problem is None:
            self._prefetch.clear()
            return
        # the targets are computed on the worker, off the step
        self._prefetch.submit(*problem, start=self._shifted() if fresh_shift else None, solve=ahead)

    def idle(self, seconds: float) -> None:
        """What is left of the control period after a step: a simulation running faster than real time calls this
        with it, so the prefetch worker gets the time it has on a robot (it returns as soon as the worker is done),
        and no more: a worker that would still run at the next tick still runs into it."""
        if self._prefetch is not None and seconds > 0:
            self._prefetch.wait(seconds)

    def _ahead_mpc(self, grid_shape: tuple[int, int]) -> SQPMPC:
        """The prefetch worker's own MPC for this grid shape (`mpc` is the step's)."""
        key = (int(grid_shape[0]), int(grid_shape[1]))
        if key not in self._ahead_mpcs:
            self._ahead_mpcs[key] = SQPMPC(self.robot, self.mpc_config, key)
        return self._ahead_mpcs[key]

    def _solve_ahead(self, context: WarmStartContext, guess: WarmStart) -> WarmStart | None:
        """On the prefetch worker: the predicted next problem solved from the model's start `guess`, as a start with
        its multipliers (`nav.prefetch`, "Solved ahead"); None when it does not converge (the model's start is used).
        The worker has its own MPC (the step's keeps buffers a concurrent solve would overwrite), no fallback solver
        (a start need not be a plan) and no moving obstacles (the step's own solve keeps to them)."""
        try:
            plan = solve_context(
                self._ahead_mpc(context.field.shape), context, guess, start_label="ahead", use_fallback=False
            )
        except (StartInCollisionError, InfeasibleProblemError):
            return None  # the predicted start is in collision, or its problem infeasible: the step will say so
        if not plan.success:
            return None
        return WarmStart(plan.states, plan.controls, plan.duals.get("lam_g"), plan.duals.get("lam_x"))

    def _learned(self, context: WarmStartContext) -> WarmStart | None:
        """The learned start for this step: the prediction made during the last period when it fits this start
        (`nav.prefetch`), else the provider run now."""
        guess = None
        if self._prefetch is not None:
            guess = self._prefetch.take(context)
            if self._prefetch.last_failed:
                return None  # the provider raised on the worker (logged there): not again on the step
        if guess is None:
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
        if self._rti_iterate is not None:
            # RTI's iterates are one solve spread over ticks: a refused iterate (not sent) is where that solve stands,
            # further on than the start it came from. Restarting from the model or the last accepted plan instead
            # threw every tick's iteration away: Jackal corridor-1001, 524 refused in a row, failed.
            return self._rti_iterate, "rti_iterate"
        shift = self._shifted()
        if mode == "hybrid":
            if self._goal_changed:
                shift = None  # planned towards another goal: this step is a fresh problem
            fresh = shift is not None and self._plan_age == 0
            if fresh and self._prefetch is not None:
                ahead = self._prefetch.take(context)  # the shift solved ahead for this step (`_prefetch_next`)
                if ahead is not None:
                    return ahead, "ahead"
            return choose_start(shift, None if fresh else self._learned(context), fresh)
        learned = self._learned(context) if mode == "learned" else None
        if learned is not None:
            return learned, "learned"
        return (shift, "shift") if shift is not None else (None, "cold")

    def _subgoal_and_reference(
        self, grid: OccupancyGrid, pose: np.ndarray, goal: np.ndarray, path: np.ndarray | None, progress: float
    ) -> tuple[np.ndarray, np.ndarray | None, float]:
        """(sub-goal, reference, progress) at `pose`: along `path` from `progress` (`nav.reference`), with a speed
        profile for the room it leaves; with no path, the goal as far as the grid shows it free (no reference)."""
        cfg, mcfg = self.config, self.mpc_config
        if path is None:
            return visible_subgoal(grid, pose, goal, cfg.subgoal_clearance_m), None, progress
        return subgoal_and_reference(
            path,
            pose,
            goal,
            grid,
            mcfg.N,
            mcfg.dt,
            cfg.v_ref_fraction * self.robot.v_max,
            progress,
            cfg.subgoal_clearance_m,
            self._speed_profile(grid, path, pose, progress),
        )

    def _targets_at(
        self, grid: OccupancyGrid, goal: np.ndarray, path: np.ndarray | None, progress: float, straight: bool
    ) -> Targets:
        """This step's sub-goal and reference as a function of the pose, from its grid, `path` (`straight`: the line
        from the pose to the goal, whatever `path` is) and the `progress` it leaves: the next step's at the pose it
        is predicted to start from (`nav.prefetch`; run on the worker, ~0.8 ms). The next step reads the next scan:
        the same grid but for what it newly sees."""

        def targets(pose: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
            if straight:
                return self._subgoal_and_reference(grid, pose, goal, np.stack([pose[:2], goal[:2]]), 0.0)[:2]
            return self._subgoal_and_reference(grid, pose, goal, path, progress)[:2]

        return targets

    def _speed_profile(
        self, grid: OccupancyGrid, path: np.ndarray, pose: np.ndarray, progress: float
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """The reference's speed profile along `path` from `pose` (`nav.reference.regulated_speed`; None: constant
        v_ref_fraction * v_max), read from the obstacles the grid shows (unknown cells free: they are the MPC's to keep
        clear of, and counting them would slow the robot at every corner it has not seen round)."""
        cfg, robot, mcfg = self.config, self.robot, self.mpc_config
        v_top = cfg.v_ref_fraction * robot.v_max
        return regulated_speed(
            path,
            pose,
            progress,
            grid,
            inflation_radius(robot),
            robot.safety_margin,
            v_top,
            min(cfg.regulated_min_speed, v_top),
            cfg.regulated_full_room_m,
            0.5 * robot.a_max,
            mcfg.N * mcfg.dt,
        )

    def _step_margin(self, field_: DistanceField, grid_shape: tuple[int, int], reference: np.ndarray | None) -> float:
        """The clearance margin of this step's MPC: the robot's safety margin, narrowed to what the reference path
        ahead offers in a *passage* (per path pose and covering disc, esdf - r_d with headings along the path, less the
        MPC's spline buffer), never below `min_margin_m`. A pose counts as a passage only when shifting it sideways by
        its shortfall (+ a cell) gives the full margin on neither side: an obstacle beside or on the path -- a moving
        one above all -- is passed or avoided with the full margin (narrowing there let a moving box hit the robot,
        open-1015). Without a reference: the full margin."""
        full = self.robot.safety_margin
        if reference is None or len(reference) < 2:
            return full
        pts = np.asarray(reference, dtype=float)[:, :2]
        d = np.diff(pts, axis=0)
        moving = np.hypot(d[:, 0], d[:, 1]) > 1e-6
        if not np.any(moving):
            return full
        yaw = np.arctan2(d[moving, 1], d[moving, 0])
        poses = np.column_stack([pts[1:][moving], yaw])
        mpc = self.mpc(grid_shape)
        buffer = mpc.config.clearance_buffer

        def margins(p: np.ndarray) -> np.ndarray:
            return mpc.collision.pose_margins(field_, p) - buffer

        offered = margins(poses)
        short = offered < full
        if not np.any(short):
            return full
        normal = np.column_stack([-np.sin(poses[short, 2]), np.cos(poses[short, 2])])
        step = (full - offered[short] + field_.grid.resolution)[:, None] * normal
        one_sided = np.zeros(int(short.sum()), dtype=bool)
        for sign in (1.0, -1.0):
            shifted = poses[short].copy()
            shifted[:, :2] += sign * step
            one_sided |= margins(shifted) >= full
        passage = offered[short][~one_sided]
        if passage.size == 0:
            return full
        return float(np.clip(passage.min(), min(self.config.min_margin_m, full), full))

    def _fallback(
        self,
        field_: DistanceField,
        pose: np.ndarray,
        velocity: np.ndarray,
        margin: float | None = None,
        unfinished: PlanResult | None = None,
    ) -> tuple[np.ndarray, str]:
        """A command for a step whose solve failed, safest first: this step's own iterate when the SQP was only cut
        short (time or iteration cap: under load a cold start can need more than the budget, and the robot would
        otherwise stand still step after step), else the previous plan's next control -- each only if it, rolled out
        from the current pose, keeps the footprint collision-free (every covering disc keeps its radius + the margin
        the MPC demands, along the densified trajectory) -- else, with a moving obstacle predicted, the solve's
        escape from it (`PlanResult.escape`: of brake, turn and back away, the one that keeps farthest from it) if it
        keeps the footprint clear of the grid, else a stop within the acceleration limits. A stop is one of the
        escapes, the one a robot in a body's way would otherwise always take: with the Jackal backing away from boxes,
        failed solves braked its reverse and the box ran into it (moving rooms-1045, rooms-1063)."""
        if (
            unfinished is not None
            and unfinished.status in UNFINISHED
            and self._plan_safe(field_, pose, unfinished.controls, margin)
        ):
            return unfinished.controls[0].copy(), "fallback_unconverged"
        plan, k = self._last_plan, self._plan_age + 1
        if self.config.reuse_previous_plan and plan is not None and k < plan.controls.shape[0]:
            if self._plan_safe(field_, pose, plan.controls[k:], margin, velocity=velocity):
                return plan.controls[k].copy(), "fallback_previous_plan"
        escape = None if unfinished is None else unfinished.escape
        if escape is not None and self._plan_safe(field_, pose, escape, margin, predicted=False):
            return escape[0].copy(), "fallback_escape"
        return self.stop_command(velocity), "fallback_stop"

    def _plan_safe(
        self,
        field_: DistanceField,
        pose: np.ndarray,
        controls: np.ndarray,
        margin: float | None,
        braking: bool = True,
        velocity: np.ndarray | None = None,
        predicted: bool = True,
    ) -> bool:
        """`controls` rolled out from `pose`, then braked to rest within the acceleration limits (`braking_tail`),
        keep every covering disc at the margin a solve from here demands. Given the start `velocity`, the first
        control is taken as the drive reaches it (`reached`). The tail matters: a plan is only checked to
        its horizon, and a previous plan followed step after step at speed (solves refused, a loaded CPU) left the
        Jackal at 1.3 m/s with its plan used up and a stop too late to miss the wall (dense-1007, five processes on two
        cores: a collision).

        `braking=False` checks the horizon alone: the guarantee a converged plan has, for an RTI iterate the next tick
        solves on from as a full solve's next step does. With the tail, RTI refused 586 of 703 iterates on Jackal
        corridor-1001 whose horizons were clear (each ending at 1.7 m/s) and stopped the robot three ticks in four.
        `predicted=False` leaves out the predicted moving obstacles' margin (an escape from them keeps what it can)."""
        controls = np.asarray(controls, dtype=float)
        if not np.all(np.isfinite(controls)):
            return False
        if velocity is not None:
            controls = self.as_driven(controls, velocity)
        if braking:
            controls = np.concatenate([controls, self.braking_tail(controls[-1])])
        states = self.robot.rollout(pose, controls, self.mpc_config.dt)
        mpc = self.mpc(field_.shape)
        if predicted and self._predicted is not None and not self._clear_of_predicted(mpc, states, margin):
            return False
        return mpc.collision.trajectory_clearance(field_, states, controls) >= recovery.required_margin(
            mpc, field_, pose, margin
        )

    def _creep_clear_of_cells(self, field_: DistanceField, plan: PlanResult, margin: float | None) -> bool:
        """Whether a converged plan that turns in place or creeps (under CREEP_SPEED over its first CREEP_CHECK_S)
        keeps, over that time, the margin a recovery's turn keeps on the obstacle cells themselves
        (`recovery.required_margin`, `DistanceField.exact_distance`). The solver keeps its margin on the spline field,
        which overestimates towards a corner by up to 0.2 cell: the drifting Jackal's own slow turns in the dense lanes
        ended at 0-1.9 mm on the truth (dense-1027, 1034, 1097, `planned` at 0.02-0.7 rad/s). Faster plans pass."""
        dt = self.mpc_config.dt
        k = min(max(int(math.ceil(CREEP_CHECK_S / dt)), 1), plan.controls.shape[0])
        if float(np.max(np.abs(plan.controls[:k, 0]))) >= CREEP_SPEED:
            return True
        mpc = self.mpc(field_.shape)
        knots = np.asarray(plan.states[: k + 1], dtype=float)
        f = np.linspace(0.0, 1.0, 5)[:-1, None]  # four poses a step: a step turns at most w_max dt
        poses = (knots[:-1, None, :] + f[None] * (knots[1:, None, :] - knots[:-1, None, :])).reshape(-1, 3)
        poses = np.concatenate([poses, knots[-1:]])
        return recovery.footprint_margin(mpc, field_, poses) >= recovery.required_margin(mpc, field_, knots[0], margin)

    def _clear_of_predicted(self, mpc: SQPMPC, states: np.ndarray, margin: float | None) -> bool:
        """Every knot of `states` (from knot 1, as far as the prediction goes) keeps the predicted obstacles at
        R + R_j(t_k) + margin, as a solve demands: a previous plan made before an obstacle came must not drive into
        where it is going (mixed-1004 and open-1017 with tracking, before this check)."""
        pred = self._predicted
        m = self.robot.safety_margin if margin is None else margin
        k = min(len(states) - 1, pred.centres.shape[0])
        gaps = np.hypot(*(states[1 : k + 1, None, :2] - pred.centres[:k]).transpose(2, 0, 1))
        return bool(np.all(gaps >= mpc.outer_radius + pred.radii[:k] + m - 1e-3))

    def _new_goal(self, goal: np.ndarray, pose: np.ndarray) -> bool:
        return not same_goal(goal, self._goal, self.config.goal_tolerance_m, pose)

    # --- getting unstuck ------------------------------------------------------------------------------------------
    def _reset_recovery(self, goal: np.ndarray | None) -> None:
        """A new goal (or none): no recovery running, none counted, not failed; progress measured afresh."""
        self._goal = None if goal is None else np.asarray(goal, dtype=float).copy()
        self._behaviour: Behaviour | Maneuver | None = None
        self._recoveries = 0  # recoveries since the last progress (the progress checker's and blocked starts')
        self._behaviour_counts = True  # the running behaviour was one of those
        # (controller time, pose) where the robot was first seen standing still (`_stands`); None while it moves
        self._still: tuple[float, np.ndarray] | None = None
        self._waiting_since: float | None = None  # controller time it began standing with a moving obstacle in view
        self._next_behaviour = 0  # index into recovery.ORDER, round robin
        self._failed = False
        self._checker.baseline = None
        self._trail = recovery.Trail()  # where it stood on the way to this goal: a back-off may retrace it
        if self._shim is not None:
            self._shim.reset()

    def _recovery_step(
        self,
        grid: OccupancyGrid,
        field_: DistanceField,
        pose: np.ndarray,
        velocity: np.ndarray,
        goal: np.ndarray,
        now: float,
        t0: float,
        blocked: bool = False,
    ) -> ControlOutput | None:
        """Run the progress checker and the recoveries: a ControlOutput when a recovery (or "failed") decides this
        step, None for a normal step. `blocked` (the start has been in collision for `blocked_recovery_s`) counts as
        stuck at once. `field_` is the recoveries': whole cells (`_plan` passes `DistanceField.cells_only`)."""
        cfg = self.config
        mpc = self.mpc(grid.shape)
        if self._behaviour is not None:
            target = self._behaviour.target(mpc, field_, pose, velocity, now)
            if target is not None:
                return self._recovery_output(target, velocity, self._behaviour.name, field_, t0)
            why = getattr(self._behaviour, "reason", "")
            elapsed = now - self._behaviour.started_s
            log.info("%s ended after %.1f s%s", self._behaviour.name, elapsed, why and f": {why}")
            # A manoeuvre driven to its end stands on the path, aligned, at least min_advance_m further along it:
            # progress. Without this a stall's manoeuvre (not counted) left the progress checker's old baseline, which
            # ran out at once and backed the robot off the 0.3 m the manoeuvre had gained (dense-1034, realistic).
            done = isinstance(self._behaviour, Maneuver) and why == "done"
            self._behaviour = None
            self._last_plan = None  # planned before the motion: neither a start nor a fallback any more
            if done:
                self._recoveries, self._next_behaviour = 0, 0
            if self._behaviour_counts or done:
                self._checker.reset(pose, now)
            return None
        progressed, stuck = self._checker.update(pose, now)
        if progressed:
            self._recoveries, self._next_behaviour = 0, 0
        standing = self._still is not None and _stands(pose, self._still[1])
        # Waiting for a moving obstacle to pass, for at most stall_wait_s of standing still
        if not (standing and self._moving_in_view()):
            self._waiting_since = None
        elif self._waiting_since is None:
            self._waiting_since = now
        if self._waiting_since is not None and now - self._waiting_since < cfg.stall_wait_s - 1e-9:
            self._still = (now, self._still[1])
        elif not standing:
            self._still = (now, pose.copy())
        stalled = self._still is not None and now - self._still[0] >= cfg.stall_recovery_s - 1e-9
        if not (stuck or blocked or stalled):
            return None
        self._blocked_since = self._still = self._waiting_since = None  # a recovery now; the clocks start afresh
        # A stall's recovery neither counts towards max_recoveries nor restarts the progress checker: a robot that
        # stands still every few seconds would otherwise declare "failed" after six of them, in ~20 s, where the
        # progress checker gives it max_recoveries x progress_timeout_s (mapless corridor-1043 and doors-1079).
        counts = stuck or blocked
        if counts:
            self._checker.reset(pose, now)
        if counts and self._recoveries >= cfg.max_recoveries:
            self._failed = True
            log.error(
                "failed: no progress of %.2f m in %.1f s after %d recoveries; stopping until a new goal",
                cfg.required_movement_m,
                cfg.progress_timeout_s,
                self._recoveries,
            )
            return ControlOutput(self.stop_command(velocity), "failed", None, time_s=time.perf_counter() - t0)
        for _ in range(len(recovery.ORDER)):  # the next behaviour that can run here (re-plan always can)
            name = recovery.ORDER[self._next_behaviour % len(recovery.ORDER)]
            self._next_behaviour += 1
            extent, speed = 0.0, 0.0
            if name == recovery.MANEUVER:
                behaviour = self._maneuver(mpc, field_, grid, pose, now)
                if behaviour is not None:
                    break
                log.info("%s skipped: no footprint-free motion onto the path ahead", name)
                continue
            if name == recovery.ROTATE:
                extent = recovery.rotation_angle(mpc, field_, pose, goal, cfg.spin_dist_rad)
                speed = min(cfg.spin_speed, self.robot.w_max)
            elif name == recovery.BACK_OFF:
                # As far as is free of backup_dist_m, 2/3 or 1/3 of it: a body turned a little since it came leaves
                # the way it came a little way back (`recovery.reverse_free` over its trail)
                reach = tuple(cfg.backup_dist_m * f for f in (1.0, 2.0 / 3.0, 1.0 / 3.0))
                extent = recovery.reverse_reach(mpc, field_, pose, reach, self._trail)
                speed = cfg.backup_speed
            if name == recovery.REPLAN or extent != 0.0:
                break
            log.info(
                "%s skipped: %s",
                name,
                "not free here"
                if name == recovery.ROTATE or self.robot.v_min < 0
                else "the robot may not reverse (v_min >= 0)",
            )
        self._recoveries += counts
        self._behaviour_counts = counts
        log.warning(
            "%s: recovery %s: %s",
            "start blocked"
            if blocked
            else f"no progress of {cfg.required_movement_m:.2f} m in {cfg.progress_timeout_s:.1f} s"
            if stuck
            else f"standing still for {cfg.stall_recovery_s:.1f} s",
            f"{self._recoveries}/{cfg.max_recoveries}" if counts else "not counted",
            name,
        )
        if name == recovery.REPLAN:
            # Brake for this one step (the robot is stuck: it stands or nearly): the step has already paid for the
            # recoveries tried before this one (a lattice search that found nothing is ~20 ms), and a cold solve and
            # its fallback on top took the Jackal's mapless steps past its 44 ms period (dense-1069). Planning starts
            # afresh at the next step.
            self._own.clear_path()
            self._last_plan, self._progress, self._own_progress = None, 0, 0.0
            return self._recovery_output(np.zeros(2), velocity, name, field_, t0)
        if name == recovery.MANEUVER:
            self._behaviour = behaviour
        else:
            self._behaviour = Behaviour(name, pose, now, extent, speed, cfg.recovery_time_allowance_s, self._trail)
        target = self._behaviour.target(mpc, field_, pose, velocity, now)
        return self._recovery_output(np.zeros(2) if target is None else target, velocity, name, field_, t0)

    def _maneuver(
        self, mpc: SQPMPC, field_: DistanceField, grid: OccupancyGrid, pose: np.ndarray, now: float
    ) -> Maneuver | None:
        """The manoeuvre onto the path ahead (`mnemo_mpc.nav.maneuver`), at the margin this step's MPC would keep
        along it; None without a path or a manoeuvre."""
        path = self._path if self._path is not None else self._own.path
        if path is None or len(path) < 2:
            return None
        near = int(np.argmin(np.hypot(path[:, 0] - pose[0], path[:, 1] - pose[1])))
        ahead = np.asarray(path[near:], dtype=float)[:, :2]
        ahead = ahead[: max(2, int(np.searchsorted(np.cumsum(np.hypot(*np.diff(ahead, axis=0).T)), 1.5)) + 2)]
        margin = self._step_margin(field_, grid.shape, ahead)
        waypoints = plan_maneuver(mpc, field_, pose, path, margin)
        if waypoints is None:
            return None
        floor = Maneuver.floor(mpc, field_, pose, margin)
        return Maneuver(waypoints, floor, now, self.config.recovery_time_allowance_s, margin=margin)

    def _recovery_output(
        self, target: np.ndarray, velocity: np.ndarray, status: str, field_: DistanceField, t0: float
    ) -> ControlOutput:
        """A recovery step's output: `target` through the same checks as every command (limits, finite)."""
        command, flags = self.check_command(target, velocity)
        self._plan_age += 1
        return ControlOutput(command, status, None, tuple(flags), time_s=time.perf_counter() - t0, field=field_)


# A robot that stays within STILL_M and STILL_RAD of where it stood stands still (stall_recovery_s). Creeping counts:
# a Jackal whose MPC rests in a local minimum at a passage mouth crept 1-2 cm/s for up to 9 s, never below a
# velocity threshold, and waited out the progress checker (dense-1062, realistic).
STILL_M, STILL_RAD = 0.05, 0.2
# A converged plan slower than CREEP_SPEED over its first CREEP_CHECK_S (the drive's latency and lags, and a little) is
# checked on the obstacle cells as the recoveries' turns are (`Controller._creep_clear_of_cells`).
CREEP_SPEED, CREEP_CHECK_S = 0.05, 0.3


def _stands(pose: np.ndarray, since: np.ndarray) -> bool:
    """Whether `pose` is within STILL_M and STILL_RAD of `since`."""
    turned = abs(recovery.wrap_angle(float(pose[2]) - float(since[2])))
    return float(np.hypot(*(pose[:2] - since[:2]))) < STILL_M and turned < STILL_RAD


SAME_GOAL_YAW_RAD = 0.3
# A localiser's correction of the map -> odom transform turns a far goal about the robot: it moves by the heading
# correction times its distance (the Jackal profile's corrections moved a goal 10 m away by 0.2-0.5 m, which the goal
# tolerance alone took for a new goal every second or two: the progress checker and the own path restarted each time
# and a robot stuck in a dense world never recovered).
SAME_GOAL_BEARING_RAD = 0.1


def same_goal(a: np.ndarray, b: np.ndarray, tolerance_m: float, robot: np.ndarray | None = None) -> bool:
    """Whether goal `a` is goal `b` re-expressed (a localiser updating the map -> odom transform moves a goal given
    in the map frame by its correction): within the goal tolerance plus SAME_GOAL_BEARING_RAD times goal `a`'s
    distance from the `robot`'s position (x, y, ...; none: no allowance), and SAME_GOAL_YAW_RAD of heading. A
    farther goal is a new goal: recoveries and the own path start afresh."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    d_yaw = abs((a[2] - b[2] + np.pi) % (2 * np.pi) - np.pi)
    distance = 0.0 if robot is None else float(np.hypot(*(a[:2] - np.asarray(robot, dtype=float)[:2])))
    reach = tolerance_m + SAME_GOAL_BEARING_RAD * distance
    return float(np.hypot(*(a[:2] - b[:2]))) <= reach and d_yaw <= SAME_GOAL_YAW_RAD


def choose_start(
    shift: WarmStart | None, learned: WarmStart | None, shift_fresh: bool = True
) -> tuple[WarmStart | None, str]:
    """The "hybrid" start: the shifted previous solution when it is fresh (the last step planned), else the learned
    start, else a stale shift, else cold.

    A rule, not a comparison: the shift converges in ~1.1 SQP iterations and costs nothing, the learned start is as
    good there and costs an inference, and comparing the two on the NLP's merit cost ~0.5 ms a step for no iteration
    gained (`bench pipeline`, issue 25). Where there is no previous solution -- a new goal, after a fallback or a
    recovery -- the learned start saves the cold start's iterations. A shift aged by steps that did not plan (a
    fallback: the solve from it failed) is a start that already failed on this problem; the learned start, made for
    the problem as it is now, replaces it (Jackal closed loop: `docs/learned_start.md`)."""
    if shift is not None and shift_fresh:
        return shift, "shift"
    if learned is not None:
        return learned, "learned"
    if shift is not None:
        return shift, "shift"
    return None, "cold"


def _shift_again(ws: WarmStart, robot: RobotModel, dt: float) -> WarmStart:
    states = np.concatenate([ws.states[1:], ws.states[-1:]], axis=0)
    controls = np.concatenate([ws.controls[1:], ws.controls[-1:]], axis=0)
    states[-1] = robot.step(states[-2], controls[-1], dt)
    return WarmStart(states, controls)
