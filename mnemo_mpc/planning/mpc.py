"""SQP model-predictive control for a unicycle on an occupancy-grid ESDF (seed 002 §5.2).

The paper's planner: "For each MPC step, one instance of trajectory optimization with SQP was run", capped at
10 iterations cold (4.78 on average) and 1 iteration when warm-started. We solve

    min   sum_{k=1..N} w_track |p_k - r_k|^2 + w_goal |p_N - g|^2 + h w_yaw (1 - cos(yaw_N - yaw_g))
          + sum_k (w_v v_k^2 + w_w w_k^2) + sum_k (w_dv dv_k^2 + w_dw dw_k^2)
    s.t.  x_0 = current state,  x_{k+1} = f(x_k, u_k)                         (robot.unicycle_step)
          v_min <= v_k <= v_max,  |w_k| <= w_max
          |u_k - u_{k-1}| <= (a_max, alpha_max) dt,  with u_{-1} = the current velocity
          esdf(p_k) >= radius + safety_margin (+ a small interpolation buffer),   k = 1..N

with CasADi `sqpmethod` (exact Hessian, QP backend selectable; piqp by default) and IPOPT as the fallback for solves
the SQP does not finish. The NLP is built once per (N, dt, grid shape): the ESDF enters as the parametric
coefficients of a bicubic B-spline that interpolates it at the window's cell centres (computed per map by
`DistanceField.spline_coefficients`), and the window's origin, rotation and resolution enter as parameters that map
query points into grid coordinates. Start, goal and reference are
parameters/bounds, so nothing is rebuilt between calls.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from mnemo_mpc.errors import InfeasibleProblemError, InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.robot import RobotModel, unicycle_step

log = logging.getLogger(__name__)

SPLINE_PAD = 3  # cells of extrapolated ESDF around the window, so the spline is defined a little past its edge
QP_SOLVERS = ("piqp", "qrqp", "osqp", "proxqp", "qpoases", "hpipm")
# fatrop needs the variables ordered stage by stage and the stage-coupling rate constraints u_k - u_{k-1} folded
# into an augmented state; that reformulation is not done here, so IPOPT is the one fallback.
FALLBACK_SOLVERS = ("ipopt",)


@dataclass(frozen=True)
class MPCConfig:
    """MPC settings. N, dt and max_iter are the paper's (horizon 30 is ours; the paper's cold cap is 10 iterations)."""

    N: int = 30
    dt: float = 0.1
    qpsol: str = "piqp"
    max_iter: int = 10
    max_iter_ls: int = 10
    fallback: str | None = "ipopt"
    fallback_max_iter: int = 200
    tol: float = 1e-6  # primal tolerance of the SQP (max constraint violation)
    tol_du: float = 1e-4  # dual tolerance (max gradient of the Lagrangian; costs are O(1), see the weights)
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
    second_order_corrections: bool = False
    extra_options: dict = field(default_factory=dict)  # passed to sqpmethod verbatim (experiments)
    convexify: str | None = None  # piqp handles the indefinite exact Hessian here; "regularize" slowed SQP to linear
    convexify_margin: float = 1e-6
    # Distance within which the terminal heading term is switched on (goal reachable within the horizon).
    heading_radius: float | None = None
    densify: int = 10  # points per step for the clearance check between knots

    def __post_init__(self) -> None:
        if self.N < 1 or not math.isfinite(self.dt) or self.dt <= 0:
            raise InputError(f"MPCConfig: expected N >= 1 and dt > 0, got N={self.N}, dt={self.dt}")
        if self.qpsol not in QP_SOLVERS:
            raise InputError(f"MPCConfig.qpsol: expected one of {QP_SOLVERS}, got {self.qpsol!r}")
        if self.fallback is not None and self.fallback not in FALLBACK_SOLVERS:
            raise InputError(f"MPCConfig.fallback: expected one of {FALLBACK_SOLVERS} or None, got {self.fallback!r}")
        if self.max_iter < 1:
            raise InputError(f"MPCConfig.max_iter: expected >= 1, got {self.max_iter}")


@dataclass
class WarmStart:
    """A full primal guess (states (N+1, 3), controls (N, 2)) and, optionally, the duals of a previous solve."""

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
    min_clearance: float  # along the densified trajectory, bilinear ESDF
    start: str  # "cold" | "warm" | "shift"
    used_fallback: bool = False
    duals: dict[str, np.ndarray] = field(default_factory=dict)
    dt: float = 0.1
    required_clearance: float = 0.0
    wall_time_s: float = 0.0  # the whole `solve` call: checks, guess, solver, post-checks
    cpu_time_s: float = 0.0  # process CPU time of the solver call(s); less sensitive to other loads than time_s

    @property
    def feasible(self) -> bool:
        """Dynamics error <= 1e-6 and clearance >= radius + margin - 1e-3 on the densified trajectory."""
        return self.max_dynamics_violation <= 1e-6 and self.min_clearance >= self.required_clearance - 1e-3

    def shifted(self, with_duals: bool = True) -> WarmStart:
        """The receding-horizon shift: drop the first step, repeat the last control once more at the end."""
        states = np.concatenate([self.states[1:], self.states[-1:]], axis=0)
        controls = np.concatenate([self.controls[1:], self.controls[-1:]], axis=0)
        states[-1] = np.asarray(unicycle_step(states[-2], controls[-1], self.dt))
        lam_g = lam_x = None
        if with_duals and "lam_g" in self.duals:
            n = self.controls.shape[0]
            lg = self.duals["lam_g"]
            dyn, acc, clr = lg[: 3 * n], lg[3 * n : 5 * n], lg[5 * n :]
            lam_g = np.concatenate([_shift_blocks(dyn, 3), _shift_blocks(acc, 2), _shift_blocks(clr, 1)])
            lx = self.duals["lam_x"]
            xs, us = lx[: 3 * (n + 1)], lx[3 * (n + 1) :]
            xs = _shift_blocks(xs, 3)
            xs[:3] = 0.0  # x_0 is fixed by its bounds; its multiplier belongs to the old start
            lam_x = np.concatenate([xs, _shift_blocks(us, 2)])
        return WarmStart(states, controls, lam_g, lam_x)


def _shift_blocks(v: np.ndarray, size: int) -> np.ndarray:
    return np.concatenate([v[size:], v[-size:]])


class SQPMPC:
    """The MPC of the module docstring, built once for (N, dt, grid_shape) and solved many times."""

    def __init__(self, robot: RobotModel, config: MPCConfig | None = None, grid_shape: tuple[int, int] = (80, 80)):
        import casadi as ca

        self.robot = robot
        self.config = config = config or MPCConfig()
        h, w = int(grid_shape[0]), int(grid_shape[1])
        if h < 4 or w < 4:
            raise InputError(f"SQPMPC.grid_shape: a cubic spline needs at least 4x4 cells, got {grid_shape}")
        self.grid_shape = (h, w)
        n, dt = config.N, config.dt
        self._heading_radius = config.heading_radius if config.heading_radius is not None else robot.v_max * dt * n

        nlp = self._build_nlp(ca)
        self._nlp = nlp
        opts = self._solver_options_base()
        t0 = time.perf_counter()
        self._solver = BufferedSolver(ca.nlpsol("mpc_sqp", "sqpmethod", nlp, opts))
        self._fallback_solver = None
        log.debug("built SQP MPC N=%d grid=%s in %.2fs", n, self.grid_shape, time.perf_counter() - t0)

        lbu, ubu = robot.control_lower, robot.control_upper
        self._lbx = np.concatenate([np.full(3 * (n + 1), -np.inf), np.tile(lbu, n)])
        self._ubx = np.concatenate([np.full(3 * (n + 1), np.inf), np.tile(ubu, n)])
        amax = robot.accel_limits * dt
        self._lbg = np.concatenate([np.zeros(3 * n), np.tile(-amax, n), np.zeros(n)])
        self._ubg = np.concatenate([np.zeros(3 * n), np.tile(amax, n), np.full(n, np.inf)])

    def _build_nlp(self, ca: Any) -> dict[str, Any]:
        """The NLP of the module docstring as {"x", "p", "f", "g"}.

        All arithmetic lives in one SX function (fast, exact derivatives); only the gather of each knot's 4x4 spline
        coefficients from the map parameter needs MX (parametric indexing). The gather is piecewise constant in the
        knot position, so it adds no derivative terms: the spline's smoothness comes from the SX basis polynomials.
        """
        cfg = self.config
        n, dt = cfg.N, cfg.dt
        h, w = self.grid_shape
        rows, cols = h + 2 * SPLINE_PAD, w + 2 * SPLINE_PAD
        # Parameters: u_prev(2), goal(3), heading_on(1), ref(2N), origin(2), rot(2), inv_res(1), then the ESDF's
        # cubic B-spline coefficients on the padded window (rows * cols, row-major).
        self._np_head = 2 + 3 + 1 + 2 * n + 2 + 2 + 1
        X = ca.SX.sym("X", 3, n + 1)
        U = ca.SX.sym("U", 2, n)
        Ph = ca.SX.sym("P", self._np_head)
        u_prev, goal, heading_on = Ph[0:2], Ph[2:5], Ph[5]
        ref = ca.reshape(Ph[6 : 6 + 2 * n], 2, n)
        o = 6 + 2 * n
        origin, rot, inv_res = Ph[o : o + 2], Ph[o + 2 : o + 4], Ph[o + 4]

        # Rotate into the grid frame and scale to cells; cell (r, c)'s centre is spline knot (c + pad, r + pad).
        d = X[0:2, 1:] - ca.repmat(origin, 1, n)
        qx = (rot[0] * d[0, :] + rot[1] * d[1, :]) * inv_res - 0.5 + SPLINE_PAD
        qy = (-rot[1] * d[0, :] + rot[0] * d[1, :]) * inv_res - 0.5 + SPLINE_PAD
        qx = ca.fmin(ca.fmax(qx, 1.0), cols - 2.0 - 1e-9)  # keep the 4x4 support inside the padded grid
        qy = ca.fmin(ca.fmax(qy, 1.0), rows - 2.0 - 1e-9)
        base = ca.floor(qx) + cols * ca.floor(qy)  # (1, N) flat index of each knot's cell
        knot_cells = ca.Function("knot_cells", [X, Ph], [base])

        C16 = ca.SX.sym("C16", 16, n)  # gathered coefficients, row a + 4 b for offsets (a - 1, b - 1)
        bx = _cubic_bspline_basis(qx - ca.floor(qx))  # (4, N)
        by = _cubic_bspline_basis(qy - ca.floor(qy))
        weights = ca.vertcat(*[bx * ca.repmat(by[b, :], 4, 1) for b in range(4)])  # (16, N), same row order as C16
        clr = ca.sum1(C16 * weights).T

        nxt = unicycle_step([X[0, :-1], X[1, :-1], X[2, :-1]], [U[0, :], U[1, :]], dt, ca.cos, ca.sin)
        dyn = ca.reshape(ca.vertcat(X[0, 1:] - nxt[0], X[1, 1:] - nxt[1], X[2, 1:] - nxt[2]), 3 * n, 1)
        du = ca.horzcat(U[:, 0] - u_prev, U[:, 1:] - U[:, :-1])  # (2, N)
        acc = ca.reshape(du, 2 * n, 1)

        track = ca.sumsqr(X[0:2, 1:] - ref)
        term = ca.sumsqr(X[0:2, n] - goal[0:2])
        heading = heading_on * (1 - ca.cos(X[2, n] - goal[2]))
        effort = cfg.w_v * ca.sumsqr(U[0, :]) + cfg.w_w * ca.sumsqr(U[1, :])
        smooth = cfg.w_dv * ca.sumsqr(du[0, :]) + cfg.w_dw * ca.sumsqr(du[1, :])
        cost = cfg.w_track * track + cfg.w_goal * term + cfg.w_yaw * heading + effort + smooth
        g_all = ca.vertcat(dyn, acc, clr)
        wsx = ca.vertcat(ca.vec(X), ca.vec(U))
        core = ca.Function("mpc_core", [X, U, Ph, C16], [cost, g_all])
        # Exact derivatives with the gathered coefficients held fixed: the gather is piecewise constant in the knot
        # positions, so these are the true first and second derivatives of the spline constraint. Built in SX once;
        # letting CasADi differentiate the MX graph instead cost ~0.6 ms per SQP iteration here, vs ~0.05 ms.
        lam_f = ca.SX.sym("lam_f")
        lam_g = ca.SX.sym("lam_g", g_all.shape[0])
        grad_f = ca.gradient(cost, wsx)
        jac_g = ca.jacobian(g_all, wsx)
        hess = ca.hessian(lam_f * cost + ca.dot(lam_g, g_all), wsx)[0]
        core_jac = ca.Function("mpc_core_jac", [X, U, Ph, C16], [cost, grad_f, g_all, jac_g])
        core_hess = ca.Function("mpc_core_hess", [X, U, Ph, C16, lam_f, lam_g], [hess])

        xm = ca.MX.sym("x", wsx.shape[0])
        Xm = ca.reshape(xm[: 3 * (n + 1)], 3, n + 1)
        Um = ca.reshape(xm[3 * (n + 1) :], 2, n)
        P = ca.MX.sym("p", self._np_head + rows * cols)
        Phm, coeffs = P[: self._np_head], P[self._np_head :]
        offsets = np.array([a + cols * b for b in range(-1, 3) for a in range(-1, 3)], dtype=float)
        idx = ca.repmat(ca.DM(offsets), 1, n) + ca.repmat(knot_cells(Xm, Phm), 16, 1)
        gathered = ca.reshape(coeffs[ca.vec(idx)], 16, n)
        f, g = core(Xm, Um, Phm, gathered)
        lfm, lgm = ca.MX.sym("lam_f"), ca.MX.sym("lam_g", g_all.shape[0])
        self._custom_functions = {
            "jac_fg": ca.Function(
                "mpc_jac_fg",
                [xm, P],
                list(core_jac(Xm, Um, Phm, gathered)),
                ["x", "p"],
                ["f", "grad_f_x", "g", "jac_g_x"],
            ),
            "hess_lag": ca.Function(
                "mpc_hess_l",
                [xm, P, lfm, lgm],
                [core_hess(Xm, Um, Phm, gathered, lfm, lgm)],
                ["x", "p", "lam_f", "lam_g"],
                ["hess_gamma_x_x"],
            ),
        }
        return {"x": xm, "p": P, "f": f, "g": g}

    # ------------------------------------------------------------------------------------------------------------
    def _fallback(self) -> Any:
        import casadi as ca

        if self._fallback_solver is None:
            cfg = self.config
            opts = {
                "print_time": False,
                "error_on_fail": False,
                "calc_lam_p": False,
                "ipopt": {"print_level": 0, "max_iter": cfg.fallback_max_iter, "tol": 1e-8, "sb": "yes"},
            }
            self._fallback_solver = BufferedSolver(ca.nlpsol("mpc_fallback", cfg.fallback, self._nlp, opts))
        return self._fallback_solver

    def cold_start(self, state: np.ndarray) -> WarmStart:
        """Hold the current pose with zero controls: dynamically consistent and never through an obstacle."""
        n = self.config.N
        return WarmStart(np.tile(np.asarray(state, dtype=float), (n + 1, 1)), np.zeros((n, 2)))

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
    ) -> PlanResult:
        """Plan from `state` with current `velocity` (v, w) towards `goal` (x, y, yaw), tracking `reference`.

        `reference` is (N+1, 2|3) map-frame points for knots 0..N (row 0 is ignored) or None to track the goal at
        every knot. `warm_start` None means the cold start (hold the pose). Returns a PlanResult; a failed solve has
        `success=False` and finite arrays (the last iterate when finite, else the hold-pose guess).
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
        if reference is None:
            ref = np.tile(goal[:2], (n, 1))
        else:
            reference = np.asarray(reference, dtype=float)
            if reference.ndim != 2 or reference.shape[0] != n + 1 or reference.shape[1] not in (2, 3):
                raise InputError(f"SQPMPC.solve.reference: expected shape ({n + 1}, 2 or 3), got {reference.shape}")
            if not np.all(np.isfinite(reference)):
                raise InputError("SQPMPC.solve.reference: contains NaN or inf")
            ref = reference[1:, :2]

        d0 = float(field.distance(state[:2]))
        if d0 < robot.radius:
            raise InfeasibleProblemError(
                f"start pose ({state[0]:.3f}, {state[1]:.3f}) is in collision: clearance {d0:.3f} m < robot radius "
                f"{robot.radius:.3f} m"
            )
        _check_goal(field, goal)
        required = robot.clearance
        # A start already inside the margin band must still have a feasible problem: never get closer than now.
        lb_clear = min(required + cfg.clearance_buffer, d0)

        if warm_start is None:
            guess = self.cold_start(state)
            label = start_label or "cold"
        else:
            guess = warm_start
            label = start_label or "warm"
            if guess.states.shape != (n + 1, 3) or guess.controls.shape != (n, 2):
                raise InputError(
                    f"SQPMPC.solve.warm_start: expected states ({n + 1}, 3) and controls ({n}, 2), got "
                    f"{guess.states.shape} and {guess.controls.shape}"
                )
        x0 = np.concatenate(
            [np.asarray(guess.states, float).copy().reshape(-1), np.asarray(guess.controls).reshape(-1)]
        )
        x0[:3] = state
        x0 = _fix_yaw_branch(x0, state[2], n)

        grid = field.grid
        ox, oy, oyaw = grid.origin
        dist_goal = float(np.hypot(*(goal[:2] - state[:2])))
        head = np.concatenate(
            [
                np.clip(velocity, robot.control_lower, robot.control_upper),
                goal,
                [1.0 if dist_goal <= self._heading_radius else 0.0],
                ref.reshape(-1),
                [ox, oy, math.cos(oyaw), math.sin(oyaw), 1.0 / grid.resolution],
            ]
        )
        p = np.concatenate([head, field.spline_coefficients(SPLINE_PAD).reshape(-1)])
        lbx, ubx = self._lbx.copy(), self._ubx.copy()
        lbx[:3] = ubx[:3] = state
        lbg = self._lbg.copy()
        lbg[-n:] = lb_clear

        args: dict[str, Any] = {"x0": x0, "p": p, "lbx": lbx, "ubx": ubx, "lbg": lbg, "ubg": self._ubg}
        if guess.lam_g is not None and guess.lam_x is not None:
            args["lam_g0"] = guess.lam_g
            args["lam_x0"] = guess.lam_x
        solver = self._solver
        opts_iter = max_iter if max_iter is not None else cfg.max_iter
        if opts_iter != cfg.max_iter:
            solver = self._solver_with_max_iter(opts_iter)
        t0, c0 = time.perf_counter(), time.process_time()
        sol = solver(**args)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        stats = solver.stats()
        iterations = int(stats.get("iter_count", 0))
        status = str(stats.get("return_status", "unknown"))
        success = bool(stats.get("success", False))
        used_fallback = False
        z = np.asarray(sol["x"]).reshape(-1)
        if not success and cfg.fallback is not None:
            fb = self._fallback()
            t1, c1 = time.perf_counter(), time.process_time()
            sol_fb = fb(**{k: v for k, v in args.items() if k not in ("lam_g0", "lam_x0")})
            elapsed += time.perf_counter() - t1
            cpu += time.process_time() - c1
            fb_stats = fb.stats()
            used_fallback = True
            if fb_stats.get("success", False):
                sol, success = sol_fb, True
                z = np.asarray(sol["x"]).reshape(-1)
                status = f"{cfg.fallback}: {fb_stats.get('return_status', '')}"
            else:
                status = f"{status}; {cfg.fallback}: {fb_stats.get('return_status', 'failed')}"
        if not np.all(np.isfinite(z)):
            z, success = x0, False
            status += " (non-finite iterate replaced by the initial guess)"
        states = z[: 3 * (n + 1)].reshape(n + 1, 3)
        controls = z[3 * (n + 1) :].reshape(n, 2)
        cost = float(sol["f"][0]) if np.isfinite(sol["f"][0]) else float("inf")
        duals = {}
        lam_g, lam_x = np.asarray(sol["lam_g"]).reshape(-1), np.asarray(sol["lam_x"]).reshape(-1)
        if np.all(np.isfinite(lam_g)) and np.all(np.isfinite(lam_x)):
            duals = {"lam_g": lam_g, "lam_x": lam_x}
        dyn_err = float(np.max(np.abs(robot.step(states[:-1], controls, cfg.dt) - states[1:])))
        pts = robot.densify(states, controls, cfg.dt, cfg.densify)
        min_clear = field.min_clearance(pts)
        return PlanResult(
            states=states,
            controls=controls,
            iterations=iterations,
            time_s=elapsed,
            cpu_time_s=cpu,
            status=status,
            success=success,
            cost=cost,
            max_dynamics_violation=dyn_err,
            min_clearance=min_clear,
            start=label,
            used_fallback=used_fallback,
            duals=duals,
            dt=cfg.dt,
            required_clearance=min(required, d0),
            wall_time_s=time.perf_counter() - t_wall,
        )

    def _solver_with_max_iter(self, max_iter: int) -> Any:
        # A different iteration cap is a different solver object; cache them (no NLP rebuild: same expressions).
        import casadi as ca

        cache = self.__dict__.setdefault("_solver_cache", {})
        if max_iter not in cache:
            opts = dict(self._solver_options_base())
            opts["max_iter"] = int(max_iter)
            cache[max_iter] = BufferedSolver(ca.nlpsol(f"mpc_sqp_{max_iter}", "sqpmethod", self._nlp, opts))
        return cache[max_iter]

    def _solver_options_base(self) -> dict[str, Any]:
        cfg = self.config
        opts: dict[str, Any] = {
            "qpsol": cfg.qpsol,
            "hessian_approximation": "exact",
            "max_iter": cfg.max_iter,
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
        if cfg.convexify:
            opts["convexify_strategy"] = cfg.convexify
            opts["convexify_margin"] = cfg.convexify_margin
        if cfg.second_order_corrections:
            opts["second_order_corrections"] = True
        opts.update(getattr(self, "_custom_functions", {}))
        opts.update(cfg.extra_options)
        return opts

    def with_config(self, **changes: Any) -> SQPMPC:
        """A new MPC with some config fields changed (builds a new NLP)."""
        return SQPMPC(self.robot, replace(self.config, **changes), self.grid_shape)


def _cubic_bspline_basis(t: Any) -> Any:
    """The four uniform cubic B-spline weights for the knots at -1, 0, 1, 2 relative to floor(q), t in [0, 1)."""
    import casadi as ca

    t2, t3 = t * t, t * t * t
    return ca.vertcat((1 - t) ** 3 / 6, (3 * t3 - 6 * t2 + 4) / 6, (-3 * t3 + 3 * t2 + 3 * t + 1) / 6, t3 / 6)


class BufferedSolver:
    """Calls a CasADi nlpsol through `Function.buffer()`: inputs and outputs are numpy arrays CasADi reads and writes
    in place. The ordinary call converts each numpy argument element by element; for the ~7k map coefficients that
    cost more than the SQP itself (~3 ms on this machine vs ~10 us here)."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self._buffer, self._trigger = function.buffer()
        self._in = {n: np.zeros(function.sparsity_in(i).nnz()) for i, n in enumerate(function.name_in())}
        self._out = {n: np.zeros(function.sparsity_out(i).nnz()) for i, n in enumerate(function.name_out())}
        for i, n in enumerate(function.name_in()):
            self._buffer.set_arg(i, memoryview(self._in[n]))
        for i, n in enumerate(function.name_out()):
            self._buffer.set_res(i, memoryview(self._out[n]))

    def __call__(self, **args: np.ndarray) -> dict[str, np.ndarray]:
        for name, arr in self._in.items():
            value = args.get(name)
            if value is None:
                arr[:] = 0.0  # CasADi's default for an omitted input (initial guess / multipliers)
            else:
                arr[:] = np.asarray(value, dtype=float).reshape(-1)
        self._trigger()
        return {name: arr.copy() for name, arr in self._out.items()}

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
