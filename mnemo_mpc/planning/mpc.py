"""SQP model-predictive control for a unicycle on an occupancy-grid ESDF (seed 002 §5.2).

The paper's planner: "For each MPC step, one instance of trajectory optimization with SQP was run", capped at
10 iterations cold (4.78 on average) and 1 iteration when warm-started. We solve

    min   sum_{k=1..N} w_track |p_k - r_k|^2 + w_goal |p_N - g|^2 + h w_yaw (1 - cos(yaw_N - yaw_g))
          + sum_k (w_v v_k^2 + w_w w_k^2) + sum_k (w_dv dv_k^2 + w_dw dw_k^2)
          [+ sum_{k=1..N} w_c c(p_k)^2, with `MPCConfig.costmap_cost_weight` = w_c > 0: c in [0, 1] the grid's soft
           cost, a Nav2 costmap's inflation (`planning.costmap`), at the robot's centre; method "sqp"]
    s.t.  x_0 = current state,  x_{k+1} = f(x_k, u_k)                         (robot.unicycle_step)
          v_min <= v_k <= v_max,  |w_k| <= w_max
          |u_k - u_{k-1}| <= (a_max, alpha_max) dt,  with u_{-1} = the current velocity
          esdf(c_kd) >= r_d + safety_margin (+ a small interpolation buffer),     k = 1..N, d = 1..K
          (c_kd = p_k + R(yaw_k) o_d: the K discs (o_d, r_d) covering the footprint, `collision.robot_discs`; one
          disc of the robot's radius at the centre for a round robot)
          |p_k - o_j(t_k)| >= min(R + R_j(t_k) + safety_margin, what braking keeps),  k = 1..N, j = 1..M
          (with `MPCConfig.moving_obstacles` = M > 0: moving obstacle j predicted at o_j(t_k) with radius R_j(t_k),
          its own size grown by the prediction's uncertainty (`PredictedObstacles`); R the footprint's outer radius
          about the rotation centre. Time-varying constraints, so the robot may pass where an obstacle *will not be*)

Two methods (`MPCConfig.method`), same problem, same tolerances:

* `"sqp"` (default): the condensed problem (controls only, states by rollout; `nlp.condensed`) solved by our SQP
  (`mnemo_mpc.planning.sqp`: dense QPs by DAQP, Gauss-Newton far / exact Newton near a solution, round-off-aware
  line search), with its CasADi functions compiled once per problem shape and cached on disk
  (`mnemo_mpc.planning.codegen`). A start at the optimum converges in <= 1 iteration, in 0 with its multipliers.
* `"sqpmethod"`: the multiple-shooting problem (`nlp.multiple_shooting`) under CasADi's `sqpmethod` (exact Hessian,
  QP backend `qpsol`, piqp by default). With `compile=False` this is the configuration the package shipped before
  its own SQP, kept as the benchmark's baseline (`bench sqp --baseline`).

IPOPT is the fallback for solves the SQP does not finish. The NLP is built once per (N, dt, grid shape): the ESDF
enters as a parameter (bicubic B-spline coefficients), so nothing is rebuilt between calls.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from mnemo_mpc.errors import InfeasibleProblemError, InputError, StartInCollisionError, is_real
from mnemo_mpc.planning import nlp as nlp_forms
from mnemo_mpc.planning.codegen import BufferedFunction, BuildInfo
from mnemo_mpc.planning.collision import FootprintChecker
from mnemo_mpc.planning.costmap import MAX_COSTMAP_COST_WEIGHT
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.nlp import SPLINE_PAD, CostWeights
from mnemo_mpc.planning.robot import RobotModel, unicycle_step
from mnemo_mpc.planning.sqp import CONVEXIFY, HESSIANS, SQP, SQPOptions

log = logging.getLogger(__name__)

__all__ = ["SPLINE_PAD", "SQPMPC", "MPCConfig", "PlanResult", "PredictedObstacles", "WarmStart"]

# Moving-obstacle slots the NLP may be built with (each adds N constraint rows and 2 N parameters).
MAX_MOVING_OBSTACLES = 8


_BLAS_LIMITED = False


def single_threaded_blas() -> None:
    """Limit the process's BLAS/LAPACK to one thread (once; `threadpoolctl`). The MPC's matrices are at most a few
    hundred wide, where a second OpenBLAS thread never helps and, on a busy machine, costs a real-time loop its
    deadline: a 60 x 60 `eigh` (the SQP's convexification) measured 0.2 ms p50 on one thread and 68 ms p50 / 105 ms
    p99 on two while other jobs kept both cores busy. Called when an `SQPMPC` is built, so every command and node
    that plans gets it; a process that also trains large models should build its planner in another process."""
    global _BLAS_LIMITED
    if not _BLAS_LIMITED:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _BLAS_LIMITED = True


METHODS = ("sqp", "sqpmethod")
QP_SOLVERS = ("piqp", "qrqp", "osqp", "proxqp", "qpoases", "hpipm")  # sqpmethod's backends
FALLBACK_SOLVERS = ("ipopt",)


@dataclass(frozen=True)
class MPCConfig:
    """MPC settings. N, dt and max_iter are the paper's (horizon 30 is ours; the paper's cold cap is 10 iterations)."""

    N: int = 30
    dt: float = 0.1
    method: str = "sqp"
    max_iter: int = 10
    max_time_s: float | None = None  # method "sqp": wall-clock budget of one solve (SQPOptions.max_time_s)
    max_iter_ls: int = 10
    tol: float = 1e-6  # primal tolerance of the SQP (max constraint violation)
    tol_du: float = 1e-4  # dual tolerance (max gradient of the Lagrangian; costs are O(1), see the weights)
    hessian: str = "hybrid"  # method "sqp": see mnemo_mpc.planning.sqp
    newton_du: float = 0.3  # method "sqp", hybrid Hessian: exact Newton once |grad L|_inf <= this (docs/results.md)
    convexify: str = "clip"  # method "sqp": what to do with an indefinite exact Hessian ("clip" | "reflect")
    compile: bool = True  # compile the NLP's CasADi functions to C (cached on disk; see planning.codegen)
    qpsol: str = "piqp"  # method "sqpmethod": its QP backend
    extra_options: dict = field(default_factory=dict)  # method "sqpmethod": passed verbatim (experiments)
    fallback: str | None = "ipopt"
    fallback_max_iter: int = 200
    # Wall-clock cap of one fallback solve (IPOPT's max_wall_time); None: only the iteration cap. A control loop sets
    # it from its period so that a hard problem cannot overrun the tick.
    fallback_max_time_s: float | None = None
    # The plans' least speed when it is above the robot's v_min: a robot that may reverse (its recoveries back up over
    # cells it has seen) but whose sensor does not see behind it plans forward only (`NavParams.mpc_config`: 0 for a
    # lidar of less than 360 degrees). None: the robot's v_min.
    plan_v_min: float | None = None
    # Cost weights (see the module docstring).
    w_track: float = 0.1
    w_goal: float = 1.0
    w_yaw: float = 1.0
    w_v: float = 0.01
    w_w: float = 0.01
    w_dv: float = 1.0
    w_dw: float = 0.1
    # The optimiser sees a cubic spline of the ESDF; the feasibility check sees the bilinear field between densified
    # points. The buffer covers the gap between the two so a converged plan also passes the stricter check.
    clearance_buffer: float = 0.01
    # Distance within which the terminal heading term is switched on (goal reachable within the horizon).
    heading_radius: float | None = None
    densify: int = 10  # points per step for the clearance check between knots
    # A start whose covering discs read up to this much *inside* an obstacle on the field is still solved (with its
    # clearance as the bound: no disc may get closer) instead of refused as a collision. 0: strict. A closed loop on
    # a lidar-built grid sets half a cell (`sim.profile`, the node): a wall is quantised to whole cells, and a return
    # measured short can still mark the free cell in front of it (`LocalGridConfig.hit_depth_m`), so in a passage a
    # few centimetres wider than the robot a real clearance can read as a collision, and a strict MPC would leave the
    # robot standing there for good.
    start_tolerance_m: float = 0.0
    # A start already inside the margin band (a narrowed margin restored, a wall the lidar drew late, a tracking
    # error) lets its discs in the band come as close as this margin while the robot gets out, never closer than they
    # are when that is less. Bounded at their current clearance instead, a disc moving at speed towards a wall made
    # every QP infeasible until the robot stopped (Jackal, corridor world 1008: 28 infeasible steps in one episode).
    band_margin_m: float = 0.025
    # Slots for predicted moving obstacles (issue 28): the NLP gets M time-varying distance rows per knot (see the
    # module docstring); unused slots are parked far away. 0: the MPC plans against the grid alone. Method "sqp" only.
    moving_obstacles: int = 0
    # Weight w_c of the soft costmap cost (issue 29): sum_k w_c c(p_k)^2 with c in [0, 1] the grid's inflation cost at
    # the robot's centre (a Nav2 costmap's 1..98, `planning.costmap`). 0: no term, and the NLP, its parameters and
    # its compiled code are exactly those without it. The node's default comes with `NavParams.costmap_cost_weight`
    # for a costmap; an occupancy grid has no soft cost, so its MPC keeps 0. Method "sqp" only.
    costmap_cost_weight: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.N, bool) or not isinstance(self.N, int) or self.N < 1:
            raise InputError(f"MPCConfig.N: expected an integer >= 1, got {self.N!r}")
        if not (is_real(self.dt) and self.dt > 0):
            raise InputError(f"MPCConfig.dt: expected a finite dt > 0, got {self.dt!r}")
        if self.method not in METHODS:
            raise InputError(f"MPCConfig.method: expected one of {METHODS}, got {self.method!r}")
        if self.hessian not in HESSIANS:
            raise InputError(f"MPCConfig.hessian: expected one of {HESSIANS}, got {self.hessian!r}")
        if self.convexify not in CONVEXIFY:
            raise InputError(f"MPCConfig.convexify: expected one of {CONVEXIFY}, got {self.convexify!r}")
        if self.qpsol not in QP_SOLVERS:
            raise InputError(f"MPCConfig.qpsol: expected one of {QP_SOLVERS}, got {self.qpsol!r}")
        if self.fallback is not None and self.fallback not in FALLBACK_SOLVERS:
            raise InputError(f"MPCConfig.fallback: expected one of {FALLBACK_SOLVERS} or None, got {self.fallback!r}")
        if not isinstance(self.compile, bool):
            raise InputError(f"MPCConfig.compile: expected True or False, got {self.compile!r}")
        if not isinstance(self.extra_options, dict):
            raise InputError(f"MPCConfig.extra_options: expected a dict of solver options, got {self.extra_options!r}")
        for name in ("max_iter", "max_iter_ls", "fallback_max_iter", "densify"):
            value = getattr(self, name)
            least = 0 if name == "max_iter_ls" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InputError(f"MPCConfig.{name}: expected an integer >= {least}, got {value!r}")
        for name in ("start_tolerance_m", "band_margin_m"):
            value = getattr(self, name)
            if not (is_real(value) and value >= 0):
                raise InputError(f"MPCConfig.{name}: expected metres >= 0, got {value!r}")
        if self.plan_v_min is not None and not is_real(self.plan_v_min):
            raise InputError(f"MPCConfig.plan_v_min: expected a finite speed [m/s] or None, got {self.plan_v_min!r}")
        for name in ("max_time_s", "fallback_max_time_s"):
            value = getattr(self, name)
            if value is not None and not (is_real(value) and value > 0):
                raise InputError(f"MPCConfig.{name}: expected a finite number > 0 or None, got {value!r}")
        if self.heading_radius is not None and not (is_real(self.heading_radius) and self.heading_radius >= 0):
            raise InputError(f"MPCConfig.heading_radius: expected metres >= 0 or None, got {self.heading_radius!r}")
        for name in ("tol", "tol_du", "newton_du"):
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"MPCConfig.{name}: expected a finite number > 0, got {value!r}")
        for name in ("w_track", "w_goal", "w_yaw", "w_v", "w_w", "w_dv", "w_dw", "clearance_buffer"):
            value = getattr(self, name)
            if not (is_real(value) and value >= 0):
                raise InputError(f"MPCConfig.{name}: expected a finite number >= 0, got {value!r}")
        if min(self.w_v, self.w_w) <= 0:
            raise InputError("MPCConfig.w_v, w_w: expected > 0 (they keep the Gauss-Newton Hessian positive definite)")
        m = self.moving_obstacles
        if isinstance(m, bool) or not isinstance(m, int) or not 0 <= m <= MAX_MOVING_OBSTACLES:
            raise InputError(
                f"MPCConfig.moving_obstacles: expected an integer in [0, {MAX_MOVING_OBSTACLES}], got {m!r}"
            )
        if m and self.method != "sqp":
            raise InputError(f"MPCConfig.moving_obstacles: needs method 'sqp', got method {self.method!r}")
        wc = self.costmap_cost_weight
        if not (is_real(wc) and 0.0 <= wc <= MAX_COSTMAP_COST_WEIGHT):
            raise InputError(
                f"MPCConfig.costmap_cost_weight: expected a finite number in [0, {MAX_COSTMAP_COST_WEIGHT:g}] "
                f"(0: no costmap cost), got {wc!r}"
            )
        if wc > 0 and self.method != "sqp":
            raise InputError(f"MPCConfig.costmap_cost_weight: > 0 needs method 'sqp', got method {self.method!r}")

    @property
    def weights(self) -> CostWeights:
        return CostWeights(*(getattr(self, f.name) for f in fields(CostWeights)))

    @property
    def sqp_options(self) -> SQPOptions:
        return SQPOptions(
            max_iter=self.max_iter,
            max_time_s=self.max_time_s,
            tol_pr=self.tol,
            tol_du=self.tol_du,
            max_iter_ls=self.max_iter_ls,
            hessian=self.hessian,
            newton_du=self.newton_du,
            convexify=self.convexify,
        )


@dataclass(frozen=True)
class PredictedObstacles:
    """Moving obstacles as the MPC's time-varying constraints take them: `centres` (N, M', 2) map-frame centres
    predicted at knots 1..N (t_k = k dt from now), `radii` (N, M') each one's radius there, the obstacle's size grown
    by its prediction's uncertainty. M' <= `MPCConfig.moving_obstacles`."""

    centres: np.ndarray
    radii: np.ndarray

    def __post_init__(self) -> None:
        c, r = np.asarray(self.centres, dtype=float), np.asarray(self.radii, dtype=float)
        if c.ndim != 3 or c.shape[2] != 2 or r.shape != c.shape[:2]:
            raise InputError(
                f"PredictedObstacles: expected centres (N, M, 2) and radii (N, M), got {c.shape} and {r.shape}"
            )
        if not (np.all(np.isfinite(c)) and np.all(np.isfinite(r)) and np.all(r >= 0)):
            raise InputError("PredictedObstacles: centres must be finite and radii finite and >= 0")
        object.__setattr__(self, "centres", c)
        object.__setattr__(self, "radii", r)

    @property
    def count(self) -> int:
        return int(self.centres.shape[1])


@dataclass
class WarmStart:
    """A start: controls (N, 2), states (N+1, 3) and, optionally, the multipliers of a previous solve.

    The condensed method (`"sqp"`) re-simulates the states from the controls; the multiple-shooting one starts from
    both. Multipliers are in the solving method's layout (`PlanResult.duals`).
    """

    states: np.ndarray
    controls: np.ndarray
    lam_g: np.ndarray | None = None
    lam_x: np.ndarray | None = None


@dataclass
class PlanResult:
    states: np.ndarray  # (N+1, 3)
    controls: np.ndarray  # (N, 2)
    iterations: int
    time_s: float  # solver wall time (SQP plus fallback when used)
    status: str
    success: bool
    cost: float
    max_dynamics_violation: float
    min_clearance: float  # of the centre, along the densified trajectory, bilinear ESDF
    start: str  # "cold" | "warm" | "shift" | ...: who made the start
    used_fallback: bool = False
    duals: dict[str, np.ndarray] = field(default_factory=dict)
    dt: float = 0.1
    required_clearance: float = 0.0
    wall_time_s: float = 0.0  # the whole `solve` call: checks, guess, solver, post-checks
    cpu_time_s: float = 0.0  # process CPU time of the solver call(s); less sensitive to other loads than time_s
    solver_stats: dict[str, Any] = field(default_factory=dict)  # per-phase times of this solve (method "sqp")
    # min over the densified trajectory and the covering discs of esdf(c_d) - r_d (the footprint's clearance), and
    # the margin it must keep: safety_margin, or less when the start is already inside the margin band.
    footprint_clearance: float | None = None
    required_margin: float = 0.0
    # With predicted moving obstacles: min over knots 1..N and obstacles of |p_k - o_j(t_k)| less its bound
    # (`SQPMPC._moving_lower`: R + R_j(t_k) + margin, or what braking keeps where that is less). None without them.
    moving_slack: float | None = None
    # With predicted moving obstacles: the controls (N, 2) of the simple motion that keeps farthest from them and
    # clear of the grid (`SQPMPC._moving_lower`), what a controller may drive when the solve fails. None without them.
    escape: np.ndarray | None = None

    @property
    def feasible(self) -> bool:
        """Dynamics error <= 1e-6 and every covering disc >= its radius + margin - 1e-3 from obstacles on the densified
        trajectory (for a round robot: centre clearance >= radius + margin - 1e-3); every knot as far from each
        predicted moving obstacle as its constraint asks, less 1e-3."""
        if self.max_dynamics_violation > 1e-6:
            return False
        if self.moving_slack is not None and self.moving_slack < -1e-3:
            return False
        if self.footprint_clearance is None:
            return self.min_clearance >= self.required_clearance - 1e-3
        return self.footprint_clearance >= self.required_margin - 1e-3

    def shifted(self, with_duals: bool = True) -> WarmStart:
        """The receding-horizon shift: drop the first step, repeat the last control once more at the end."""
        states = np.concatenate([self.states[1:], self.states[-1:]], axis=0)
        controls = np.concatenate([self.controls[1:], self.controls[-1:]], axis=0)
        states[-1] = np.asarray(unicycle_step(states[-2], controls[-1], self.dt))
        lam_g = lam_x = None
        if with_duals and "lam_g" in self.duals:
            lam_g, lam_x = _shift_duals(self.duals["lam_g"], self.duals["lam_x"], self.controls.shape[0])
        return WarmStart(states, controls, lam_g, lam_x)


def _shift_blocks(v: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([v[size:], v[-size:]])


def _shift_duals(lam_g: np.ndarray, lam_x: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Shift multipliers one stage, per constraint block, in either method's layout (told apart by the size of
    lam_x; the clearance block has K rows per knot, one per covering disc)."""
    if lam_x.size == 2 * n:  # condensed: [rates 2N, clearance K N]; bounds on the N controls
        k = lam_g.size // n - 2
        return np.concatenate([_shift_blocks(lam_g[: 2 * n], 2), _shift_blocks(lam_g[2 * n :], k)]), _shift_blocks(
            lam_x, 2
        )
    k = lam_g.size // n - 5
    dyn, acc, clr = lam_g[: 3 * n], lam_g[3 * n : 5 * n], lam_g[5 * n :]
    shifted_g = np.concatenate([_shift_blocks(dyn, 3), _shift_blocks(acc, 2), _shift_blocks(clr, k)])
    xs, us = lam_x[: 3 * (n + 1)], lam_x[3 * (n + 1) :]
    xs = _shift_blocks(xs, 3)
    xs[:3] = 0.0  # x_0 is fixed by its bounds; its multiplier belongs to the old start
    return shifted_g, np.concatenate([xs, _shift_blocks(us, 2)])


class SQPMPC:
    """The MPC of the module docstring, built once for (N, dt, grid_shape) and solved many times."""

    def __init__(self, robot: RobotModel, config: MPCConfig | None = None, grid_shape: tuple[int, int] = (80, 80)):
        single_threaded_blas()
        self.robot = robot
        self.config = config = config or MPCConfig()
        h, w = int(grid_shape[0]), int(grid_shape[1])
        if h < 4 or w < 4:
            raise InputError(f"SQPMPC.grid_shape: a cubic spline needs at least 4x4 cells, got {grid_shape}")
        self.grid_shape = (h, w)
        n, dt = config.N, config.dt
        self._heading_radius = config.heading_radius if config.heading_radius is not None else robot.v_max * dt * n
        self._fallback_solver: Any = None
        self.build_info = BuildInfo(False, reason="not requested")
        t0 = time.perf_counter()
        amax = robot.accel_limits * dt
        self._u_lower, self._u_upper = robot.control_lower.copy(), robot.control_upper.copy()
        # Meeting predicted moving obstacles the plan may reverse down to the robot's own v_min, plan_v_min or not
        # (`_controls_lower`)
        self._u_lower_moving = self._u_lower.copy()
        if config.plan_v_min is not None:
            self._u_lower[0] = min(max(self._u_lower[0], config.plan_v_min), self._u_upper[0])
        lbu, ubu = np.tile(self._u_lower, n), np.tile(self._u_upper, n)
        lbu_moving = np.tile(self._u_lower_moving, n)
        self.collision = FootprintChecker(robot, dt, config.densify)  # the checks outside the NLP use it too
        self.discs = self.collision.discs
        # The footprint's outer radius about the rotation centre: what the moving-obstacle rows keep clear.
        self.outer_radius = float(np.max(np.hypot(self.discs[:, 0], self.discs[:, 1]) + self.discs[:, 2]))
        m = config.moving_obstacles
        k = self.discs.shape[0]
        wc = float(config.costmap_cost_weight)
        if config.method == "sqp":
            self._nlp = nlp_forms.condensed(n, dt, self.grid_shape, config.weights, self.discs[:, :2], m, wc)
        else:
            self._nlp = nlp_forms.multiple_shooting(n, dt, self.grid_shape, config.weights, self.discs[:, :2])
        self._functions = self._nlp.functions
        if config.compile:
            from mnemo_mpc.planning.codegen import compiled

            tag = f"mpc_{config.method}_N{n}_{h}x{w}" + (f"_K{k}" if k > 1 else "") + (f"_M{m}" if m else "")
            tag += "_costmap" if wc > 0 else ""  # the weight itself is in the source the cache entry is keyed by
            self._functions, self.build_info = compiled(self._functions, tag)
        if config.method == "sqp":
            self._sqp = SQP(nlp_forms.CondensedEvaluator(self._nlp, self._functions), config.sqp_options)
            self._rollout = BufferedFunction(self._functions["rollout"])
            self._lbx, self._ubx, self._lbx_moving = lbu, ubu, lbu_moving
            self._lbg = np.concatenate([np.tile(-amax, n), np.zeros((k + m) * n)])
            self._ubg = np.concatenate([np.tile(amax, n), np.full((k + m) * n, np.inf)])
        else:
            self._solvers: dict[int, BufferedSolver] = {}
            self._sqpmethod_totals: dict[int, dict[str, float]] = {}
            self._lbx = np.concatenate([np.full(3 * (n + 1), -np.inf), lbu])
            self._lbx_moving = np.concatenate([np.full(3 * (n + 1), -np.inf), lbu_moving])
            self._ubx = np.concatenate([np.full(3 * (n + 1), np.inf), ubu])
            self._lbg = np.concatenate([np.zeros(3 * n), np.tile(-amax, n), np.zeros(k * n)])
            self._ubg = np.concatenate([np.zeros(3 * n), np.tile(amax, n), np.full(k * n, np.inf)])
        self.layout = self._nlp.layout
        log.debug("built %s MPC N=%d grid=%s in %.2fs", config.method, n, self.grid_shape, time.perf_counter() - t0)

    # ------------------------------------------------------------------------------------------------------------
    @property
    def duals_size(self) -> tuple[int, int]:
        """(len(lam_g), len(lam_x)) of this method's multipliers."""
        n, k, m = self.config.N, self.discs.shape[0], self.config.moving_obstacles
        return ((2 + k + m) * n, 2 * n) if self.config.method == "sqp" else ((5 + k) * n, 3 * (n + 1) + 2 * n)

    def cold_start(self, state: np.ndarray) -> WarmStart:
        """Hold the current pose with zero controls: dynamically consistent and never through an obstacle."""
        n = self.config.N
        return WarmStart(np.tile(np.asarray(state, dtype=float), (n + 1, 1)), np.zeros((n, 2)))

    def _controls_lower(self, obstacles: PredictedObstacles | None) -> np.ndarray:
        """The controls' lower bounds (v, w) of a solve: with predicted moving obstacles, the robot's own -- a robot
        that plans forward only (`MPCConfig.plan_v_min`, a lidar blind behind) may still back away from a body
        coming at it; else it stands in the way and is run into (Jackal, patrol boxes: moving doors-1024 stopped
        0.15 m inside a box's beat, rooms-1045 behind a box that turned back). What it backs into is what it has
        seen: the MPC treats unseen cells as obstacles."""
        return self._u_lower_moving if obstacles is not None else self._u_lower

    def parameters(
        self,
        field: DistanceField,
        state: np.ndarray,
        velocity: np.ndarray,
        goal: np.ndarray,
        reference: np.ndarray | None = None,
        obstacles: PredictedObstacles | None = None,
    ) -> np.ndarray:
        """The NLP parameter vector p of a problem (see `nlp.ParamLayout`); inputs as `solve` takes them."""
        n, m = self.config.N, self.config.moving_obstacles
        ref = np.tile(goal[:2], (n, 1)) if reference is None else np.asarray(reference, dtype=float)[1:, :2]
        dist_goal = float(np.hypot(*(goal[:2] - state[:2])))
        centres = None
        if m:
            # Unused slots are parked farther than the horizon can reach: their rows (bound 0) never bind.
            centres = np.tile(np.asarray(state[:2], dtype=float) + [PARKED_M, PARKED_M], (n, m, 1))
            if obstacles is not None:
                centres[:, : obstacles.count] = obstacles.centres
        head = self.layout.head(
            state,
            np.clip(velocity, self._controls_lower(obstacles), self._u_upper),
            goal,
            1.0 if dist_goal <= self._heading_radius else 0.0,
            ref,
            field.grid.origin,
            field.grid.resolution,
            centres,
        )
        maps = [field.spline_coefficients(SPLINE_PAD).reshape(-1)]
        if self.layout.cost_field:
            maps.append(field.cost_spline_coefficients(SPLINE_PAD).reshape(-1))
        return np.concatenate([head, *maps])

    def solve(
        self,
        field: DistanceField,
        state: np.ndarray,
        velocity: np.ndarray,
        goal: np.ndarray,
        reference: np.ndarray | None = None,
        warm_start: WarmStart | None = None,
        max_iter: int | None = None,
        start_label: str | None = None,
        margin: float | None = None,
        use_fallback: bool = True,
        obstacles: PredictedObstacles | None = None,
    ) -> PlanResult:
        """Plan from `state` with current `velocity` (v, w) towards `goal` (x, y, yaw), tracking `reference`.

        `margin` (metres, in [0, robot.safety_margin]) replaces the safety margin in the clearance constraints for this
        solve: a controller narrows it where the passage ahead is narrower than the footprint plus the full margin
        (`mnemo_mpc.nav.controller`); None keeps the robot's margin.

        `reference` is (N+1, 2|3) map-frame points for knots 0..N (row 0 is ignored) or None to track the goal at
        every knot. `warm_start` None means the cold start (hold the pose). `use_fallback` False skips the fallback
        solver (`MPCConfig.fallback`) for this solve (a real-time iteration wants its one iterate, not a full solve).
        `obstacles`: moving obstacles predicted over the horizon, kept `margin` away from the footprint's outer circle
        at every knot, or as far as braking keeps where that is less (`_moving_lower`; needs
        `MPCConfig.moving_obstacles` >= their count).
        Returns a PlanResult; a failed solve has `success=False` and finite arrays (the last iterate when finite, else
        the hold-pose guess).
        """
        t_wall = time.perf_counter()
        cfg, robot = self.config, self.robot
        n = cfg.N
        state = _finite_vector(state, 3, "state (x, y, yaw)")
        velocity = _finite_vector(velocity, 2, "velocity (v, w)")
        goal = _finite_vector(goal, 3, "goal (x, y, yaw)")
        if not isinstance(field, DistanceField):
            raise InputError(f"SQPMPC.solve.field: expected a DistanceField, got {type(field).__name__}")
        if field.shape != self.grid_shape:
            raise InputError(
                f"SQPMPC.solve.field: grid shape {field.shape} differs from the shape {self.grid_shape} the NLP was "
                "built for; crop with OccupancyGrid.window or build another SQPMPC"
            )
        if reference is not None:
            reference = np.asarray(reference, dtype=float)
            if reference.ndim != 2 or reference.shape[0] != n + 1 or reference.shape[1] not in (2, 3):
                raise InputError(f"SQPMPC.solve.reference: expected shape ({n + 1}, 2 or 3), got {reference.shape}")
            if not np.all(np.isfinite(reference)):
                raise InputError("SQPMPC.solve.reference: contains NaN or inf")
        if max_iter is not None and (isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1):
            raise InputError(f"SQPMPC.solve.max_iter: expected an integer >= 1, got {max_iter!r}")
        if margin is None:
            margin = robot.safety_margin
        elif not (is_real(margin) and 0.0 <= margin <= robot.safety_margin):
            raise InputError(f"SQPMPC.solve.margin: expected metres in [0, {robot.safety_margin}], got {margin!r}")
        if obstacles is not None:
            if not isinstance(obstacles, PredictedObstacles):
                raise InputError(f"SQPMPC.solve.obstacles: expected PredictedObstacles, got {type(obstacles).__name__}")
            if obstacles.centres.shape[0] != n or obstacles.count > cfg.moving_obstacles:
                raise InputError(
                    f"SQPMPC.solve.obstacles: expected at most MPCConfig.moving_obstacles = {cfg.moving_obstacles} "
                    f"obstacles over N = {n} knots, got {obstacles.count} over {obstacles.centres.shape[0]}"
                )
            if obstacles.count == 0:
                obstacles = None

        d0 = float(field.distance(state[:2]))
        disc_d0 = self.collision.disc_distances(field, state)
        if np.any(disc_d0 < self.discs[:, 2] - cfg.start_tolerance_m):  # MPCConfig.start_tolerance_m
            if self.discs.shape[0] == 1:
                detail = f"clearance {d0:.3f} m < robot radius {robot.radius:.3f} m"
            else:
                d = int(np.argmin(disc_d0 - self.discs[:, 2]))
                detail = (
                    f"covering disc {d} is {disc_d0[d]:.3f} m from an obstacle < its radius {self.discs[d, 2]:.3f} m"
                )
            raise StartInCollisionError(f"start pose ({state[0]:.3f}, {state[1]:.3f}) is in collision: {detail}")
        _check_goal(field, goal)
        guess, label = self._start(state, warm_start, start_label)
        p = self.parameters(field, state, velocity, goal, reference, obstacles)
        lbg = self._constraint_lower(self._bound_distances(field, state, disc_d0), margin)
        moving_bound, escape = None, None
        if obstacles is not None:
            moving_bound, escape = self._moving_lower(lbg, field, state, velocity, margin, obstacles)
            # A start that breaks the rows linearises them where no QP step may meet them (a cold start facing a
            # head-on obstacle: qp_infeasible); the escape meets them by construction.
            states = self.robot.rollout(state, guess.controls, cfg.dt)[1:, :2]
            gaps = np.hypot(*(states[:, None, :] - obstacles.centres).transpose(2, 0, 1))
            if float(np.min(gaps - moving_bound)) < -cfg.tol:
                guess = WarmStart(self.robot.rollout(state, escape, cfg.dt), escape)
                label = f"{label}+escape"
        iters = cfg.max_iter if max_iter is None else max_iter
        lbx = self._lbx if obstacles is None else self._lbx_moving  # `_controls_lower` over the horizon
        if cfg.method == "sqp":
            out = self._solve_sqp(state, guess, p, lbg, iters, lbx=lbx)
            if out["status"].startswith("qp_infeasible") and warm_start is not None and out["iterations"] < iters:
                out = self._restart_cold(out, state, p, lbg, iters, lbx)
        else:  # no moving obstacles with this method (`MPCConfig`): its bounds are `_lbx`
            out = self._solve_sqpmethod(state, guess, p, lbg, iters)
        if not out["success"] and cfg.fallback is not None and use_fallback:
            out = self._solve_fallback(out, state, guess, p, lbg, lbx)
        states, controls = out["states"], out["controls"]
        if not (np.all(np.isfinite(states)) and np.all(np.isfinite(controls))):
            states, controls = self.robot.rollout(state, guess.controls, cfg.dt), np.array(guess.controls, float)
            out["success"] = False
            out["status"] += " (non-finite iterate replaced by the initial guess)"
        dyn_err = float(np.max(np.abs(robot.step(states[:-1], controls, cfg.dt) - states[1:])))
        pts = robot.densify(states, controls, cfg.dt, cfg.densify)
        footprint = self.collision.trajectory_clearance(field, states, controls, pts)
        moving = None
        if moving_bound is not None:
            gaps = np.hypot(*(states[1:, None, :2] - obstacles.centres).transpose(2, 0, 1))
            moving = float(np.min(gaps - moving_bound))
        return PlanResult(
            states=states,
            controls=controls,
            iterations=out["iterations"],
            time_s=out["time_s"],
            cpu_time_s=out["cpu_s"],
            status=out["status"],
            success=out["success"],
            cost=out["cost"],
            max_dynamics_violation=dyn_err,
            min_clearance=field.min_clearance(pts),
            start=label,
            used_fallback=out.get("used_fallback", False),
            duals=out["duals"],
            dt=cfg.dt,
            required_clearance=min(robot.clearance, d0),
            wall_time_s=time.perf_counter() - t_wall,
            solver_stats=out.get("stats", {}),
            footprint_clearance=footprint,
            required_margin=self._start_margin(disc_d0, margin),
            moving_slack=moving,
            escape=escape,
        )

    # --- internals ----------------------------------------------------------------------------------------------
    def start_margin(self, field: DistanceField, state: np.ndarray, margin: float | None = None) -> float:
        """The footprint margin a motion from `state` must keep, as `solve` demands it: `margin` (default the safety
        margin), or less for a start inside the margin band (`MPCConfig.band_margin_m`, `_constraint_lower`)."""
        return self._start_margin(self.collision.disc_distances(field, np.asarray(state, dtype=float)), margin)

    def _start_margin(self, disc_d0: np.ndarray, margin: float | None) -> float:
        margin = self.robot.safety_margin if margin is None else margin
        r = self.discs[:, 2]
        inside = disc_d0 < r + margin + self.config.clearance_buffer
        band = np.minimum(disc_d0 - r, min(margin, self.config.band_margin_m))
        return float(np.min(np.where(inside, band, margin)))

    def _constraint_lower(self, disc_d0: np.ndarray, margin: float | None = None) -> np.ndarray:
        """Lower bounds of g for a start whose covering discs are `disc_d0` from obstacles: r_d + margin + buffer (the
        robot's safety margin unless `margin` is given). A start already inside that band must still have a feasible
        problem: its discs in the band are bounded at r_d + buffer + `MPCConfig.band_margin_m` (room to slow down and
        turn away), never above their current clearance. Clearance rows are knot-major (disc fastest, then the moving
        obstacles' rows, 0 here: a parked slot; `_moving_lower` sets the used ones)."""
        lbg = self._lbg.copy()
        n, k, m = self.config.N, self.discs.shape[0], self.config.moving_obstacles
        margin = self.robot.safety_margin if margin is None else margin
        r, buffer = self.discs[:, 2], self.config.clearance_buffer
        need = r + margin + buffer
        band = np.minimum(disc_d0, r + buffer + min(margin, self.config.band_margin_m))
        rows = np.zeros((n, k + m))
        rows[:, :k] = np.where(disc_d0 < need, band, need)
        lbg[-(k + m) * n :] = rows.reshape(-1)
        return lbg

    def _moving_lower(
        self,
        lbg: np.ndarray,
        field: DistanceField,
        state: np.ndarray,
        velocity: np.ndarray,
        margin: float,
        obstacles: PredictedObstacles,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Set the moving obstacles' rows of `lbg` (in place) and return them, (N, M'), with the controls of the
        escape that meets them: R + R_j(t_k) + margin (the rows are exact distances: no spline buffer) -- or, where
        no simple motion keeps that, as far as the best of them keeps at each knot (`escape_motions`: brake, hold the
        velocity, speed up, turn either way, back away where the robot may reverse; the best is the one whose
        closest approach to its bound is largest among those that keep clear of the grid).

        An obstacle coming at the robot faster than it can get away makes the full bound infeasible at every knot it
        reaches: every such step then fell back on the previous plan, which drove on into it (mixed-1004, open-1017).
        Capped at what braking alone keeps, the robot that had started to cross in front of a box stopped in its way
        and was hit (a crossing box in tests/test_nav_moving_obstacles.py); capped at the best escape, the optimiser
        does at least as well as that escape at every knot."""
        n, k, m = self.config.N, self.discs.shape[0], self.config.moving_obstacles
        need = self.outer_radius + obstacles.radii + margin  # (N, M')
        best, best_score, escape = None, -np.inf, None
        for i, controls in enumerate(self.escape_motions(velocity, self._controls_lower(obstacles))):
            states = self.robot.rollout(state, controls, self.config.dt)[1:]
            kept = np.hypot(*(states[:, None, :2] - obstacles.centres).transpose(2, 0, 1))
            score = float(np.min(kept - need))
            if i > 0 and float(np.min(self.collision.pose_margins(field, states))) < 1e-3:
                continue  # into the grid's obstacles (braking, i == 0, is always a candidate)
            if score > best_score:
                best, best_score, escape = kept, score, controls
            if score >= 0.0:
                break
        capped = best_score < 0.0
        bound = np.minimum(need, best) if capped else need
        rows = lbg[-(k + m) * n :].reshape(n, k + m)
        rows[:, k : k + obstacles.count] = bound
        return bound, escape

    def escape_motions(self, velocity: np.ndarray, lower: np.ndarray | None = None) -> list[np.ndarray]:
        """(N, 2) control sequences from `velocity`, each step as far towards its target as the rate bounds allow:
        brake to rest, hold the velocity, full speed ahead, turning at full rate either way while braking or at half
        speed, and -- where `lower` (default: the plans' bounds) lets the robot reverse -- backing away, straight or
        turning either way."""
        lo, hi = (self._u_lower if lower is None else np.asarray(lower, dtype=float)), self._u_upper
        u0 = np.clip(np.asarray(velocity, dtype=float), lo, hi)
        w = hi[1]
        targets = [(0.0, 0.0), tuple(u0), (hi[0], 0.0), (0.0, w), (0.0, -w), (0.5 * hi[0], w), (0.5 * hi[0], -w)]
        if lo[0] < 0.0:
            targets += [(lo[0], 0.0), (0.5 * lo[0], w), (0.5 * lo[0], -w)]
        step = self.robot.accel_limits * self.config.dt
        out = []
        for target in targets:
            goal = np.clip(np.asarray(target, dtype=float), lo, hi)
            u, seq = u0.copy(), np.empty((self.config.N, 2))
            for i in range(self.config.N):
                u = np.clip(goal, u - step, u + step)
                seq[i] = u
            out.append(seq)
        return out

    def _bound_distances(self, field: DistanceField, state: np.ndarray, disc_d0: np.ndarray) -> np.ndarray:
        """Each disc's clearance now as the constraint rows see it: the lesser of the bilinear field (the checks') and
        the spline (the optimiser's). A start inside the margin band bounds its discs by this; from the bilinear value
        alone the spline, lower by a few millimetres near a wall, made the first knot -- which a robot at rest cannot
        move far -- infeasible in every QP, and the robot stood there for good (Jackal, corridor world 1001)."""
        spline = np.asarray(field.spline_distance(self.collision.disc_centres(state), SPLINE_PAD), dtype=float).reshape(
            -1
        )
        return np.minimum(disc_d0, spline)

    def _start(self, state: np.ndarray, warm_start: WarmStart | None, label: str | None) -> tuple[WarmStart, str]:
        n = self.config.N
        if warm_start is None:
            return self.cold_start(state), label or "cold"
        ws = warm_start
        if np.shape(ws.states) != (n + 1, 3) or np.shape(ws.controls) != (n, 2):
            raise InputError(
                f"SQPMPC.solve.warm_start: expected states ({n + 1}, 3) and controls ({n}, 2), got "
                f"{np.shape(ws.states)} and {np.shape(ws.controls)}"
            )
        if not (np.all(np.isfinite(ws.states)) and np.all(np.isfinite(ws.controls))):
            raise InputError("SQPMPC.solve.warm_start: states or controls contain NaN or inf")
        if (ws.lam_g is None) != (ws.lam_x is None):
            raise InputError("SQPMPC.solve.warm_start: give both lam_g and lam_x, or neither")
        if ws.lam_g is not None:
            want = self.duals_size
            got = (np.size(ws.lam_g), np.size(ws.lam_x))
            if got != want:
                raise InputError(
                    f"SQPMPC.solve.warm_start: method {self.config.method!r} takes multipliers lam_g ({want[0]}) and "
                    f"lam_x ({want[1]}), got ({got[0]}) and ({got[1]})"
                )
            if not (np.all(np.isfinite(ws.lam_g)) and np.all(np.isfinite(ws.lam_x))):
                raise InputError("SQPMPC.solve.warm_start: multipliers contain NaN or inf")
        return ws, label or "warm"

    def _restart_cold(
        self, first: dict, state: np.ndarray, p: np.ndarray, lbg: np.ndarray, max_iter: int, lbx: np.ndarray
    ) -> dict:
        """The solve again from the cold start (hold the pose), with the iterations and time the warm start left.

        A warm start whose linearisation has no feasible QP step (a learned start bent round the wrong side of an
        obstacle) would fail the same way on every step it is given, while the hold-pose start's first QP is feasible
        whenever the robot can stop: Jackal mapless dense-1013 sat 8 s at one pose, its learned start's QP infeasible
        on every step, its cold start converging in one iteration."""
        budget = self.config.max_time_s
        left = None if budget is None else max(budget - first["time_s"], 1e-6)
        out = self._solve_sqp(state, self.cold_start(state), p, lbg, max_iter - first["iterations"], left, lbx)
        out["iterations"] += first["iterations"]
        out["time_s"] += first["time_s"]
        out["cpu_s"] += first["cpu_s"]
        out["stats"] = dict(out["stats"], restarted_cold_after=first["status"])
        return out

    def _solve_sqp(
        self,
        state: np.ndarray,
        guess: WarmStart,
        p: np.ndarray,
        lbg: np.ndarray,
        max_iter: int,
        max_time_s: float | None = None,
        lbx: np.ndarray | None = None,
    ) -> dict:
        t0, c0 = time.perf_counter(), time.process_time()
        res = self._sqp.solve(
            np.asarray(guess.controls, dtype=float).reshape(-1),
            p,
            self._lbx if lbx is None else lbx,
            self._ubx,
            lbg,
            self._ubg,
            guess.lam_g,
            guess.lam_x,
            max_iter=max_iter,
            max_time_s=max_time_s,
        )
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        return {
            "states": self._states(res.x, p),
            "controls": res.x.reshape(-1, 2).copy(),
            "iterations": res.iterations,
            "success": res.success,
            "status": res.status,
            "cost": res.f if math.isfinite(res.f) else float("inf"),
            "duals": {"lam_g": res.lam_g, "lam_x": res.lam_x} if res.success else {},
            "time_s": elapsed,
            "cpu_s": cpu,
            "stats": res.stats,
        }

    def _states(self, u: np.ndarray, p: np.ndarray) -> np.ndarray:
        """The rollout the condensed NLP sees (CasADi's arithmetic, so the plan is exactly what was optimised)."""
        out = self._rollout(x=u, head=p[: self.layout.head_size])["states"]
        return out.reshape(self.config.N + 1, 3).copy()

    def _sqpmethod(self, max_iter: int) -> BufferedSolver:
        import casadi as ca

        if max_iter not in self._solvers:
            cfg = self.config
            opts: dict[str, Any] = {
                "qpsol": cfg.qpsol,
                "hessian_approximation": "exact",
                "max_iter": int(max_iter),
                "max_iter_ls": cfg.max_iter_ls,
                "tol_pr": cfg.tol,
                "tol_du": cfg.tol_du,
                "print_time": False,
                "print_iteration": False,
                "print_header": False,
                "print_status": False,
                "error_on_fail": False,
                # lam_p is the sensitivity to the ~7k map parameters: costly and unused.
                "calc_lam_p": False,
                "qpsol_options": _qpsol_options(cfg.qpsol),
            }
            opts.update(self._functions)
            opts.update(cfg.extra_options)
            self._solvers[max_iter] = BufferedSolver(ca.nlpsol(f"mpc_sqp_{max_iter}", "sqpmethod", self._nlp.nlp, opts))
        return self._solvers[max_iter]

    def _solve_sqpmethod(
        self, state: np.ndarray, guess: WarmStart, p: np.ndarray, lbg: np.ndarray, max_iter: int
    ) -> dict:
        n = self.config.N
        x0 = np.concatenate([np.asarray(guess.states, float).reshape(-1), np.asarray(guess.controls).reshape(-1)])
        x0[:3] = state
        x0 = _fix_yaw_branch(x0, state[2], n)
        lbx, ubx = self._lbx.copy(), self._ubx.copy()
        lbx[:3] = ubx[:3] = state
        args: dict[str, Any] = {"x0": x0, "p": p, "lbx": lbx, "ubx": ubx, "lbg": lbg, "ubg": self._ubg}
        if guess.lam_g is not None:
            args["lam_g0"], args["lam_x0"] = guess.lam_g, guess.lam_x
        solver = self._sqpmethod(max_iter)
        t0, c0 = time.perf_counter(), time.process_time()
        sol = solver(**args)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = solver.stats()
        # Through Function.buffer() CasADi accumulates its timing statistics across calls: keep this call's share.
        totals = {k: v for k, v in stats.items() if k.startswith(("t_wall_", "t_proc_", "n_call_"))}
        last = self._sqpmethod_totals.get(max_iter, {})
        this = {k: v - last.get(k, 0.0) for k, v in totals.items()}
        self._sqpmethod_totals[max_iter] = totals
        stats.update(this)
        stats.update(
            t_derivatives_s=this.get("t_wall_nlp_jac_fg", 0.0) + this.get("t_wall_nlp_hess_l", 0.0),
            t_qp_s=this.get("t_wall_QP", 0.0),
            t_linesearch_s=this.get("t_wall_linesearch", 0.0),
            t_total_s=elapsed,
        )
        z = np.asarray(sol["x"]).reshape(-1)
        lam_g, lam_x = sol["lam_g"], sol["lam_x"]
        finite = np.all(np.isfinite(lam_g)) and np.all(np.isfinite(lam_x))
        return {
            "states": z[: 3 * (n + 1)].reshape(n + 1, 3),
            "controls": z[3 * (n + 1) :].reshape(n, 2),
            "iterations": int(stats.get("iter_count", 0)),
            "success": bool(stats.get("success", False)),
            "status": str(stats.get("return_status", "unknown")),
            "cost": float(sol["f"][0]) if np.isfinite(sol["f"][0]) else float("inf"),
            "duals": {"lam_g": lam_g, "lam_x": lam_x} if finite else {},
            "time_s": elapsed,
            "cpu_s": cpu,
            "stats": stats,
            "args": args,
        }

    def build_fallback(self) -> None:
        """Create the fallback NLP solver now (it is otherwise built at the first failed solve, which would stall
        that control step)."""
        import casadi as ca

        cfg = self.config
        if self._fallback_solver is not None or cfg.fallback is None:
            return
        ipopt = {"print_level": 0, "max_iter": cfg.fallback_max_iter, "tol": 1e-8, "sb": "yes"}
        if cfg.fallback_max_time_s is not None:
            ipopt["max_wall_time"] = cfg.fallback_max_time_s
        opts = {"print_time": False, "error_on_fail": False, "calc_lam_p": False, "ipopt": ipopt}
        self._fallback_solver = BufferedSolver(ca.nlpsol("mpc_fallback", cfg.fallback, self._nlp.nlp, opts))

    def _solve_fallback(
        self, out: dict, state: np.ndarray, guess: WarmStart, p: np.ndarray, lbg: np.ndarray, lbx: np.ndarray
    ) -> dict:
        """IPOPT on the same NLP from the same start; keeps the SQP's figures when IPOPT fails too."""
        cfg = self.config
        self.build_fallback()
        if cfg.method == "sqp":
            args = {"x0": np.asarray(guess.controls, float).reshape(-1), "p": p, "lbx": lbx, "ubx": self._ubx}
            args.update(lbg=lbg, ubg=self._ubg)
        else:
            args = {k: v for k, v in out["args"].items() if k not in ("lam_g0", "lam_x0")}
        t0, c0 = time.perf_counter(), time.process_time()
        sol = self._fallback_solver(**args)
        out = dict(out, used_fallback=True)
        out["time_s"] += time.perf_counter() - t0
        out["cpu_s"] += time.process_time() - c0
        stats = self._fallback_solver.stats()
        if not stats.get("success", False):
            out["status"] = f"{out['status']}; {cfg.fallback}: {stats.get('return_status', 'failed')}"
            return out
        z = np.asarray(sol["x"]).reshape(-1)
        n = cfg.N
        if cfg.method == "sqp":
            out["states"], out["controls"] = self._states(z, p), z.reshape(n, 2).copy()
        else:
            out["states"], out["controls"] = z[: 3 * (n + 1)].reshape(n + 1, 3), z[3 * (n + 1) :].reshape(n, 2)
        out.update(success=True, status=f"{cfg.fallback}: {stats.get('return_status', '')}", duals={})
        out["cost"] = float(sol["f"][0])
        return out

    def with_config(self, **changes: Any) -> SQPMPC:
        """A new MPC with some config fields changed (builds a new NLP)."""
        return SQPMPC(self.robot, replace(self.config, **changes), self.grid_shape)


class BufferedSolver(BufferedFunction):
    """A CasADi nlpsol called through `Function.buffer()` (see `BufferedFunction`); omitted inputs are zero, as in
    CasADi's default for the initial guess and multipliers."""

    def __call__(self, **args: Any) -> dict[str, np.ndarray]:
        for name, arr in self.inputs.items():
            value = args.get(name)
            arr[:] = 0.0 if value is None else np.asarray(value, dtype=float).reshape(-1)
        self._trigger()
        return {name: arr.copy() for name, arr in self.outputs.items()}

    def stats(self) -> dict[str, Any]:
        # CasADi can raise while assembling the stats of a solve that failed inside the QP; report that as a failure.
        try:
            return dict(self._buffer.stats())
        except RuntimeError as exc:
            return {"success": False, "return_status": f"stats unavailable: {str(exc).splitlines()[-1][:80]}"}


def _qpsol_options(qpsol: str) -> dict[str, Any]:
    opts: dict[str, Any] = {"error_on_fail": False}
    if qpsol == "piqp":
        opts["piqp"] = {"verbose": False}
    elif qpsol == "osqp":
        opts["osqp"] = {"verbose": False}
    elif qpsol == "qrqp":
        opts["print_iter"] = False
        opts["print_header"] = False
    elif qpsol == "qpoases":
        opts["printLevel"] = "none"
    return opts


# How far (in x and y) an unused moving-obstacle slot is parked from the robot [m]: beyond any horizon's reach.
PARKED_M = 1.0e3


def _finite_vector(value: Any, size: int, name: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: expected {size} numbers, got {value!r}") from exc
    if arr.size != size:
        raise InputError(f"{name}: expected {size} numbers, got {arr.size}")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{name}: contains NaN or inf: {arr.tolist()}")
    return arr


def _check_goal(field: DistanceField, goal: np.ndarray) -> None:
    """A goal inside the planning window must lie in known free space."""
    cell = field.grid.world_to_cell(goal[:2])
    if not field.grid.in_bounds(cell):
        return
    r, c = int(cell[0]), int(cell[1])
    if field.grid.occupied_mask()[r, c]:
        raise InfeasibleProblemError(f"goal ({goal[0]:.3f}, {goal[1]:.3f}) lies in an occupied cell ({r}, {c})")
    if field.grid.unknown_mask()[r, c]:
        raise InfeasibleProblemError(f"goal ({goal[0]:.3f}, {goal[1]:.3f}) lies in unknown space, cell ({r}, {c})")


def _fix_yaw_branch(x0: np.ndarray, yaw: float, n: int) -> np.ndarray:
    """Unwrap the guessed yaws so they continue from the current yaw (a shifted guess may sit 2*pi away)."""
    yaws = x0[2 : 3 * (n + 1) : 3]
    offset = np.round((yaws[1] - yaw) / (2 * np.pi)) * 2 * np.pi if n >= 1 else 0.0
    yaws[1:] -= offset
    x0[2 : 3 * (n + 1) : 3] = yaws
    return x0
