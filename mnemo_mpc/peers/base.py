"""The stage every peer planner shares with the MPC: the Controller around it, and the one safety check.

A peer (`mnemo_mpc.peers.mppi`, `mnemo_mpc.peers.dwa`) replaces only the SQP solve of `Controller._plan` (issue 30:
"the same safety layer for all, so differences are the planner's"). Everything else is the MPC controller's own,
unchanged: the input checks, the goal check, the route (the given global path, or the own path planned on what the
grids have shown, `nav.own_path`) and the sub-goal and reference cut from it (`nav.reference`), the step's clearance
margin (narrowed in passages, `Controller._step_margin`), the rotation shim, the progress checker and the recoveries
(`nav.recovery`), the actuation compensation, and `check_command` (finite, inside the velocity and acceleration limits).

The safety check (`PeerController._plan_safe`): a peer's proposal is sent only when its first control, held for one
control period and then braked to rest as hard as the acceleration limits allow (`Controller.braking_tail`), keeps
every covering disc of the footprint at the step's margin along the densified arc. That is the admissibility of Fox et
al. (1997, "The Dynamic Window Approach to Collision Avoidance", Sec. 3.2: a velocity is admissible when the robot can
stop before it reaches an obstacle) made the same for every peer. A refused proposal is a failed solve: the
Controller's fallback follows the previous plan while that is still safe by the same check, else stops within the
acceleration limits (`Controller._fallback`).

The clearance it reads (`footprint_clearance`) is at least as strict as the MPC's constraint: at each disc centre the
least of the exact distance to the obstacle cells (`DistanceField.exact_distance`) and the bilinear field less
`MPCConfig.clearance_buffer` (what the MPC's rows demand), less the disc's radius. Inside the margin band the motion
must not come nearer than the footprint is now, on that same clearance (`required_clearance`, the MPC's band rule).
`Controller._plan_safe` (the MPC's fallbacks) reads the bilinear field against a requirement taken from the exact
distance, less 1 mm: near a block corner the bilinear field reads up to 1.1 cm more than the exact one, so inside
the band every step admitted a stop ~1 cm nearer the corner than the robot was, and DWA crept into the block
(dense-1006: exact clearance 38, 27, 20, 14, 9, 4 mm on six accepted steps, then contact; dense-1013 likewise).

The peers use the SQPMPC object of the grid's shape only for its footprint checker and start margin (what the
recoveries and the rotation shim call); they never solve with it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.nav.controller import Controller, ControllerConfig, WarmStartContext
from mnemo_mpc.peers.local_path import pruned_path
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, PlanResult, PredictedObstacles, WarmStart
from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)

# PlanResult.status of a peer's proposal: sent, or refused by the safety check (a failed solve: the fallback runs).
ACCEPTED, REFUSED = "accepted", "refused_unsafe"
# How much nearer than now a motion inside the margin band may come (round-off only: 1 um a step, not a ratchet).
CLEARANCE_TOLERANCE_M = 1e-6


@dataclass
class Proposal:
    """What a peer planner proposes for this step: the controls (M, 2) it would apply from now, the first one the
    command (M >= 1; already reachable from the current velocity within the acceleration limits), and its figures."""

    controls: np.ndarray
    iterations: int = 1  # optimiser iterations (MPPI) or 1 (a single search, DWA)
    cost: float = float("nan")  # the planner's own objective of the proposal (lower is better)


def footprint_clearance(mpc: SQPMPC, field_: DistanceField, poses: np.ndarray) -> np.ndarray:
    """Per pose (..., 3): min over the covering discs of min(exact distance, bilinear distance - clearance buffer) -
    radius. The exact distance (`DistanceField.exact_distance`) is what a corner allows; the bilinear field less the
    buffer is what the MPC's clearance rows demand; the safety check keeps the stricter of the two."""
    centres = mpc.collision.disc_centres(poses)  # (..., K, 2)
    exact = np.asarray(field_.exact_distance(centres), dtype=float)
    bilinear = np.asarray(field_.distance(centres), dtype=float) - mpc.config.clearance_buffer
    return np.min(np.minimum(exact, bilinear) - mpc.discs[:, 2], axis=-1)


class PeerController(Controller):
    """A Controller whose solve is a peer planner's `propose` (module docstring). Subclasses set `name` and implement
    `propose`; `reset_planner` forgets what the planner keeps between steps."""

    name = "peer"

    def __init__(
        self,
        robot: RobotModel | None = None,
        mpc_config: MPCConfig | None = None,
        config: ControllerConfig | None = None,
    ) -> None:
        # No warm start and no real-time iteration: those are the SQP's. The rest of the configuration is the
        # profile's, as the MPC gets it.
        config = dataclasses.replace(config or ControllerConfig(), warm_start="shift", sqp_mode="full")
        super().__init__(robot, mpc_config, config, None)
        # (path or None, progress along it, goal): what `_route` followed this step (`path_ahead`)
        self._followed: tuple[np.ndarray | None, float, np.ndarray] = (None, 0.0, np.zeros(3))

    # --- what a peer provides ----------------------------------------------------------------------------------
    def propose(self, context: WarmStartContext, margin: float) -> Proposal:
        """The controls to apply from `context.pose` at `context.velocity` towards `context.subgoal` along
        `context.reference` (None: straight to the sub-goal), on the distance field `context.field`, keeping the
        footprint at `margin` (metres beyond each covering disc)."""
        raise NotImplementedError(f"{type(self).__name__}.propose")

    def reset_planner(self) -> None:
        """Forget the planner's state between steps (a new episode or goal)."""

    def describe(self) -> dict:
        """The planner's settings, for the result JSON."""
        return {"controller": self.name}

    # --- the Controller's stages a peer replaces ----------------------------------------------------------------
    def reset(self) -> None:
        super().reset()
        self.reset_planner()

    def warm_up(self, grid_shape: tuple[int, int], resolution: float) -> float:
        """As `Controller.warm_up` (one step on a free grid, then a reset), without the SQP's fallback solver."""
        t0 = time.perf_counter()
        h, w = grid_shape
        free = OccupancyGrid(
            np.zeros(grid_shape, np.int8), resolution, (-0.5 * w * resolution, -0.5 * h * resolution, 0.0)
        )
        self.step(free, np.zeros(3), np.zeros(2), np.array([1.0, 0.0, 0.0]))
        self.reset()
        return time.perf_counter() - t0

    def _track_goal(self, goal: np.ndarray, pose: np.ndarray) -> None:
        super()._track_goal(goal, pose)
        if self._goal_changed:
            self.reset_planner()  # its sequence was for the old goal

    def _route(
        self, grid: OccupancyGrid, field_: DistanceField, pose: np.ndarray, goal: np.ndarray, own: bool, now: float
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """`Controller._route`, remembering the path it followed and the progress along it (`path_ahead`)."""
        subgoal, reference = super()._route(grid, field_, pose, goal, own, now)
        if own:  # the own path, or none: straight to the goal (nothing seen in the way)
            self._followed = (self._own.path, self._own_progress, goal.copy())
        else:
            self._followed = (self._path, self._progress, goal.copy())
        return subgoal, reference

    def path_ahead(self, pose: np.ndarray, spacing: float) -> np.ndarray:
        """The path this step follows, pruned ahead of the robot (`peers.local_path.pruned_path`) to the horizon's
        reach at top speed plus 0.3 m (Nav2's example: prune_distance 1.7 m for 0.5 m/s over 2.8 s)."""
        path, progress, goal = self._followed
        prune = self.robot.v_max * self.mpc_config.N * self.mpc_config.dt + 0.3
        return pruned_path(path, pose, goal, progress, prune, spacing)

    # --- the shared safety check ---------------------------------------------------------------------------------
    def window(self, velocity: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The dynamic window of this drive: `reachable` (the acceleration limits) intersected with what a lagging
        drive reaches in one period on a command inside the velocity limits (`ActuationModel.reach`), so that every
        velocity a peer samples is one the robot will have one step on."""
        dt = self.mpc_config.dt
        low, high = reachable(velocity, self.robot, dt)
        if self._actuation is not None:
            current = self.robot.clip_control(np.asarray(velocity, dtype=float))
            lag_low, lag_high = self._actuation.reach(current, self.robot.control_lower, self.robot.control_upper, dt)
            low, high = np.maximum(low, lag_low), np.minimum(high, lag_high)
        return low, np.maximum(high, low)

    def required_clearance(self, field_: DistanceField, pose: np.ndarray, margin: float | None) -> float:
        """The `footprint_clearance` a motion from `pose` must keep: the step's `margin` (default the safety margin);
        from a pose already inside that band, `MPCConfig.band_margin_m` (never more than `margin`) or, nearer still,
        the clearance it has now (`SQPMPC._constraint_lower`'s band rule), less `CLEARANCE_TOLERANCE_M`: a stop is
        always admissible, a move nearer the obstacle never."""
        margin = self.robot.safety_margin if margin is None else float(margin)
        now = float(footprint_clearance(self.mpc(field_.shape), field_, np.asarray(pose, dtype=float)))
        if now >= margin:
            return margin
        return min(now, margin, self.mpc_config.band_margin_m) - CLEARANCE_TOLERANCE_M

    def trajectory_clearance(self, field_: DistanceField, states: np.ndarray, controls: np.ndarray) -> float:
        """min of `footprint_clearance` along knots `states` (M+1, 3) joined by `controls` (M, 2), densified as the
        MPC's checks densify (`MPCConfig.densify` points a period, each with its heading yaw_k + w_k tau)."""
        dt, n = self.mpc_config.dt, self.mpc_config.densify
        pts = self.robot.densify(states, controls, dt, n)
        tau = (np.arange(n) / n) * dt
        yaw = np.concatenate([(states[:-1, 2:3] + controls[:, 1:2] * tau[None, :]).reshape(-1), states[-1:, 2]])
        poses = np.concatenate([pts, yaw[:, None]], axis=1)
        return float(np.min(footprint_clearance(self.mpc(field_.shape), field_, poses)))

    def _plan_safe(
        self,
        field_: DistanceField,
        pose: np.ndarray,
        controls: np.ndarray,
        margin: float | None,
        braking: bool = True,
        velocity: np.ndarray | None = None,
    ) -> bool:
        """`controls` from `pose` (the first as the drive reaches it from the start `velocity`, when given:
        `Controller.as_driven`), then braked to rest (`braking_tail`; `braking=False`: the horizon alone), keep
        `required_clearance` on `footprint_clearance` along the densified arc, and clear the predicted moving
        obstacles as the MPC's check demands (module docstring). Every command a peer sends passes it: its proposal
        (`_solve`) and the previous plan the fallback follows."""
        controls = np.asarray(controls, dtype=float).reshape(-1, 2)
        if controls.shape[0] < 1 or not np.all(np.isfinite(controls)):
            return False
        if velocity is not None:
            controls = self.as_driven(controls, velocity)
        if braking:
            controls = np.concatenate([controls, self.braking_tail(controls[-1])])
        states = self.robot.rollout(pose, controls, self.mpc_config.dt)
        if self._predicted is not None and not self._clear_of_predicted(self.mpc(field_.shape), states, margin):
            return False
        return self.trajectory_clearance(field_, states, controls) >= self.required_clearance(field_, pose, margin)

    def _warm_start(self, context: WarmStartContext) -> tuple[WarmStart | None, str]:
        return None, self.name

    def _solve(
        self,
        context: WarmStartContext,
        warm: WarmStart | None,
        source: str,
        max_iter: int | None,
        now: float,
        obstacles: PredictedObstacles | None = None,
    ) -> tuple[PlanResult | None, str | None]:
        """The peer's proposal at the context's margin, checked (module docstring). A start in collision is refused as
        the MPC refuses it (`SQPMPC.solve`: a covering disc nearer than its radius less `MPCConfig.start_tolerance_m`),
        which starts the controller's blocked clock and, after `blocked_recovery_s`, the recoveries."""
        t0 = time.perf_counter()
        field_, pose, velocity, margin = context.field, context.pose, context.velocity, context.margin
        mpc = self.mpc(field_.shape)
        disc_d0 = mpc.collision.disc_distances(field_, pose)
        if np.any(disc_d0 < mpc.discs[:, 2] - self.mpc_config.start_tolerance_m):
            if self._blocked_since is None:
                self._blocked_since = now
                log.warning(
                    "start blocked: a covering disc is in collision; recoveries in %.1f s",
                    self.config.blocked_recovery_s,
                )
            return None, "start pose in collision"
        self._blocked_since = None
        proposal = self.propose(context, margin)
        controls = np.asarray(proposal.controls, dtype=float).reshape(-1, 2)
        if controls.shape[0] < 1 or not np.all(np.isfinite(controls)):
            controls = self.stop_command(velocity)[None]
            safe, status = False, f"{REFUSED}: non-finite proposal"
        else:
            safe = self._plan_safe(field_, pose, controls[:1], margin, velocity=velocity)
            status = ACCEPTED if safe else REFUSED
        states = self.robot.rollout(pose, controls, self.mpc_config.dt)
        footprint = self.trajectory_clearance(field_, states, controls)
        pts = self.robot.densify(states, controls, self.mpc_config.dt, self.mpc_config.densify)
        elapsed = time.perf_counter() - t0
        return (
            PlanResult(
                states=states,
                controls=controls,
                iterations=int(proposal.iterations),
                time_s=elapsed,
                status=status,
                success=bool(safe),
                cost=float(proposal.cost),
                max_dynamics_violation=0.0,  # the states are the controls' own rollout
                min_clearance=field_.min_clearance(pts),
                start=self.name,
                dt=self.mpc_config.dt,
                wall_time_s=elapsed,
                footprint_clearance=footprint,
                required_margin=self.required_clearance(field_, pose, margin),
            ),
            None,
        )


def reachable(velocity: np.ndarray, robot: RobotModel, dt: float) -> tuple[np.ndarray, np.ndarray]:
    """The dynamic window (Fox et al. 1997, Sec. 3.2, V_d): the (v, w) reachable from `velocity` within one period `dt`
    under the acceleration limits, intersected with the velocity limits (V_s); (low, high), each (2,)."""
    current = robot.clip_control(np.asarray(velocity, dtype=float))
    step = robot.accel_limits * dt
    low = np.maximum(current - step, robot.control_lower)
    high = np.minimum(current + step, robot.control_upper)
    return low, np.maximum(high, low)


def plan_v_min(robot: RobotModel, mpc_config: MPCConfig) -> float:
    """The least forward speed plans may use: the robot's v_min, raised to `MPCConfig.plan_v_min` when that is set
    (a robot that may reverse but whose sensor does not see behind it plans forward only), as the MPC bounds it."""
    if mpc_config.plan_v_min is None:
        return robot.v_min
    return min(max(robot.v_min, mpc_config.plan_v_min), robot.v_max)
