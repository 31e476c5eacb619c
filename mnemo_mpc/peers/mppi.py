"""MPPI in the MPC's place: pytorch-mppi's sampler with Nav2 MPPI's critics (`mnemo_mpc.peers.critics`).

Model Predictive Path Integral control (Williams et al. 2017, "Information Theoretic MPC for Model-Based
Reinforcement Learning", Algorithm 2, as `pytorch_mppi.MPPI` implements it): K control sequences are sampled around
the previous step's sequence (shifted one step), rolled out through the robot's model, scored, and averaged with the
weights exp(-(S_k - min S) / temperature); the average's first control is the command. The sampler, the noise, the
shift and the weighting are the library's; this module gives it the model and the costs, as Nav2's
nav2_mppi_controller arranges them:

* the model (Nav2's DiffDrive motion model): the unicycle of `planning.robot` (the MPC's own discretisation) whose
  velocities follow the sampled controls within the acceleration limits, state (x, y, yaw, v, w);
* the costs: Nav2's critics, scored on whole trajectories in the library's terminal-cost hook (Nav2 scores whole
  trajectories too), plus Nav2's control cost gamma * U^T Sigma^-1 eps: the library charges temperature * U^T
  Sigma^-1 eps (Williams et al.'s lambda), so the difference (gamma - temperature) is added there, which gives Nav2's
  decoupled smoothness term exactly;
* Nav2's soft reset: when every sampled trajectory collides (its fail_flag) the sequence is reset to zeros and the
  sampling run once more (retry_attempt_limit 1).

Same horizon and limits as the MPC: N steps of MPCConfig.dt, the robot's velocity and acceleration limits, the MPC's
least planned speed. `MPPIConfig` holds the sampler's settings beside Nav2's defaults (docs/peers.md); on a 2-core
CPU one torch thread and 1000 samples (Nav2's batch_size) take ~10-20 ms a step.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import numpy as np

from mnemo_mpc.errors import InputError, is_real
from mnemo_mpc.nav.controller import ControllerConfig, WarmStartContext
from mnemo_mpc.peers.base import PeerController, Proposal, plan_v_min
from mnemo_mpc.peers.critics import CriticConfig, Scene, Scores, score
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MPPIConfig:
    """The sampler's settings; Nav2's defaults (nav2_mppi_controller README) unless noted. The horizon is the MPC's
    (N steps of its dt), not Nav2's 56 x 0.05 s: the same look-ahead for every planner in a comparison."""

    batch_size: int = 1000  # Nav2 batch_size 1000 (its Jazzy example: 2000)
    iteration_count: int = 1  # Nav2 iteration_count 1 ("prefer more batches")
    temperature: float = 0.3  # Nav2 temperature 0.3 (pytorch-mppi's lambda_)
    gamma: float = 0.015  # Nav2 gamma 0.015: the control cost's weight
    v_std: float = 0.2  # m/s, Nav2 vx_std 0.2
    w_std: float = 0.4  # rad/s, Nav2 wz_std 0.4
    retry_attempt_limit: int = 1  # Nav2 retry_attempt_limit 1: soft resets when every trajectory collides
    threads: int = 1  # torch threads: the samples are small tensors, and the machine is shared (2 cores)
    seed: int = 0  # the sampler's noise, reproducible per episode (its own RNG state, not torch's global one)
    critics: CriticConfig = field(default_factory=CriticConfig)

    def __post_init__(self) -> None:
        for name, least in (("batch_size", 2), ("iteration_count", 1), ("threads", 1), ("seed", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"MPPIConfig.{name}: expected an integer >= {least}, got {value!r}")
        value = self.retry_attempt_limit
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"MPPIConfig.retry_attempt_limit: expected an integer >= 0, got {value!r}")
        for name in ("temperature", "v_std", "w_std"):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"MPPIConfig.{name}: expected a finite number > 0, got {value!r}")
        if not (is_real(self.gamma) and self.gamma >= 0):
            raise InputError(f"MPPIConfig.gamma: expected a finite number >= 0, got {self.gamma!r}")
        if not isinstance(self.critics, CriticConfig):
            raise InputError(f"MPPIConfig.critics: expected a CriticConfig, got {type(self.critics).__name__}")


class MPPIController(PeerController):
    """The Controller with an MPPI planner in the SQP's place (`peers.base`)."""

    name = "mppi"

    def __init__(
        self,
        robot: RobotModel | None = None,
        mpc_config: MPCConfig | None = None,
        config: ControllerConfig | None = None,
        mppi_config: MPPIConfig | None = None,
        enabled_critics: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(robot, mpc_config, config)
        import torch  # the [peers] extra: torch and pytorch-mppi

        self.mppi_config = mppi_config or MPPIConfig()
        self.enabled_critics = enabled_critics  # None: all (tests switch one off to see what it guards)
        torch.set_num_threads(self.mppi_config.threads)
        self._torch = torch
        self._mppi = None
        self._scene: Scene | None = None
        self.last_scores: Scores | None = None
        self.reset_planner()

    def describe(self) -> dict:
        return {"controller": self.name, "mppi": dataclasses.asdict(self.mppi_config), "library": "pytorch-mppi"}

    def reset_planner(self) -> None:
        """A fresh sampler: a zero control sequence (Nav2 resets to zeros) and the noise seeded again."""
        torch = self._torch
        cfg, robot, mpc = self.mppi_config, self.robot, self.mpc_config
        dtype = torch.float64
        generator = torch.Generator().manual_seed(cfg.seed)
        self._rng_state = generator.get_state()
        lower = torch.tensor([plan_v_min(robot, mpc), -robot.w_max], dtype=dtype)
        upper = torch.tensor([robot.v_max, robot.w_max], dtype=dtype)
        from pytorch_mppi import MPPI

        self._mppi = MPPI(
            self._dynamics,
            lambda state, action: torch.zeros(state.shape[0], dtype=dtype),  # every critic scores whole trajectories
            nx=5,
            noise_sigma=torch.diag(torch.tensor([cfg.v_std**2, cfg.w_std**2], dtype=dtype)),
            num_samples=cfg.batch_size,
            horizon=mpc.N,
            terminal_state_cost=self._trajectory_cost,
            lambda_=cfg.temperature,
            u_min=lower,
            u_max=upper,
            U_init=torch.zeros(mpc.N, 2, dtype=dtype),
        )

    # --- pytorch-mppi's model and cost -------------------------------------------------------------------------
    def _dynamics(self, state, action):
        """(K, 5) x (K, 2) -> (K, 5): velocities towards the sampled controls within the acceleration limits, then
        `planning.robot.unicycle_step` (the MPC's model)."""
        torch = self._torch
        dt = self.mpc_config.dt
        a, alpha = self.robot.a_max * dt, self.robot.alpha_max * dt
        v = torch.minimum(torch.maximum(action[:, 0], state[:, 3] - a), state[:, 3] + a)
        w = torch.minimum(torch.maximum(action[:, 1], state[:, 4] - alpha), state[:, 4] + alpha)
        mid = state[:, 2] + 0.5 * dt * w
        return torch.stack(
            [state[:, 0] + dt * v * torch.cos(mid), state[:, 1] + dt * v * torch.sin(mid), state[:, 2] + dt * w, v, w],
            dim=1,
        )

    def _trajectory_cost(self, states, actions):
        """The library's terminal-cost hook, given every rollout: (1, K, T, 5), (1, K, T, 2) -> (K,)."""
        torch = self._torch
        assert self._scene is not None
        x = states[0].detach().cpu().numpy()
        u = actions[0].detach().cpu().numpy()
        scores = score(self.mppi_config.critics, self._scene, x[..., :3], x[..., 3:], u, enabled=self.enabled_critics)
        self.last_scores = scores
        # Nav2's control cost gamma U^T Sigma^-1 eps in place of the library's temperature U^T Sigma^-1 eps.
        mppi, cfg = self._mppi, self.mppi_config
        inv = 1.0 / torch.diag(mppi.noise_sigma)
        control = torch.sum(mppi.U * mppi.noise * inv, dim=(1, 2))
        return torch.as_tensor(scores.total, dtype=states.dtype) + (cfg.gamma - cfg.temperature) * control

    # --- the peer's step ----------------------------------------------------------------------------------------
    def propose(self, context: WarmStartContext, margin: float) -> Proposal:
        torch = self._torch
        field_, pose = context.field, context.pose
        mpc = self.mpc(field_.shape)
        path = self.path_ahead(pose, field_.grid.resolution)
        goal = self._goal if self._goal is not None and np.hypot(*(path[-1] - self._goal[:2])) < 1e-6 else None
        self._scene = Scene(
            field=field_,
            checker=mpc.collision,
            pose=np.asarray(pose, dtype=float),
            path=path,
            goal=goal,
            # the critics read the bilinear field: the safety check's requirement plus the MPC's buffer (`peers.base`)
            required_margin=self.required_clearance(field_, pose, margin) + self.mpc_config.clearance_buffer,
            dt=self.mpc_config.dt,
        )
        state = torch.tensor(np.concatenate([pose, self.robot.clip_control(context.velocity)]), dtype=torch.float64)
        cfg = self.mppi_config
        iterations = 0
        with torch.random.fork_rng(devices=[]):  # the sampler's own noise stream; torch's global RNG untouched
            torch.set_rng_state(self._rng_state)
            for attempt in range(cfg.retry_attempt_limit + 1):
                for i in range(cfg.iteration_count):
                    self._mppi.command(state, shift_nominal_trajectory=(i == 0 and attempt == 0))
                    iterations += 1
                if not (self.last_scores is not None and self.last_scores.all_collide):
                    break
                # Nav2's soft reset: every trajectory collides; start again from zeros
                self._mppi.U = torch.zeros_like(self._mppi.U)
            self._rng_state = torch.get_rng_state()
        sequence = self._mppi.U.detach().cpu().numpy()
        controls = self._feasible(sequence, context.velocity)
        best = float(self._mppi.cost_total.min()) if self._mppi.cost_total is not None else float("nan")
        return Proposal(controls, iterations, best)

    def _feasible(self, sequence: np.ndarray, velocity: np.ndarray) -> np.ndarray:
        """The averaged sequence (N, 2) as the drive follows it from `velocity`: each step within the acceleration
        limits of the last (what the rollouts scored)."""
        robot, dt = self.robot, self.mpc_config.dt
        step = robot.accel_limits * dt
        out = np.empty_like(sequence)
        u = robot.clip_control(np.asarray(velocity, dtype=float))
        for k, target in enumerate(sequence):
            u = np.clip(robot.clip_control(target), u - step, u + step)
            out[k] = u
        return out
