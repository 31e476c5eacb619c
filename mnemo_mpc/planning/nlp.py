"""The MPC's nonlinear program in CasADi, in the two forms the package solves (see `mnemo_mpc.planning.mpc`).

The problem (module docstring of `mnemo_mpc.planning.mpc`): unicycle dynamics x_{k+1} = f(x_k, u_k), control bounds,
rate bounds |u_k - u_{k-1}| <= (a_max, alpha_max) dt, clearance esdf(c_kd) >= r_d + margin for each covering disc d
of the footprint (centre c_kd = p_k + R(yaw_k) o_d, `planning.footprint`; one disc at o = 0 for a round robot), and
a cost that is a
sum of squares, cost = |r(x, u)|^2, with the residuals

    r = ( sqrt(w_track) (p_k - ref_k),  sqrt(w_goal) (p_N - g),  sqrt(2 w_yaw h) sin((yaw_N - yaw_g) / 2),
          sqrt(w_v) v_k,  sqrt(w_w) w_k,  sqrt(w_dv) dv_k,  sqrt(w_dw) dw_k )

(1 - cos t = 2 sin^2(t/2), so the heading term is a square too; h in {0, 1} switches it on near the goal, so
sqrt(h) = h). Writing
the cost as |r|^2 is what gives `condensed` its Gauss-Newton Hessian 2 J_r^T J_r for free.

* `condensed`: the variables are the controls only; the states are the rollout of the robot model from the current
  state (single shooting). Every iterate satisfies the dynamics exactly, so a warm start is judged on optimality
  alone. Solved by our SQP (`mnemo_mpc.planning.sqp`).
* `multiple_shooting`: states and controls are variables, the dynamics are equality constraints. Solved by CasADi's
  `sqpmethod` (the configuration this package used before its own SQP; `bench sqp --baseline` runs it).

The map enters as a parameter: the ESDF's bicubic B-spline coefficients on the padded window (computed per map by
`DistanceField.spline_coefficients`); the window's origin, rotation and resolution map query points into grid
coordinates. With a costmap weight w_c > 0 (issue 29) a second map follows it, the soft cost c in [0, 1] of a Nav2
costmap's inflation (`DistanceField.cost_spline_coefficients`, same lattice), and each knot adds the residual
sqrt(w_c) c(p_k) at the robot's centre (cost w_c c^2: a sum of squares like the rest, so Gauss-Newton keeps its
curvature; with Nav2's exponential inflation, c^2 decays like c with twice the cost_scaling_factor). With w_c = 0 the
NLP, its parameters and its compiled code are exactly those without it. All arithmetic is SX (fast, exact
derivatives); only the gather of each knot's 4x4 coefficients from the map parameter needs MX (parametric indexing).
The gather is piecewise constant in the knot position, so the derivatives taken with the gathered coefficients held
fixed are the true derivatives of the spline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import casadi as ca
import numpy as np

from mnemo_mpc.planning.robot import unicycle_step

SPLINE_PAD = 3  # cells of extrapolated ESDF around the window, so the spline is defined a little past its edge


@dataclass(frozen=True)
class ParamLayout:
    """Offsets into the NLP parameter vector p = [head, spline coefficients (rows x cols, row-major)] and, with
    `cost_field`, the soft cost's spline coefficients after them (rows x cols, same lattice).

    head = state (3), u_prev (2), goal (3), heading_on (1), ref (2N), origin (2), rot = (cos, sin) (2), 1/res (1),
    and with `obstacles` = M > 0 the predicted centres of M moving obstacles at knots 1..N (2 M N, knot-major:
    knot k's block is x_1, y_1, ..., x_M, y_M).
    """

    N: int
    grid_shape: tuple[int, int]
    obstacles: int = 0
    cost_field: bool = False

    @property
    def spline_shape(self) -> tuple[int, int]:
        return self.grid_shape[0] + 2 * SPLINE_PAD, self.grid_shape[1] + 2 * SPLINE_PAD

    @property
    def head_size(self) -> int:
        return 3 + 2 + 3 + 1 + 2 * self.N + 2 + 2 + 1 + 2 * self.obstacles * self.N

    @property
    def map_size(self) -> int:
        rows, cols = self.spline_shape
        return rows * cols

    @property
    def size(self) -> int:
        return self.head_size + self.map_size * (2 if self.cost_field else 1)

    def head(
        self,
        state: np.ndarray,
        u_prev: np.ndarray,
        goal: np.ndarray,
        heading_on: float,
        ref: np.ndarray,
        origin: tuple[float, float, float],
        resolution: float,
        obstacles: np.ndarray | None = None,
    ) -> np.ndarray:
        """The head of p from plain arrays (`ref`: (N, 2) tracking points for knots 1..N; `obstacles`: (N, M, 2)
        predicted centres at knots 1..N, required when the layout has M > 0 slots)."""
        ox, oy, oyaw = origin
        parts = [
            state,
            u_prev,
            goal,
            [heading_on],
            np.asarray(ref, dtype=float).reshape(-1),
            [ox, oy, np.cos(oyaw), np.sin(oyaw), 1.0 / resolution],
        ]
        if self.obstacles:
            parts.append(np.asarray(obstacles, dtype=float).reshape(self.N * self.obstacles * 2))
        return np.concatenate(parts)


@dataclass(frozen=True)
class CostWeights:
    w_track: float
    w_goal: float
    w_yaw: float
    w_v: float
    w_w: float
    w_dv: float
    w_dw: float


def _unpack_head(head: Any, n: int, m: int = 0) -> dict[str, Any]:
    o = 9 + 2 * n
    out = {
        "state": head[0:3],
        "u_prev": head[3:5],
        "goal": head[5:8],
        "heading_on": head[8],
        "ref": ca.reshape(head[9 : 9 + 2 * n], 2, n),
        "origin": head[o : o + 2],
        "rot": head[o + 2 : o + 4],
        "inv_res": head[o + 4],
    }
    if m:
        out["obstacles"] = ca.reshape(head[o + 5 : o + 5 + 2 * m * n], 2 * m, n)  # column k: knot k + 1
    return out


def _obstacle_distances(position: Any, centres: Any, m: int) -> Any:
    """Distances (M,) from the robot's rotation centre to M predicted obstacle centres (2 M,): the rows of the
    time-varying constraint |p_k - o_j(t_k)| >= R_robot + R_j(t_k) + margin (`SQPMPC`, issue 28). A tiny floor
    under the square root keeps the derivative finite when a far slot's centre and the robot coincide."""
    return ca.vertcat(
        *[
            ca.sqrt((position[0] - centres[2 * j]) ** 2 + (position[1] - centres[2 * j + 1]) ** 2 + 1e-12)
            for j in range(m)
        ]
    )


def cubic_bspline_basis(t: Any) -> Any:
    """The four uniform cubic B-spline weights for the knots at -1, 0, 1, 2 relative to floor(q), t in [0, 1)."""
    t2, t3 = t * t, t * t * t
    return ca.vertcat((1 - t) ** 3 / 6, (3 * t3 - 6 * t2 + 4) / 6, (-3 * t3 + 3 * t2 + 3 * t + 1) / 6, t3 / 6)


def _spline_coordinates(positions: Any, h: dict[str, Any], spline_shape: tuple[int, int]) -> tuple[Any, Any]:
    """Map-frame knot positions (2, N) -> spline coordinates (qx, qy): rotate into the grid frame, scale to cells;
    cell (r, c)'s centre is spline knot (c + pad, r + pad). Clamped so the 4x4 support stays inside the padding."""
    rows, cols = spline_shape
    n = positions.shape[1]
    origin, rot, inv_res = h["origin"], h["rot"], h["inv_res"]
    d = positions - ca.repmat(origin, 1, n)
    qx = (rot[0] * d[0, :] + rot[1] * d[1, :]) * inv_res - 0.5 + SPLINE_PAD
    qy = (-rot[1] * d[0, :] + rot[0] * d[1, :]) * inv_res - 0.5 + SPLINE_PAD
    qx = ca.fmin(ca.fmax(qx, 1.0), cols - 2.0 - 1e-9)
    qy = ca.fmin(ca.fmax(qy, 1.0), rows - 2.0 - 1e-9)
    return qx, qy


def _spline_clearance(qx: Any, qy: Any, c16: Any) -> Any:
    """Bicubic spline value at (qx, qy) given each knot's 16 gathered coefficients (row a + 4 b: offsets a-1, b-1)."""
    bx = cubic_bspline_basis(qx - ca.floor(qx))  # (4, N)
    by = cubic_bspline_basis(qy - ca.floor(qy))
    weights = ca.vertcat(*[bx * ca.repmat(by[b, :], 4, 1) for b in range(4)])  # (16, N)
    return ca.sum1(c16 * weights).T


def _disc_centres(xs: Any, offsets: np.ndarray) -> list[Any]:
    """Map-frame centres c_d = p + R(yaw) o_d (2 x 1 each) of the covering discs of a robot at pose `xs` (SX, 3).

    A disc at the origin is p itself, so a round robot's NLP is the same expression graph as before footprints."""
    c, s = ca.cos(xs[2]), ca.sin(xs[2])
    return [
        xs[0:2] if ox == 0.0 and oy == 0.0 else xs[0:2] + ca.vertcat(c * ox - s * oy, s * ox + c * oy)
        for ox, oy in np.asarray(offsets, dtype=float)
    ]


def _check_offsets(disc_offsets: Any) -> np.ndarray:
    offsets = np.asarray(disc_offsets, dtype=float)
    if offsets.ndim != 2 or offsets.shape[1] != 2 or offsets.shape[0] < 1 or not np.all(np.isfinite(offsets)):
        raise ValueError(f"disc_offsets: expected a finite (K >= 1, 2) array, got shape {offsets.shape}")
    return offsets


def _rollout(state: Any, U: Any, dt: float) -> Any:
    """States (3, N+1) of the unicycle from `state` under controls U (2, N) (`robot.unicycle_step`)."""
    xs = [state]
    for k in range(U.shape[1]):
        xs.append(ca.vertcat(*unicycle_step(xs[-1], U[:, k], dt, ca.cos, ca.sin)))
    return ca.horzcat(*xs)


def _rates(U: Any, u_prev: Any) -> Any:
    """du_k = u_k - u_{k-1} with u_{-1} the current velocity: (2, N)."""
    return ca.horzcat(U[:, 0] - u_prev, U[:, 1:] - U[:, :-1])


def cost_residuals(X: Any, U: Any, h: dict[str, Any], w: CostWeights) -> tuple[Any, Any]:
    """r of the module docstring as (state residuals, control residuals): cost = |r_x|^2 + |r_u|^2. The control
    residuals (effort, rate smoothness) are linear in U, so their Gauss-Newton Hessian is a constant."""
    n = U.shape[1]
    du = _rates(U, h["u_prev"])
    r_x = ca.vertcat(
        np.sqrt(w.w_track) * ca.vec(X[0:2, 1:] - h["ref"]),
        np.sqrt(w.w_goal) * (X[0:2, n] - h["goal"][0:2]),
        # h in {0, 1}, so h sqrt(2 w) is sqrt(2 w h) without a square root of the parameter: AD through the parameter
        # path would multiply its infinite slope at h = 0 by a zero seed (NaN in IPOPT's Hessian).
        h["heading_on"] * np.sqrt(2.0 * w.w_yaw) * ca.sin(0.5 * (X[2, n] - h["goal"][2])),
    )
    r_u = ca.vertcat(
        np.sqrt(w.w_v) * U[0, :].T,
        np.sqrt(w.w_w) * U[1, :].T,
        np.sqrt(w.w_dv) * du[0, :].T,
        np.sqrt(w.w_dw) * du[1, :].T,
    )
    return r_x, r_u


def _gather_coefficients(cells: Any, coeffs: Any, n: int, cols: int) -> Any:
    """MX: the 16 spline coefficients around each knot's base cell (flat indices `cells`, (1, N))."""
    offsets = np.array([a + cols * b for b in range(-1, 3) for a in range(-1, 3)], dtype=float)
    idx = ca.repmat(ca.DM(offsets), 1, n) + ca.repmat(cells, 16, 1)
    return ca.reshape(coeffs[ca.vec(idx)], 16, n)


@dataclass
class CondensedNLP:
    """min_U |r(X(U), U)|^2  s.t.  lbg <= g(U) = [rates (2N); clearance ((K + M) N)] <= ubg,  lbu <= U <= ubu.

    The clearance rows are knot-major: row k (K + M) + d is, for d < K, covering disc d of the footprint at knot k + 1
    on the ESDF's spline, and for d = K + j the distance from the robot's centre to moving obstacle j's predicted
    centre at knot k + 1 (`_obstacle_distances`; M = 0 without moving obstacles).

    X(U) = (x_1..x_N) is the rollout x_{k+1} = F(x_k, u_k) from the current state x_0. With S = dX/dU (the rollout's
    sensitivity, by the forward recursion S_{k+1} = A_k S_k + B_k e_k, A_k, B_k = dF/dx, dF/du at stage k) and the
    adjoint a_k = dl/dx_k + A_k^T a_{k+1} (a_{N+1} = 0) of l = f + lam^T g, the condensed derivatives are

        grad L = dl/dU + (B_k^T a_{k+1})_k,    jac g = dg/dU + dg/dX S,    hess L = Z^T H_w Z,  Z = [S; I],

    where H_w is the Hessian of the multiple-shooting Lagrangian l + mu^T (x_{k+1} - F(x_k, u_k)) in w = (X, U) with
    mu_k = -a_{k+1}: at a point that satisfies the dynamics that is exactly the Hessian of the condensed Lagrangian.
    H_w has stage structure: 3x3 blocks per x_k, 3x2 blocks coupling x_k and u_k, 2x2 blocks per u_k, plus the
    constant Hessian of the control costs. Every per-knot (spline clearance, tracking) and per-stage (dynamics)
    derivative is a small SX function applied with CasADi's `map`/`mapaccum`, so the compiled code is a few loops:
    unrolled over the horizon it was ~1.5 MB of C (20 s to build, and slow from cold caches).

    Functions (inputs x = vec(U) (2N), p; lam_g ((2 + K + M) N) where stated):
    `check` (+ lam_g) -> f, g, grad_x (f + lam_g^T g): the convergence test (no S);
    `eval` -> grad_f, jac_g^T, S^T, and the terminal residuals' Jacobian (3 x 3, for Gauss-Newton), before a QP;
    `hess_w` (+ lam_g) -> the blocks of H_w: hxx (3 x 3N, x_1..x_N), hxu (3 x 2N, x_k with u_k), huu (2 x 2N, u_k);
    `fg` -> f, g (the line search's merit); `rollout` -> X (3, N+1) from (x, head).
    Constants: `hess_u`, the control costs' Hessian (2N x 2N), and `w_track` (Gauss-Newton's tracking rows).
    With a costmap term (`cost_weight` > 0) `eval` also returns `cost_grad_t` (N x 3): each knot's cost residual's
    gradient in x_k, for its Gauss-Newton rows.
    """

    N: int
    layout: ParamLayout
    functions: dict[str, Any]
    hess_u: np.ndarray
    w_track: float
    nlp: dict[str, Any]
    discs: int = 1  # clearance rows per knot: K covering discs + M moving obstacles
    obstacles: int = 0
    cost_weight: float = 0.0  # w_c of the costmap residuals (0: none)

    @property
    def nx(self) -> int:
        return 2 * self.N

    @property
    def ng(self) -> int:
        return (2 + self.discs) * self.N


def condensed(
    n: int,
    dt: float,
    grid_shape: tuple[int, int],
    weights: CostWeights,
    disc_offsets: Any = ((0.0, 0.0),),
    moving_obstacles: int = 0,
    cost_weight: float = 0.0,
) -> CondensedNLP:
    """The condensed NLP; `disc_offsets` (K, 2): the covering discs' centres in the robot frame (radii enter as the
    clearance rows' lower bounds, `SQPMPC`); `moving_obstacles` M: slots for predicted obstacle centres per knot;
    `cost_weight` w_c: the costmap residuals' weight (module docstring; 0: no costmap term, no extra parameters)."""
    offsets = _check_offsets(disc_offsets)
    k_discs, m = offsets.shape[0], int(moving_obstacles)
    k_rows = k_discs + m
    costed = cost_weight > 0.0
    layout = ParamLayout(n, grid_shape, m, costed)
    rows, cols = layout.spline_shape
    w = weights

    # --- small SX building blocks -------------------------------------------------------------------------------
    xs, us, a = ca.SX.sym("x", 3), ca.SX.sym("u", 2), ca.SX.sym("a", 3)
    f_step = ca.vertcat(*unicycle_step(xs, us, dt, ca.cos, ca.sin))
    step = ca.Function("mpc_step", [xs, us], [f_step])
    stage_ab = ca.Function("mpc_stage_ab", [xs, us], [ca.jacobian(f_step, xs), ca.jacobian(f_step, us)])
    xu = ca.vertcat(xs, us)
    curv = ca.hessian(ca.dot(a, f_step), xu)[0]  # a^T d2F: the dynamics' curvature weighted by the adjoint
    stage_curv = ca.Function("mpc_stage_curv", [xs, us, a], [curv[:3, :3], curv[:3, 3:], curv[3:, 3:]])
    s_k, a_k, b_k, e_k = ca.SX.sym("S", 3, 2 * n), ca.SX.sym("A", 3, 3), ca.SX.sym("B", 3, 2), ca.SX.sym("E", 2, 2 * n)
    sens_step = ca.Function("mpc_sens_step", [s_k, a_k, b_k, e_k], [a_k @ s_k + b_k @ e_k])
    l_k = ca.SX.sym("l", 3)
    adjoint_step = ca.Function("mpc_adjoint_step", [a, l_k, a_k], [l_k + a_k.T @ a])
    bta = ca.Function("mpc_bta", [b_k, a], [b_k.T @ a])
    dcs = ca.SX.sym("dc", 3, k_rows)
    jac_row = ca.Function("mpc_jac_row", [dcs, s_k], [dcs.T @ s_k])

    # Per knot: tracking cost, the K discs' spline clearances at x_k and the M moving obstacles' distances, with
    # derivatives in x_k (c16: the 16 gathered coefficients of each disc, stacked; obs: the M predicted centres).
    geom, ref_k = ca.SX.sym("geom", 5), ca.SX.sym("ref", 2)
    c16, lam_c = ca.SX.sym("c16", 16 * k_discs), ca.SX.sym("lam_c", k_rows)
    obs_k = [ca.SX.sym("obs", 2 * m)] if m else []
    c16_cost = [ca.SX.sym("c16_cost", 16)] if costed else []
    hk = {"origin": geom[0:2], "rot": geom[2:4], "inv_res": geom[4]}
    q = [_spline_coordinates(c, hk, layout.spline_shape) for c in _disc_centres(xs, offsets)]
    clearance = ca.vertcat(*[_spline_clearance(qx, qy, c16[16 * d : 16 * d + 16]) for d, (qx, qy) in enumerate(q)])
    if m:
        clearance = ca.vertcat(clearance, _obstacle_distances(xs, obs_k[0], m))
    cell = ca.vertcat(*[ca.floor(qx) + cols * ca.floor(qy) for qx, qy in q])
    f_track = w.w_track * ca.sumsqr(xs[0:2] - ref_k)
    knot_in = [xs, c16, geom, ref_k, *obs_k, *c16_cost]
    knot_cell = ca.Function("mpc_knot_cell", [xs, geom], [cell])
    extra_grad = []
    if costed:
        # The costmap residual at the robot's centre (Nav2 inflates for the centre): sqrt(w_c) c(p_k).
        qcx, qcy = _spline_coordinates(xs[0:2], hk, layout.spline_shape)
        r_cost = np.sqrt(cost_weight) * _spline_clearance(qcx, qcy, c16_cost[0])
        f_track = f_track + ca.sumsqr(r_cost)
        centre_cell = ca.Function("mpc_knot_centre_cell", [xs, geom], [ca.floor(qcx) + cols * ca.floor(qcy)])
        extra_grad = [ca.gradient(r_cost, xs)]
    knot_val = ca.Function("mpc_knot_val", knot_in, [f_track, clearance])
    knot_grad = ca.Function(
        "mpc_knot_grad",
        knot_in,
        [f_track, clearance, ca.gradient(f_track, xs), ca.jacobian(clearance, xs).T, *extra_grad],
    )
    knot_hess = ca.Function("mpc_knot_hess", [*knot_in, lam_c], [ca.hessian(f_track + ca.dot(lam_c, clearance), xs)[0]])

    # Terminal: goal position and heading; controls: effort and rate smoothness (quadratic in U).
    goal, h_on = ca.SX.sym("goal", 3), ca.SX.sym("heading_on")
    r_t = ca.vertcat(
        np.sqrt(w.w_goal) * (xs[0:2] - goal[0:2]),
        # h in {0, 1}: h sqrt(2 w) is sqrt(2 w h) without a square root of the parameter (AD through the parameter
        # path would multiply its infinite slope at h = 0 by a zero seed: NaN in IPOPT's Hessian).
        h_on * np.sqrt(2.0 * w.w_yaw) * ca.sin(0.5 * (xs[2] - goal[2])),
    )
    f_t = ca.sumsqr(r_t)
    terminal = ca.Function(
        "mpc_terminal",
        [xs, goal, h_on],
        [f_t, ca.gradient(f_t, xs), ca.hessian(f_t, xs)[0], ca.jacobian(r_t, xs)],
    )
    u_all, u_prev = ca.SX.sym("U", 2, n), ca.SX.sym("u_prev", 2)
    u_vec = ca.vec(u_all)
    rates = ca.vec(_rates(u_all, u_prev))
    r_u = ca.vertcat(
        np.sqrt(w.w_v) * u_all[0, :].T,
        np.sqrt(w.w_w) * u_all[1, :].T,
        np.sqrt(w.w_dv) * rates[0::2],
        np.sqrt(w.w_dw) * rates[1::2],
    )
    f_u = ca.sumsqr(r_u)
    lam_r = ca.SX.sym("lam_r", 2 * n)
    controls = ca.Function(
        "mpc_controls",
        [u_all, u_prev, lam_r],
        [f_u, rates, ca.gradient(f_u, u_vec), ca.gradient(ca.dot(lam_r, rates), u_vec)],
    )
    jr_u = ca.jacobian(r_u, u_vec)  # constant: r_u is linear in U
    hess_u = np.array(ca.evalf(ca.densify(2.0 * jr_u.T @ jr_u)))
    rates_jac = np.array(ca.evalf(ca.densify(ca.jacobian(rates, u_vec))))

    # --- the MX graphs -------------------------------------------------------------------------------------------
    um, p, lam = ca.MX.sym("x", 2 * n), ca.MX.sym("p", layout.size), ca.MX.sym("lam_g", (2 + k_rows) * n)
    head, coeffs = p[: layout.head_size], p[layout.head_size : layout.head_size + layout.map_size]
    h = _unpack_head(head, n, m)
    geom_m = ca.vertcat(h["origin"], h["rot"], h["inv_res"])
    U = ca.reshape(um, 2, n)
    x1 = step.mapaccum("mpc_rollout_acc", n)(h["state"], U)  # (3, N): x_1..x_N
    x_prev = ca.horzcat(h["state"], x1[:, : n - 1])  # x_0..x_{N-1}
    cells = ca.reshape(knot_cell.map(n)(x1, geom_m), 1, k_discs * n)  # knot-major (disc fastest)
    c16_all = ca.reshape(_gather_coefficients(cells, coeffs, k_discs * n, cols), 16 * k_discs, n)
    lam_rates, lam_clr = lam[: 2 * n], ca.reshape(lam[2 * n :], k_rows, n)
    knots = [x1, c16_all, geom_m, h["ref"]] + ([h["obstacles"]] if m else [])
    if costed:
        cost_coeffs = p[layout.head_size + layout.map_size :]
        knots.append(_gather_coefficients(centre_cell.map(n)(x1, geom_m), cost_coeffs, n, cols))

    # values only (the merit and the convergence test's f, g)
    ft_v, clr_v = knot_val.map(n)(*knots)
    fu_v, rates_v, dfu_v, _ = controls(U, h["u_prev"], ca.MX.zeros(2 * n))
    f_val = ca.sum2(ft_v) + terminal(x1[:, n - 1], h["goal"], h["heading_on"])[0] + fu_v
    g_val = ca.vertcat(rates_v, ca.vec(clr_v))
    # first and second derivatives
    _, _, dft, dclr, *dcost = knot_grad.map(n)(*knots)  # (3, N), (3, (K + M) N)[, (3, N): the cost residuals']
    _, dfT, d2fT, jT = terminal(x1[:, n - 1], h["goal"], h["heading_on"])
    _, _, dfu, dlam_rates = controls(U, h["u_prev"], lam_rates)
    a_all, b_all = stage_ab.map(n)(x_prev, U)  # A_0..A_{N-1} (3 x 3N), B_0..B_{N-1} (3 x 2N)
    # dl/dx_k for the adjoint: tracking + terminal + lam_clr clearance
    terminal_col = ca.horzcat(ca.MX.zeros(3, n - 1), dfT)
    weighted = dclr * ca.repmat(ca.reshape(lam_clr, 1, k_rows * n), 3, 1)  # lam_kd dc_kd/dx_k, (3, (K + M) N)
    if k_rows > 1:  # sum each knot's K + M rows
        weighted = ca.mtimes(weighted, ca.DM(np.kron(np.eye(n), np.ones((k_rows, 1)))))
    l_x = dft + terminal_col + weighted
    # backward recursion over k = N..1 with A_N = 0 (x_N feeds no stage)
    a_rev = ca.horzcat(ca.MX.zeros(3, 3), _reverse_blocks(a_all, n, 3)[:, : 3 * (n - 1)])  # A_N := 0, A_{N-1}..A_1
    adj_rev = adjoint_step.mapaccum("mpc_adjoint_acc", n)(ca.MX.zeros(3, 1), _reverse_cols(l_x, n), a_rev)
    adj = _reverse_cols(adj_rev, n)  # a_1..a_N
    grad_lag = dfu + dlam_rates + ca.vec(bta.map(n)(b_all, adj))

    # S = dX/dU by the forward recursion; J rows of the clearance: dc/dx_k S_k.
    e_all = ca.DM(np.hstack([np.eye(2 * n)[2 * k : 2 * k + 2] for k in range(n)]))  # (2, 2N * N): e_k selects u_k
    s_rows = sens_step.mapaccum("mpc_sens_acc", n)(ca.DM.zeros(3, 2 * n), a_all, b_all, e_all)  # [S_1 .. S_N]
    sens = ca.vertcat(*ca.horzsplit(s_rows, 2 * n))  # (3N, 2N)
    grad_x = dft + terminal_col  # df/dx_k
    grad_f = dfu_v + ca.mtimes(sens.T, ca.vec(grad_x))
    jac_blocks = jac_row.map(n)(dclr, s_rows)  # [dc_1^T S_1 .. dc_N^T S_N], (K + M, 2N) each
    jac_clr = ca.reshape(jac_blocks, 2 * n, n).T if k_rows == 1 else ca.vertcat(*ca.horzsplit(jac_blocks, 2 * n))
    jac_g = ca.vertcat(ca.DM(rates_jac), jac_clr)

    # Hessian blocks of H_w: per x_k (k = 1..N), x_k-u_k (k = 1..N-1), per u_k (k = 0..N-1).
    hxx_knot = knot_hess.map(n)(*knots, lam_clr)
    hxx_knot += ca.horzcat(ca.MX.zeros(3, 3 * (n - 1)), d2fT)
    cxx, cxu, cuu = stage_curv.map(n)(x_prev, U, adj)  # stage j weighted by a_{j+1} (= -mu_j)
    hxx = hxx_knot + ca.horzcat(cxx[:, 3:], ca.MX.zeros(3, 3))  # stage j >= 1 acts on x_j; x_N feeds none
    hxu = ca.horzcat(cxu[:, 2:], ca.MX.zeros(3, 2))  # x_k with u_k, k = 1..N-1 (padded to N blocks)

    # Outputs M are emitted as M^T where numpy wants M: CasADi's column-major buffer of M^T is M in C order.
    eval_out = [grad_f, ca.densify(jac_g.T), ca.densify(sens.T), ca.densify(jT.T)]
    eval_names = ["grad_f", "jac_g_t", "sens_t", "jac_terminal_t"]
    if costed:
        eval_out.append(ca.densify(dcost[0]))  # (3, N) column-major: (N, 3) in C order
        eval_names.append("cost_grad_t")
    graphs = {
        "check": ([um, p, lam], [f_val, g_val, grad_lag], ["x", "p", "lam_g"], ["f", "g", "grad_lag"]),
        "eval": ([um, p], eval_out, ["x", "p"], eval_names),
        "hess_w": ([um, p, lam], [ca.densify(m) for m in (hxx, hxu, cuu)], ["x", "p", "lam_g"], ["hxx", "hxu", "huu"]),
        "fg": ([um, p], [f_val, g_val], ["x", "p"], ["f", "g"]),
    }
    functions = {k: ca.Function(f"mpc_{k}", ins, outs, i_n, o_n) for k, (ins, outs, i_n, o_n) in graphs.items()}
    head_sx = ca.SX.sym("head", layout.head_size)
    hx = _unpack_head(head_sx, n, m)
    u_sx = ca.SX.sym("u", 2 * n)
    functions["rollout"] = ca.Function(
        "mpc_rollout", [u_sx, head_sx], [_rollout(hx["state"], ca.reshape(u_sx, 2, n), dt)], ["x", "head"], ["states"]
    )
    nlp = {"x": um, "p": p, "f": f_val, "g": g_val}
    return CondensedNLP(n, layout, functions, hess_u, w.w_track, nlp, k_rows, m, float(cost_weight))


def _reverse_cols(m: Any, n: int) -> Any:
    """The n columns of an MX matrix in reverse order."""
    return m[:, list(range(n - 1, -1, -1))]


def _reverse_blocks(m: Any, n: int, width: int) -> Any:
    """The n column blocks (of `width` columns) of an MX matrix in reverse order."""
    return m[:, [k * width + j for k in range(n - 1, -1, -1) for j in range(width)]]


@dataclass
class MultipleShootingNLP:
    """min_{X,U} |r|^2  s.t.  [dynamics (3N) = 0; rates (2N); clearance (K N)], bounds; variables [vec(X); vec(U)].

    `nlp` for `nlpsol`; `functions` = {"jac_fg", "hess_lag"} in sqpmethod's signatures (derivatives built in SX:
    letting CasADi differentiate the MX gather graph cost ~0.6 ms per SQP iteration).
    """

    N: int
    layout: ParamLayout
    functions: dict[str, Any]
    nlp: dict[str, Any]
    discs: int = 1


def multiple_shooting(
    n: int, dt: float, grid_shape: tuple[int, int], weights: CostWeights, disc_offsets: Any = ((0.0, 0.0),)
) -> MultipleShootingNLP:
    offsets = _check_offsets(disc_offsets)
    k_discs = offsets.shape[0]
    layout = ParamLayout(n, grid_shape)
    rows, cols = layout.spline_shape
    X = ca.SX.sym("X", 3, n + 1)
    U = ca.SX.sym("U", 2, n)
    head = ca.SX.sym("head", layout.head_size)
    h = _unpack_head(head, n)
    # Disc centres knot-major (disc fastest), as the condensed form's clearance rows.
    centres = (
        X[0:2, 1:]
        if k_discs == 1 and not offsets.any()
        else ca.horzcat(*[c for k in range(1, n + 1) for c in _disc_centres(X[:, k], offsets)])
    )
    qx, qy = _spline_coordinates(centres, h, layout.spline_shape)
    knot_cells = ca.Function("ms_knot_cells", [X, head], [ca.floor(qx) + cols * ca.floor(qy)])
    c16 = ca.SX.sym("c16", 16, k_discs * n)
    nxt = unicycle_step([X[0, :-1], X[1, :-1], X[2, :-1]], [U[0, :], U[1, :]], dt, ca.cos, ca.sin)
    dyn = ca.reshape(ca.vertcat(X[0, 1:] - nxt[0], X[1, 1:] - nxt[1], X[2, 1:] - nxt[2]), 3 * n, 1)
    g = ca.vertcat(dyn, ca.vec(_rates(U, h["u_prev"])), _spline_clearance(qx, qy, c16))
    r_x, r_u = cost_residuals(X, U, h, weights)
    f = ca.sumsqr(r_x) + ca.sumsqr(r_u)
    w = ca.vertcat(ca.vec(X), ca.vec(U))
    lam_f, lam_g = ca.SX.sym("lam_f"), ca.SX.sym("lam_g", g.shape[0])
    core = ca.Function("ms_core", [X, U, head, c16], [f, g])
    core_jac = ca.Function("ms_core_jac", [X, U, head, c16], [f, ca.gradient(f, w), g, ca.jacobian(g, w)])
    hess = ca.hessian(lam_f * f + ca.dot(lam_g, g), w)[0]
    core_hess = ca.Function("ms_core_hess", [X, U, head, c16, lam_f, lam_g], [hess])

    xm = ca.MX.sym("x", w.shape[0])
    Xm = ca.reshape(xm[: 3 * (n + 1)], 3, n + 1)
    Um = ca.reshape(xm[3 * (n + 1) :], 2, n)
    p = ca.MX.sym("p", layout.size)
    hm, coeffs = p[: layout.head_size], p[layout.head_size :]
    gathered = _gather_coefficients(knot_cells(Xm, hm), coeffs, k_discs * n, cols)
    lfm, lgm = ca.MX.sym("lam_f"), ca.MX.sym("lam_g", g.shape[0])
    functions = {
        "jac_fg": ca.Function(
            "ms_jac_fg", [xm, p], core_jac(Xm, Um, hm, gathered), ["x", "p"], ["f", "grad_f_x", "g", "jac_g_x"]
        ),
        "hess_lag": ca.Function(
            "ms_hess_l",
            [xm, p, lfm, lgm],
            [core_hess(Xm, Um, hm, gathered, lfm, lgm)],
            ["x", "p", "lam_f", "lam_g"],
            ["hess_gamma_x_x"],
        ),
    }
    f_mx, g_mx = core(Xm, Um, hm, gathered)
    return MultipleShootingNLP(n, layout, functions, {"x": xm, "p": p, "f": f_mx, "g": g_mx}, k_discs)


class CondensedEvaluator:
    """Evaluates a `CondensedNLP`'s (compiled or interpreted) functions for `mnemo_mpc.planning.sqp.SQP`. Keeps S
    from the last `derivatives` call for the Hessians:

        exact:         Z^T H_w Z = S^T H_xx S + C + C^T + H_uu,  C = S^T H_xu  (batched 3x3 / 3x2 products, one GEMM)
        Gauss-Newton:  2 (w_track S_pos^T S_pos + (J_T S_N)^T (J_T S_N)) + hess_u
    """

    def __init__(self, nlp: CondensedNLP, functions: dict[str, Any] | None = None) -> None:
        from mnemo_mpc.planning.codegen import BufferedFunction

        functions = functions or nlp.functions
        n = nlp.N
        self.n, self.nx, self.ng = n, nlp.nx, nlp.ng
        self._check = BufferedFunction(functions["check"])
        self._eval = BufferedFunction(functions["eval"])
        self._hess = BufferedFunction(functions["hess_w"])
        self._fg = BufferedFunction(functions["fg"])
        self._p = np.zeros(nlp.layout.size)
        self._x = np.zeros(self.nx)
        for fn in (self._check, self._eval, self._hess, self._fg):
            fn.bind("p", self._p)
        for fn in (self._eval, self._hess):
            fn.bind("x", self._x)
        self._sens = np.zeros((3 * n, self.nx))  # S, C order; `eval` writes it
        self._eval.bind_output("sens_t", self._sens.reshape(-1))
        self._hess_u, self._w_track = nlp.hess_u, nlp.w_track
        self._costed = nlp.cost_weight > 0.0
        self._out = np.empty((self.nx, self.nx))
        self._cross = np.zeros((self.nx, self.nx))
        # (row, col) of the 2x2 diagonal blocks of u_0..u_{N-1}, in (k, i, j) order
        k, i, j = np.meshgrid(np.arange(n), np.arange(2), np.arange(2), indexing="ij")
        self._uu_rows, self._uu_cols = (2 * k + i).ravel(), (2 * k + j).ravel()

    def set_parameters(self, p: np.ndarray) -> None:
        self._p[:] = p

    def lagrangian(self, x: np.ndarray, lam_g: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        o = self._check(x=x, lam_g=lam_g)
        return float(o["f"][0]), o["g"], o["grad_lag"]

    def derivatives(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self._x[:] = x
        o = self._eval()
        return o["grad_f"], o["jac_g_t"].reshape(self.ng, self.nx)

    def hessian(self, lam_g: np.ndarray, exact: bool) -> np.ndarray:
        """A fresh (nx, nx) array at the last `derivatives` point."""
        n, s3 = self.n, self._sens.reshape(self.n, 3, self.nx)
        if not exact:
            pos = s3[:, :2, :].reshape(2 * n, self.nx)
            jt = self._eval.outputs["jac_terminal_t"].reshape(3, 3) @ s3[-1]
            out = 2.0 * (self._w_track * (pos.T @ pos) + jt.T @ jt) + self._hess_u
            if self._costed:  # the costmap residuals' rows: J_c[k] = grad r_c,k^T S_k
                jc = np.einsum("ki,kij->kj", self._eval.outputs["cost_grad_t"].reshape(n, 3), s3)
                out += 2.0 * (jc.T @ jc)
            return out
        o = self._hess(lam_g=lam_g)
        hxx = o["hxx"].reshape(n, 3, 3).transpose(0, 2, 1)  # column-major 3x3 blocks side by side
        hxu = o["hxu"].reshape(n, 2, 3).transpose(0, 2, 1)
        huu = o["huu"].reshape(n, 2, 2).transpose(0, 2, 1).reshape(-1)
        out = np.dot(self._sens.T, np.matmul(hxx, s3).reshape(3 * n, self.nx), out=self._out)
        # S^T H_xu: the column block of u_k gets S_k^T H_xu,k (x_N couples with no control).
        cross = np.matmul(s3.transpose(0, 2, 1), hxu)  # (n, nx, 2): block k-1 holds S_k^T H_xu,k
        self._cross[:, 2:] = cross[:-1].transpose(1, 0, 2).reshape(self.nx, self.nx - 2)
        out += self._cross
        out += self._cross.T
        out += self._hess_u
        out[self._uu_rows, self._uu_cols] += huu
        return out.copy()

    def merit(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        o = self._fg(x=x)
        return float(o["f"][0]), o["g"]
