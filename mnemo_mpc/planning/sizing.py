"""Horizon and local window sized from the robot's profile (issue 10: "the robot can always stop within what it sees").

With N knots of dt seconds the MPC looks N dt v_max metres ahead at top speed. Two requirements fix dt and the local
window for a given N:

* **stop inside the horizon:** the stopping distance at top speed, s_stop = v_max^2 / (2 a_max) plus one control
  period of latency v_max dt, must fit in the horizon, N dt v_max >= s_stop, so a plan that ends at rest always
  exists;
* **the horizon inside the window:** the planned path must stay on the grid the MPC sees, so the window's half-side
  is at least N dt v_max + the circumscribed radius (past the window the ESDF is extrapolated, and the SQP then works
  on made-up geometry: measured on `bench sqp`, a Jackal at 2 m/s with dt = 0.1 (6 m ahead in a 4 m window) converged
  from cold in 48 % of problems; sized as below, 91 %).

The window grows up to `max_cells` at `resolution` (the ESDF's cost grows with its area); where that is not enough, dt
shrinks: dt = min(dt_max, (half window - radius) / (N v_max)). A slow robot keeps dt_max and the smallest window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.robot import RobotModel


@dataclass(frozen=True)
class HorizonSizing:
    dt: float  # MPC step [s]
    window_cells: int  # local window side, cells (square)
    window_m: float  # window_cells * resolution
    lookahead_m: float  # N dt v_max: the horizon's reach at top speed
    stopping_m: float  # v_max^2 / (2 a_max) + v_max dt

    @property
    def min_control_rate_hz(self) -> float:
        """The control loop must run at least once per MPC step."""
        return 1.0 / self.dt


def size_horizon(
    robot: RobotModel,
    n: int = 30,
    *,
    dt_max: float = 0.1,
    resolution: float = 0.05,
    min_cells: int = 80,
    max_cells: int = 120,
) -> HorizonSizing:
    """dt and the square local window for `robot` with `n` knots (module docstring). The defaults give the package's
    standard MPC (dt 0.1 s, 80 x 80 cells at 0.05 m) for the default robot."""
    if n < 1 or not (0 < dt_max and 0 < resolution) or not 4 <= min_cells <= max_cells:
        raise InputError(
            f"size_horizon: expected n >= 1, dt_max > 0, resolution > 0 and 4 <= min_cells <= max_cells, got "
            f"n={n}, dt_max={dt_max}, resolution={resolution}, cells {min_cells}..{max_cells}"
        )
    v, r = robot.v_max, robot.radius
    half_max = 0.5 * max_cells * resolution
    dt = min(dt_max, (half_max - r) / (n * v))
    if dt <= 0:
        raise InputError(f"size_horizon: a {max_cells}-cell window at {resolution} m is smaller than the robot")
    stopping = v * v / (2.0 * robot.a_max) + v * dt
    lookahead = n * dt * v
    if lookahead < stopping:
        raise InputError(
            f"size_horizon: {n} steps of {dt:.3f} s reach {lookahead:.2f} m at {v} m/s, short of the "
            f"{stopping:.2f} m the robot needs to stop: raise max_cells or n, or lower v_max"
        )
    cells = math.ceil(2.0 * (lookahead + r) / resolution - 1e-9)
    cells = min(max(cells + cells % 2, min_cells), max_cells)
    return HorizonSizing(dt, cells, cells * resolution, lookahead, stopping)


def check_horizon(robot: RobotModel, n: int, dt: float, window_m: float) -> None:
    """InputError unless `n` steps of `dt` reach the stopping distance at top speed and the horizon's reach plus the
    circumscribed radius stays inside the square window of side `window_m` (module docstring); the message gives
    the dt `size_horizon` would choose."""
    v, r = robot.v_max, robot.radius
    lookahead, stopping = n * dt * v, v * v / (2.0 * robot.a_max) + v * dt
    if lookahead < stopping or lookahead + r > 0.5 * window_m + 1e-9:
        why = (
            f"{n} steps of {dt:g} s reach {lookahead:.2f} m at {v:g} m/s, "
            + (f"short of the {stopping:.2f} m the robot needs to stop" if lookahead < stopping else "")
            + (
                f"past the {0.5 * window_m - r:.2f} m the {window_m:g} m window shows ahead of the body"
                if lookahead >= stopping
                else ""
            )
        )
        try:
            hint = f"; dt = {size_horizon(robot, n, max_cells=max(4, round(window_m / 0.05))).dt:.4f} s fits"
        except InputError:
            hint = ""
        raise InputError(why + hint)
