"""The drive as the controller models it (issue 24 item 2): command latency, first-order actuator lag and slip.

A real base acts on a command `latency_s` after it is sent, each velocity loop follows its command as a first-order
system, and a skid-steer body drives and turns less than its wheels: the body's velocity b follows slip * c through
the lag, b' = (slip c - b) / lag, per axis (slip = body over wheel velocity, `slip_v`, `slip_w`; what `mnemo-mpc
identify` fits). The MPC plans the body's motion on the unicycle with velocity controls, starting from the state it is
given. The controller therefore

1. **predicts** the state at the instant the command it is computing will act: from the measured pose and velocity
   (whose age the node measures from the message stamps) over age + latency, with the commands already sent and
   still in the pipe acting through the lag (`CommandHistory.predict`, the Smith-predictor idea); and
2. **inverts the lag and the slip**: the MPC's first control u_0 is the velocity the body should *have* one step
   later, and the command that takes it there from b in dt is c = (b + (u_0 - b) / (1 - exp(-dt / lag))) / slip
   (`ActuationModel.command_for`), clipped to the velocity limits. The acceleration limits still hold on the
   velocity the robot reaches (|u_0 - b| <= a dt, the MPC's own rate constraint from the predicted velocity).

The measured twist is odometry's: v from the wheels, which do not see the slip, and the yaw rate from a gyro, which
does (the simulator's, and a wheel odometry fused with an IMU). The body's velocity is therefore (slip_v v, w)
(`ActuationModel.body_velocity`). Of the Jackal profile's effects taken one at a time, its slip (the body turns 0.85 of
what its wheels do) cost the most of the 14 dense worlds mapless: 4 of the first 9 reached unmodelled, 9 of 14
inverted (`docs/realism.md`).

With latency 0, lags 0 and slip 1 all of it is the identity, so the ideal robot's controller is unchanged.
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
MIN_SLIP, MAX_SLIP = 0.2, 1.5  # body over wheel velocity (`mnemo_mpc.realism` simulates up to 1.5)


@dataclass(frozen=True)
class ActuationModel:
    """Command latency [s], first-order time constants of the linear and angular velocity loops [s], and the slip
    factors (body over wheel velocity) of each axis."""

    latency_s: float = 0.0
    lag_v_s: float = 0.0
    lag_w_s: float = 0.0
    slip_v: float = 1.0
    slip_w: float = 1.0

    def __post_init__(self) -> None:
        for name, high in (("latency_s", MAX_LATENCY_S), ("lag_v_s", 5.0), ("lag_w_s", 5.0)):
            value = getattr(self, name)
            if not (is_real(value) and 0.0 <= value <= high):
                raise InputError(f"{name}: expected seconds in [0, {high}], got {value!r}")
        for name in ("slip_v", "slip_w"):
            value = getattr(self, name)
            # A body that keeps less than a fifth of its wheels' motion is not one a velocity command steers
            if not (is_real(value) and MIN_SLIP <= value <= MAX_SLIP):
                raise InputError(f"{name}: expected a factor in [{MIN_SLIP}, {MAX_SLIP}], got {value!r}")

    @property
    def is_identity(self) -> bool:
        return self.latency_s == 0.0 and self.lag_v_s == 0.0 and self.lag_w_s == 0.0 and self.slip == (1.0, 1.0)

    @property
    def slip(self) -> tuple[float, float]:
        return (self.slip_v, self.slip_w)

    def body_velocity(self, measured: np.ndarray) -> np.ndarray:
        """The body's (v, w) from odometry's twist: the wheels' v times slip_v, the gyro's w as it is."""
        measured = np.asarray(measured, dtype=float)
        return np.array([measured[0] * self.slip_v, measured[1]])

    def measured_twist(self, body: np.ndarray) -> np.ndarray:
        """Odometry's twist for the body's (v, w): the inverse of `body_velocity`."""
        body = np.asarray(body, dtype=float)
        return np.array([body[0] / self.slip_v, body[1]])

    def response(self, h: float) -> np.ndarray:
        """(2,) the share of a command step each loop covers in `h` seconds, 1 - exp(-h / lag) (1 without lag)."""
        return np.array([-math.expm1(-h / lag) if lag > 0 else 1.0 for lag in (self.lag_v_s, self.lag_w_s)])

    def lead(self, dt: float) -> np.ndarray:
        """(2,) how much a command's step exceeds the step it brings the body's velocity in `dt`: 1 / (response x
        slip) per axis (1 for an ideal drive). The node's limiter and the fuzz monitor bound command steps by it."""
        return 1.0 / (self.response(dt) * np.array(self.slip))

    def command_for(self, target: np.ndarray, velocity: np.ndarray, dt: float) -> np.ndarray:
        """The command that takes the body from `velocity` to `target` in `dt` (module docstring, step 2)."""
        velocity = np.asarray(velocity, dtype=float)
        return (velocity + (np.asarray(target, dtype=float) - velocity) / self.response(dt)) / np.array(self.slip)

    def reach(
        self, velocity: np.ndarray, lower: np.ndarray, upper: np.ndarray, dt: float
    ) -> tuple[np.ndarray, np.ndarray]:
        """(low, high), each (2,): the body velocities reached from `velocity` in `dt` on a command inside
        [`lower`, `upper`] (the velocity limits), b + (slip c - b)(1 - exp(-dt / lag)). Near a limit this is
        narrower than the acceleration window: a Jackal turning at 1.6 rad/s gains at most 0.10 rad/s a period
        towards its 2.0 rad/s limit, not alpha_max dt = 0.18."""
        velocity = np.asarray(velocity, dtype=float)
        r, slip = self.response(dt), np.array(self.slip)
        return velocity + (slip * np.asarray(lower, dtype=float) - velocity) * r, velocity + (
            slip * np.asarray(upper, dtype=float) - velocity
        ) * r

    def reached(
        self, target: np.ndarray, velocity: np.ndarray, lower: np.ndarray, upper: np.ndarray, dt: float
    ) -> np.ndarray:
        """The velocity the loops reach in `dt` when asked for `target`: `command_for` clipped to [`lower`,
        `upper`], as the controller sends it, then followed through the lag (`target` itself when it is in `reach`)."""
        velocity = np.asarray(velocity, dtype=float)
        command = np.clip(self.command_for(target, velocity, dt), lower, upper)
        return velocity + (np.array(self.slip) * command - velocity) * self.response(dt)


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
        """(pose, body velocity) at `until_s` from the measurement (`pose`, odometry's twist `velocity`) taken at
        `obs_s`: the unicycle driven by the loops' response to the commands acting in between, through the slip.
        Before the first command the loops hold the measured velocity."""
        model = self.model
        pose = np.asarray(pose, dtype=float).copy()
        vel = model.body_velocity(velocity)
        if until_s - obs_s <= 1e-9:
            return pose, vel
        slip = np.array(model.slip)
        default = vel / slip  # the command that holds the body's velocity
        # Pieces between the instants a new command starts to act, so that each acts from its own instant (5 ms
        # steps starting where they fell put the Jackal's switch up to 5 ms late: 0.02 rad/s off its yaw rate)
        starts = [t + model.latency_s for t, _ in self.sent]
        edges = [obs_s, *sorted(t for t in starts if obs_s + 1e-9 < t < until_s - 1e-9), until_s]
        for a, b in zip(edges[:-1], edges[1:], strict=True):
            command = self._acting(a, default)
            steps = max(1, math.ceil((b - a) / PREDICTION_STEP_S - 1e-9))
            h = (b - a) / steps
            beta = model.response(h)
            for _ in range(steps):
                new = vel + beta * (slip * command - vel)
                v, w = 0.5 * (vel + new)  # the average over the step (exact enough at 5 ms)
                mid = pose[2] + 0.5 * w * h
                pose += (v * h * math.cos(mid), v * h * math.sin(mid), w * h)
                vel = new
        pose[2] = (pose[2] + math.pi) % (2 * math.pi) - math.pi
        return pose, vel
