"""The drive as the controller models it (issue 24 item 2): command latency and first-order actuator lag.

A real base acts on a command `latency_s` after it is sent, and each velocity loop follows its command as a
first-order system, v' = (c - v) / lag. The MPC plans on the unicycle with velocity controls, starting from the state
it is given. The controller therefore

1. **predicts** the state at the instant the command it is computing will act: from the measured pose and velocity
   (whose age the node measures from the message stamps) over age + latency, with the commands already sent and
   still in the pipe acting through the lag (`CommandHistory.predict`, the Smith-predictor idea); and
2. **inverts the lag**: the MPC's first control u_0 is the velocity the robot should *have* one step later, and the
   command that takes a first-order loop from v to u_0 in dt is c = v + (u_0 - v) / (1 - exp(-dt / lag))
   (`ActuationModel.command_for`), clipped to the velocity limits. The acceleration limits still hold on the
   velocity the robot reaches (|u_0 - v| <= a dt, the MPC's own rate constraint from the predicted velocity).

With latency 0 and lags 0 both are the identity, so the ideal robot's controller is unchanged.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError, is_real

# Integration step of the prediction: fine against the lags (>= 0.05 s for real drives) and the control periods.
PREDICTION_STEP_S = 0.005
MAX_LATENCY_S = 1.0  # a drive that answers a second late is not one a local planner can steer


@dataclass(frozen=True)
class ActuationModel:
    """Command latency [s] and first-order time constants of the linear and angular velocity loops [s]."""

    latency_s: float = 0.0
    lag_v_s: float = 0.0
    lag_w_s: float = 0.0

    def __post_init__(self) -> None:
        for name, high in (("latency_s", MAX_LATENCY_S), ("lag_v_s", 5.0), ("lag_w_s", 5.0)):
            value = getattr(self, name)
            if not (is_real(value) and 0.0 <= value <= high):
                raise InputError(f"{name}: expected seconds in [0, {high}], got {value!r}")

    @property
    def is_identity(self) -> bool:
        return self.latency_s == 0.0 and self.lag_v_s == 0.0 and self.lag_w_s == 0.0

    def response(self, h: float) -> np.ndarray:
        """(2,) the share of a command step each loop covers in `h` seconds, 1 - exp(-h / lag) (1 without lag)."""
        return np.array([-math.expm1(-h / lag) if lag > 0 else 1.0 for lag in (self.lag_v_s, self.lag_w_s)])

    def command_for(self, target: np.ndarray, velocity: np.ndarray, dt: float) -> np.ndarray:
        """The command that takes the loops from `velocity` to `target` in `dt` (module docstring, step 2)."""
        velocity = np.asarray(velocity, dtype=float)
        return velocity + (np.asarray(target, dtype=float) - velocity) / self.response(dt)

    def reach(
        self, velocity: np.ndarray, lower: np.ndarray, upper: np.ndarray, dt: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high), each (2,): the velocities the loops reach from `velocity` in `dt` on a command inside
        [`lower`, `upper`] (the velocity limits), v + (c - v)(1 - exp(-dt / lag)). Near a limit this is narrower
        than the acceleration window: a Jackal turning at 1.6 rad/s gains at most 0.10 rad/s a period towards its
        2.0 rad/s limit, not alpha_max dt = 0.18."""
        velocity = np.asarray(velocity, dtype=float)
        r = self.response(dt)
        return velocity + (np.asarray(lower, dtype=float) - velocity) * r, velocity + (
            np.asarray(upper, dtype=float) - velocity
        ) * r

    def reached(
        self, target: np.ndarray, velocity: np.ndarray, lower: np.ndarray, upper: np.ndarray, dt: float
    ) -> np.ndarray:
        """The velocity the loops reach in `dt` when asked for `target`: `command_for` clipped to [`lower`,
        `upper`], as the controller sends it, then followed through the lag (`target` itself when it is in `reach`)."""
        velocity = np.asarray(velocity, dtype=float)
        command = np.clip(self.command_for(target, velocity, dt), lower, upper)
        return velocity + (command - velocity) * self.response(dt)


class CommandHistory:
    """The commands sent, with their send times, for the prediction over the latency (module docstring, step 1)."""

    def __init__(self, model: ActuationModel, keep_s: float = 2.0) -> None:
        self.model = model
        self.keep_s = keep_s + model.latency_s
        self.sent: deque[tuple[float, np.ndarray]] = deque()

    def reset(self) -> None:
        self.sent.clear()

    def record(self, t_s: float, command: np.ndarray) -> None:
        self.sent.append((float(t_s), np.asarray(command, dtype=float).copy()))
        while self.sent and self.sent[0][0] < t_s - self.keep_s:
            self.sent.popleft()

    def _acting(self, t_s: float, default: np.ndarray) -> np.ndarray:
        """The command acting at `t_s`: the last one sent at or before t_s - latency (else `default`)."""
        due = t_s - self.model.latency_s + 1e-9
        acting = default
        for sent_s, command in self.sent:
            if sent_s > due:
                break
            acting = command
        return acting

    def predict(
        self, pose: np.ndarray, velocity: np.ndarray, obs_s: float, until_s: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(pose, velocity) at `until_s` from the measurement (`pose`, `velocity`) taken at `obs_s`: the unicycle
        driven by the loops' response to the commands acting in between. Before the first command the loops hold
        the measured velocity."""
        pose = np.asarray(pose, dtype=float).copy()
        vel = np.asarray(velocity, dtype=float).copy()
        span = until_s - obs_s
        if span <= 1e-9:
            return pose, vel
        steps = max(1, math.ceil(span / PREDICTION_STEP_S - 1e-9))
        h = span / steps
        beta = self.model.response(h)
        default = vel.copy()
        for i in range(steps):
            command = self._acting(obs_s + i * h, default)
            new = vel + beta * (command - vel)
            v, w = 0.5 * (vel + new)  # the average over the step (exact enough at 5 ms)
            mid = pose[2] + 0.5 * w * h
            pose += (v * h * math.cos(mid), v * h * math.sin(mid), w * h)
            vel = new
        pose[2] = (pose[2] + math.pi) % (2 * math.pi) - math.pi
        return pose, vel
