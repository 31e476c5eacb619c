"""The dynamic window approach in the MPC's place (Fox, Burgard and Thrun 1997, "The Dynamic Window Approach to
Collision Avoidance", IEEE Robotics & Automation Magazine 4(1)).

Sec. 3 of the paper, with the project's robot model and footprint check:

1. Search space: circular arcs, one (v, w) held. Of those, the *dynamic window* V_d (the velocities reachable within
   one control period under the acceleration limits, inside the velocity limits V_s, and on a lagging drive within
   what its loops follow in a period: `PeerController.window`) is
   sampled on a `v_samples` x `w_samples` grid, and only *admissible* velocities V_a are kept: the robot, driving the
   arc for one period and then braking as hard as it can, stops before any obstacle (the paper's
   v <= sqrt(2 dist(v, w) dv_b), w <= sqrt(2 dist(v, w) dw_b), evaluated here by rolling the stop out: the same
   clearance at the same margin as the shared safety layer, `peers.base.footprint_clearance` and
   `PeerController.required_clearance`).
2. Objective G(v, w) = sigma(alpha heading + beta dist + gamma velocity), each term normalised to [0, 1] over the
   admissible set: `heading` = pi - |bearing of the target - heading| at the pose the robot reaches when it drives
   the arc for one period and then brakes (the paper's definition); `dist` = the arc length driven before the
   footprint meets an obstacle within `sim_time_s` (capped at `dist_cap_m`: "a large constant" when none); `velocity`
   = v. sigma smooths G over the (v, w) grid (a `smoothing` x `smoothing` box).

The target is a point `lookahead_m` along the path the Controller tracks (its reference, `nav.reference`, or the
straight line to the sub-goal): the paper steers to a goal in sight; following a global plan through a carrot on it is
how DWA is run under a global planner (ROS's dwa_local_planner, Nav2's DWB with its path critics).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.nav.controller import ControllerConfig, WarmStartContext
from mnemo_mpc.peers.base import PeerController, Proposal, footprint_clearance, plan_v_min
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel


@dataclass(frozen=True)
class DWAConfig:
    """The window's sampling and the objective's weights. The paper's weights were set for RHINO's synchro-drive at
    up to 0.95 m/s; these were chosen on our seven world families (docs/peers.md)."""

    v_samples: int = 11
    w_samples: int = 21
    sim_time_s: float | None = None  # arcs are checked this far ahead; None: the MPC's horizon, N * dt
    substeps: int = 4  # footprint checks per control period along an arc (a 0.5 m/s robot: every 1.25 cm)
    heading_weight: float = 0.8  # alpha
    dist_weight: float = 0.3  # beta
    velocity_weight: float = 0.4  # gamma
    dist_cap_m: float = 1.0  # dist of an arc that meets no obstacle within sim_time_s
    smoothing: int = 3  # sigma's box, in samples (1: none)
    lookahead_m: float = 0.8  # the target's distance along the path

    def __post_init__(self) -> None:
        for name, least in (("v_samples", 2), ("w_samples", 3), ("substeps", 1), ("smoothing", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"DWAConfig.{name}: expected an integer >= {least}, got {value!r}")
        for name in ("heading_weight", "dist_weight", "velocity_weight"):
            value = getattr(self, name)
            if not (is_real(value) and value >= 0):
                raise InputError(f"DWAConfig.{name}: expected a finite number >= 0, got {value!r}")
        for name in ("dist_cap_m", "lookahead_m"):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"DWAConfig.{name}: expected metres > 0, got {value!r}")
        if self.sim_time_s is not None and not (is_real(self.sim_time_s) and self.sim_time_s > 0):
            raise InputError(f"DWAConfig.sim_time_s: expected seconds > 0 or None, got {self.sim_time_s!r}")


@dataclass
class Window:
    """One step's evaluated window, for tests and plots: the (v, w) samples (S, 2), which are admissible (S,), the
    objective (S,) (-inf where not admissible) and the chosen index."""

    samples: np.ndarray
    admissible: np.ndarray
    objective: np.ndarray
    chosen: int | None


class DWAController(PeerController):
    """The Controller with the dynamic window approach in the SQP's place (`peers.base`)."""

    name = "dwa"

    def __init__(
        self,
        robot: RobotModel | None = None,
        mpc_config: MPCConfig | None = None,
        config: ControllerConfig | None = None,
        dwa_config: DWAConfig | None = None,
    ) -> None:
        super().__init__(robot, mpc_config, config)
        self.dwa_config = dwa_config or DWAConfig()
        self.last_window: Window | None = None

    def describe(self) -> dict:
        return {"controller": self.name, "dwa": dataclasses.asdict(self.dwa_config)}

    def propose(self, context: WarmStartContext, margin: float) -> Proposal:
        cfg, robot, dt = self.dwa_config, self.robot, self.mpc_config.dt
        field_, pose, velocity = context.field, np.asarray(context.pose, dtype=float), context.velocity
        mpc = self.mpc(field_.shape)
        required = self.required_clearance(field_, pose, margin)

        low, high = self.window(velocity)
        low[0] = max(low[0], min(plan_v_min(robot, self.mpc_config), high[0]))
        vs = np.linspace(low[0], high[0], cfg.v_samples)
        ws = np.linspace(low[1], high[1], cfg.w_samples)
        grid_v, grid_w = np.meshgrid(vs, ws, indexing="ij")  # (V, W)
        samples = np.stack([grid_v.ravel(), grid_w.ravel()], axis=-1)  # (S, 2)

        # Admissible (V_a): one period on the arc, then the hardest stop, keeps the footprint's margin on the safety
        # check's own clearance (`peers.base.footprint_clearance`: exact at corners, the MPC's buffer elsewhere).
        stop = self._stopping(samples)  # (S, M, 2)
        stop_poses = _rollout(pose, stop, dt, cfg.substeps)  # (S, M * substeps + 1, 3)
        stop_margin = footprint_clearance(mpc, field_, stop_poses).min(axis=1)
        admissible = stop_margin >= required

        # dist: the arc length driven before the footprint meets an obstacle, within sim_time_s.
        horizon = cfg.sim_time_s if cfg.sim_time_s is not None else self.mpc_config.N * dt
        steps = max(int(math.ceil(horizon / dt)), 1)
        arcs = _rollout(pose, np.repeat(samples[:, None, :], steps, axis=1), dt, cfg.substeps)
        # (the bilinear field less the MPC's buffer: a score over S x P poses, where the exact distance costs too much)
        buffer = self.mpc_config.clearance_buffer
        hit = mpc.collision.pose_margins(field_, arcs[:, 1:]) - buffer < required  # (S, P)
        t_hit = np.where(hit.any(axis=1), (hit.argmax(axis=1) + 1) * dt / cfg.substeps, np.inf)
        free = ~np.isfinite(t_hit)
        dist = np.where(
            free, cfg.dist_cap_m, np.minimum(np.abs(samples[:, 0]) * np.where(free, 0.0, t_hit), cfg.dist_cap_m)
        )

        # heading: at the pose reached after the period and the stop (the paper's definition).
        target = _target(self.path_ahead(pose, field_.grid.resolution), cfg.lookahead_m)
        end = stop_poses[:, -1]
        bearing = np.arctan2(target[1] - end[:, 1], target[0] - end[:, 0])
        heading = math.pi - np.abs((bearing - end[:, 2] + math.pi) % (2 * math.pi) - math.pi)

        objective = np.full(len(samples), -np.inf)
        chosen = None
        if np.any(admissible):
            g = (
                cfg.heading_weight * _normalised(heading, admissible)
                + cfg.dist_weight * _normalised(dist, admissible)
                + cfg.velocity_weight * _normalised(samples[:, 0], admissible)
            )
            if cfg.smoothing > 1:
                g = ndimage.uniform_filter(
                    np.where(admissible, g, 0.0).reshape(grid_v.shape), cfg.smoothing, mode="nearest"
                ).ravel()
            objective = np.where(admissible, g, -np.inf)
            chosen = int(np.argmax(objective))
        self.last_window = Window(samples, admissible, objective, chosen)
        if chosen is None:
            # Nothing admissible: the hardest stop (the safety check decides; else the fallback stops anyway).
            return Proposal(self.stop_command(velocity)[None], 1, float("nan"))
        # The plan: the chosen arc held for the horizon (what DWA evaluated; the safety check reads its first step).
        return Proposal(np.repeat(samples[chosen][None], self.mpc_config.N, axis=0), 1, -float(objective[chosen]))

    def _stopping(self, samples: np.ndarray) -> np.ndarray:
        """(S, M, 2): each sample held one period, then `Controller.braking_tail` in closed form (each step takes
        |v| and |w| down by a_max dt and alpha_max dt, to zero; zero-padded to the longest)."""
        step = self.robot.accel_limits * self.mpc_config.dt
        u = self.robot.clip_control(samples)
        m = int(np.max(np.ceil(np.abs(u) / step - 1e-9)))
        k = np.arange(1, m + 1)[None, :, None]
        tail = np.sign(u)[:, None, :] * np.maximum(np.abs(u)[:, None, :] - k * step, 0.0)
        return np.concatenate([samples[:, None, :], tail], axis=1)


def _rollout(pose: np.ndarray, controls: np.ndarray, dt: float, substeps: int) -> np.ndarray:
    """Poses (S, M * substeps + 1, 3) from `pose` under `controls` (S, M, 2), each held for dt, integrated in
    `substeps` steps of `planning.robot.unicycle_step`'s midpoint rule (exact for a held (v, w))."""
    s, m = controls.shape[:2]
    h = dt / substeps
    u = np.repeat(controls, substeps, axis=1)  # (S, M * substeps, 2)
    yaw = pose[2] + np.concatenate([np.zeros((s, 1)), np.cumsum(h * u[..., 1], axis=1)], axis=1)
    mid = yaw[:, :-1] + 0.5 * h * u[..., 1]
    x = pose[0] + np.concatenate([np.zeros((s, 1)), np.cumsum(h * u[..., 0] * np.cos(mid), axis=1)], axis=1)
    y = pose[1] + np.concatenate([np.zeros((s, 1)), np.cumsum(h * u[..., 0] * np.sin(mid), axis=1)], axis=1)
    return np.stack([x, y, yaw], axis=-1)


def _target(path: np.ndarray, lookahead: float) -> np.ndarray:
    """The point `lookahead` metres along `path` (M, 2) (its end when shorter)."""
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(path, axis=0).T))])
    at = min(lookahead, s[-1])
    return np.array([np.interp(at, s, path[:, 0]), np.interp(at, s, path[:, 1])])


def _normalised(values: np.ndarray, over: np.ndarray) -> np.ndarray:
    """`values` scaled to [0, 1] by their range over the `over` mask (0 where the range is empty)."""
    lo, hi = float(values[over].min()), float(values[over].max())
    return (values - lo) / (hi - lo) if hi - lo > 1e-12 else np.zeros_like(values)
