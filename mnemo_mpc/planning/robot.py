"""Differential-drive (unicycle) robot: state (x, y, yaw), control (v, w), limits and footprint (a disc or a convex
polygon, enforced through the covering discs of `mnemo_mpc.planning.footprint`).

Seed 002 §5.2: the robot "navigates using linear and angular velocity control"; the paper gives no model, so we use
the standard unicycle with a second-order (midpoint-heading) discretisation, which is exact in yaw, smooth in the
controls (no sinc singularity at w = 0) and cheap to differentiate inside the SQP.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.footprint import DEFAULT_COVER_TOLERANCE_M, DiscCover, Footprint


def unicycle_step(state: Any, control: Any, dt: float, cos: Any = np.cos, sin: Any = np.sin) -> tuple[Any, Any, Any]:
    """One discrete step x_{k+1} = f(x_k, u_k) of the unicycle (midpoint-heading rule).

    x+ = x + v dt cos(yaw + w dt / 2),  y+ = y + v dt sin(yaw + w dt / 2),  yaw+ = yaw + w dt.
    Written over generic `cos`/`sin` so the numpy model and the CasADi NLP share one formula.
    """
    x, y, yaw = state[0], state[1], state[2]
    v, w = control[0], control[1]
    mid = yaw + 0.5 * dt * w
    return x + dt * v * cos(mid), y + dt * v * sin(mid), yaw + dt * w


@dataclass(frozen=True)
class RobotModel:
    """Unicycle with TurtleBot-2-like limits (Kobuki: 0.7 m/s, ~3 rad/s peak; we stay conservative indoors).

    Footprint: `footprint` is a convex polygon's vertices in the robot frame (x forward; Nav2's `footprint`), or empty
    for a disc of `radius` (Nav2's `robot_radius`; the default 0.2 m disc). `radius` is always the circumscribed
    radius (for a polygon it must equal the polygon's: build one with `from_footprint`). The MPC enforces the
    footprint through `discs` (K, 3) = (ox, oy, r), which cover it and stick out of it by at most
    `footprint_tolerance`: clearance(p_k + R(yaw_k) o_d) >= r_d + safety_margin for every disc d; a disc robot has
    the single disc (0, 0, radius), which is the constraint clearance(x_k) >= radius + safety_margin.
    Acceleration limits bound |u_k - u_{k-1}| / dt, including the step from the robot's current velocity to u_0.
    """

    radius: float = 0.2
    safety_margin: float = 0.05
    v_min: float = 0.0  # no reversing: a forward-looking sensor cannot see behind the robot
    v_max: float = 0.5
    w_max: float = 1.5
    a_max: float = 1.0
    alpha_max: float = 3.0
    footprint: tuple[tuple[float, float], ...] = ()
    footprint_tolerance: float = DEFAULT_COVER_TOLERANCE_M

    @classmethod
    def from_footprint(cls, footprint: Footprint, **limits: Any) -> RobotModel:
        """The robot with `footprint` (a circle or a polygon) and the other fields from `limits`."""
        if footprint.is_circle:
            return cls(radius=footprint.radius, **limits)
        return cls(radius=footprint.circumscribed_radius, footprint=footprint.vertices, **limits)

    def __post_init__(self) -> None:
        names = ("radius", "safety_margin", "v_min", "v_max", "w_max", "a_max", "alpha_max", "footprint_tolerance")
        for name in names:
            value = getattr(self, name)
            if not math.isfinite(value):
                raise InputError(f"RobotModel.{name}: expected a finite number, got {value}")
        if self.footprint_tolerance <= 0:
            raise InputError(f"RobotModel.footprint_tolerance: expected > 0, got {self.footprint_tolerance}")
        if self.footprint:
            # Stored configs hold the vertices as JSON lists: keep the canonical (hashable, comparable) tuple form.
            try:
                shape = Footprint.polygon(self.footprint)
            except InputError as exc:
                raise InputError(f"RobotModel.{exc}") from exc
            object.__setattr__(self, "footprint", shape.vertices)
            if not math.isclose(self.radius, shape.circumscribed_radius, rel_tol=1e-9, abs_tol=1e-12):
                raise InputError(
                    f"RobotModel.radius: expected the footprint's circumscribed radius {shape.circumscribed_radius!r}"
                    f" m, got {self.radius} (build it with RobotModel.from_footprint)"
                )
        if self.radius <= 0 or self.safety_margin < 0:
            raise InputError(
                f"RobotModel: expected radius > 0 and safety_margin >= 0, got {self.radius}, {self.safety_margin}"
            )
        if not self.v_min <= 0.0 < self.v_max:
            raise InputError(f"RobotModel: expected v_min <= 0 < v_max, got v_min={self.v_min}, v_max={self.v_max}")
        if self.w_max <= 0 or self.a_max <= 0 or self.alpha_max <= 0:
            raise InputError("RobotModel: w_max, a_max and alpha_max must be positive")

    @property
    def clearance(self) -> float:
        """Required distance from the robot centre to the nearest obstacle: radius + safety margin (for a polygon
        footprint, the circumscribed radius: enough at any heading, more than the discs need)."""
        return self.radius + self.safety_margin

    @cached_property
    def shape(self) -> Footprint:
        """The footprint as a `Footprint`: the polygon, or the circle of `radius`."""
        return Footprint(self.footprint) if self.footprint else Footprint.circle(self.radius)

    @cached_property
    def disc_cover(self) -> DiscCover:
        """The covering discs with their stated bound and measured excess (`Footprint.cover`)."""
        return self.shape.cover(self.footprint_tolerance)

    @property
    def discs(self) -> np.ndarray:
        """Covering discs (K, 3) = (ox, oy, r) in the robot frame (x forward): each row is one clearance constraint
        esdf(p + R(yaw) (ox, oy)) >= r + safety_margin; (1, 3) = [[0, 0, radius]] for a disc robot. A copy."""
        return self.disc_cover.discs.copy()

    @property
    def control_lower(self) -> np.ndarray:
        return np.array([self.v_min, -self.w_max])

    @property
    def control_upper(self) -> np.ndarray:
        return np.array([self.v_max, self.w_max])

    @property
    def accel_limits(self) -> np.ndarray:
        """(a_max, alpha_max): bounds on |dv/dt| and |dw/dt|."""
        return np.array([self.a_max, self.alpha_max])

    def step(self, state: np.ndarray, control: np.ndarray, dt: float) -> np.ndarray:
        """The discrete dynamics the MPC uses (`unicycle_step`), on numpy arrays of shape (..., 3) and (..., 2)."""
        s = np.asarray(state, dtype=float)
        u = np.asarray(control, dtype=float)
        x, y, yaw = unicycle_step(np.moveaxis(s, -1, 0), np.moveaxis(u, -1, 0), dt)
        return np.stack([x, y, yaw], axis=-1)

    def rollout(self, state: np.ndarray, controls: np.ndarray, dt: float) -> np.ndarray:
        """States (N+1, 3) from `state` under `controls` (N, 2): `unicycle_step` applied N times, written as running
        sums (the yaw, then x and y along the midpoint headings) that add in the same order as the loop would."""
        s = np.asarray(state, dtype=float)
        u = np.asarray(controls, dtype=float).reshape(-1, 2)
        yaw = np.cumsum(np.concatenate([s[2:3], dt * u[:, 1]]))
        mid = yaw[:-1] + 0.5 * dt * u[:, 1]
        x = np.cumsum(np.concatenate([s[0:1], dt * u[:, 0] * np.cos(mid)]))
        y = np.cumsum(np.concatenate([s[1:2], dt * u[:, 0] * np.sin(mid)]))
        return np.stack([x, y, yaw], axis=-1)

    def clip_control(self, control: np.ndarray) -> np.ndarray:
        return np.clip(np.asarray(control, dtype=float), self.control_lower, self.control_upper)

    def densify(self, states: np.ndarray, controls: np.ndarray, dt: float, substeps: int) -> np.ndarray:
        """Positions (N*substeps+1, 2) along the trajectory between knots.

        Between knots the robot drives the constant-(v, w) arc; this samples that arc exactly (closed form), so a
        clearance check on these points sees what happens between the knots the MPC constrains.
        """
        states = np.asarray(states, dtype=float)
        controls = np.asarray(controls, dtype=float)
        tau = (np.arange(substeps) / substeps) * dt  # (S,)
        yaw0 = states[:-1, 2:3]
        v = controls[:, 0:1]
        w = controls[:, 1:2]
        wt = w * tau[None, :]
        # integral of (cos, sin)(yaw0 + w s) ds over [0, tau]: written with a sinc so w -> 0 is exact.
        half = 0.5 * wt
        sinc = np.sinc(half / np.pi)
        dx = v * tau[None, :] * sinc * np.cos(yaw0 + half)
        dy = v * tau[None, :] * sinc * np.sin(yaw0 + half)
        pts = np.stack([states[:-1, 0:1] + dx, states[:-1, 1:2] + dy], axis=-1).reshape(-1, 2)
        return np.concatenate([pts, states[-1:, :2]], axis=0)
