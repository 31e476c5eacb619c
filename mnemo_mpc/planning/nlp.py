"""The MPC's nonlinear program in CasADi, in the two forms the package solves (see `mnemo_mpc.planning.mpc`).

The problem (module docstring of `mnemo_mpc.planning.mpc`): unicycle dynamics x_{k+1} = f(x_k, u_k), control bounds,
rate bounds |u_k - u_{k-1}| <= (a_max, alpha_max) dt, clearance esdf(p_k) >= radius + margin, and a cost that is a
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
coordinates. All arithmetic is SX (fast, exact derivatives); only the gather of each knot's 4x4 coefficients from
the map parameter needs MX (parametric indexing). The gather is piecewise constant in the knot position, so the
derivatives taken with the gathered coefficients held fixed are the true derivatives of the spline.
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
    """Offsets into the NLP parameter vector p = [head, spline coefficients (rows x cols, row-major)].

    head = state (3), u_prev (2), goal (3), heading_on (1), ref (2N), origin (2), rot = (cos, sin) (2), 1/res (1).
    """

    N: int
    grid_shape: tuple[int, int]

    @property
    def spline_shape(self) -> tuple[int, int]:
        return self.grid_shape[0] + 2 * SPLINE_PAD, self.grid_shape[1] + 2 * SPLINE_PAD

    @property
    def head_size(self) -> int:
        return 3 + 2 + 3 + 1 + 2 * self.N + 2 + 2 + 1

    @property
    def size(self) -> int:
        rows, cols = self.spline_shape
        return self.head_size + rows * cols

    def head(
        self,
        state: np.ndarray,
        u_prev: np.ndarray,
        goal: np.ndarray,
        heading_on: float,
        ref: np.ndarray,
        origin: tuple[float, float, float],
        resolution: float,
    ) -> np.ndarray:
        """The head of p from plain arrays (`ref`: (N, 2) tracking points for knots 1..N)."""
        ox, oy, oyaw = origin
        return np.concatenate(
            [
                state,
                u_prev,
                goal,
                [heading_on],
                np.asarray(ref, dtype=float).reshape(-1),
                [ox, oy, np.cos(oyaw), np.sin(oyaw), 1.0 / resolution],
            ]
        )


@dataclass(frozen=True)
class CostWeights:
    w_track: float
    w_goal: float
    w_yaw: float
    w_v: float
    w_w: float
    w_dv: float
    w_dw: float


def _unpack_head(head: Any, n: int) -> dict[str, Any]:
    o = 9 + 2 * n
    return {
        "state": head[0:3],
        "u_prev": head[3:5],
        "goal": head[5:8],
        "heading_on": head[8],
        "ref": ca.reshape(head[9 : 9 + 2 * n], 2, n),
        "origin": head[o : o + 2],
        "rot": head[o + 2 : o + 4],
        "inv_res": head[o + 4],
    }


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
    """min_U |r(X(U), U)|^2  s.t.  lbg <= g(U) = [rates (2N); clearance (N)] <= ubg,  lbu <= U <= ubu.

    Condensing: with w = (x_1..x_N, U) the multiple-shooting variables evaluated at X(U) and Z = dw/dU = [S; I],
    S = dvec(X_1..N)/dU the rollout's sensitivity,

        grad f = Z^T df/dw,   jac g = dg/dw Z,   J_r = dr/dw Z,   hess L = Z^T H_w Z,

    where H_w is the Hessian of the multiple-shooting Lagrangian f + mu^T (x_{k+1} - F(x_k, u_k)) + lam_g^T g with mu
    the adjoint multipliers of lam_g at X(U) (stationarity in the states): at a point that satisfies the dynamics
    this is exactly the Hessian of the condensed Lagrangian. The w-space derivatives are sparse and O(N) in SX; the
    gradient and constraint Jacobian are condensed in SX too (`eval`), the two Hessians in `CondensedEvaluator`
    (one sparse x dense and one dense x dense product). CasADi's derivatives of the composed expressions were ~100x
    larger (228k instructions for the Hessian, minutes to compile, slow from cold caches).

    Functions (inputs x = vec(U) (2N), p): `eval` -> f, grad_f, g (3N), jac_g^T, S^T; `hess_w` (+ lam_g) -> H_w
    (sparse; mu computed inside); `jac_r_w` -> dr_x/dw (sparse; the state residuals, the control ones' part is
    the constant `gn_hess_u`); `fg` -> f, g (the line search's merit);
    `rollout` -> X (3, N+1) from (x, head).
    """

    N: int
    layout: ParamLayout
    functions: dict[str, Any]
    sparsity: dict[str, Any]  # CasADi Sparsity of the sparse outputs hess_w and jac_r_w (rows x 5N)
    gn_hess_u: np.ndarray  # 2 J_{r_u}^T J_{r_u}: the constant Gauss-Newton Hessian of the control residuals
    nlp: dict[str, Any]

    @property
    def nx(self) -> int:
        return 2 * self.N

    @property
    def ng(self) -> int:
        return 3 * self.N


def condensed(n: int, dt: float, grid_shape: tuple[int, int], weights: CostWeights) -> CondensedNLP:
    layout = ParamLayout(n, grid_shape)
    rows, cols = layout.spline_shape
    u = ca.SX.sym("u", 2 * n)
    U = ca.reshape(u, 2, n)
    head = ca.SX.sym("head", layout.head_size)
    h = _unpack_head(head, n)
    c16 = ca.SX.sym("c16", 16, n)
    X = _rollout(h["state"], U, dt)
    x1 = ca.vec(X[:, 1:])
    sens = ca.jacobian(x1, u)  # (3N, 2N), block lower triangular

    # The problem in multiple-shooting variables (Xs, U): partial derivatives are O(N) and sparse.
    Xs = ca.SX.sym("Xs", 3, n + 1)
    xs1 = ca.vec(Xs[:, 1:])
    qx, qy = _spline_coordinates(Xs[0:2, 1:], h, layout.spline_shape)
    clearance = _spline_clearance(qx, qy, c16)
    g_s = ca.vertcat(ca.vec(_rates(U, h["u_prev"])), clearance)
    r_x, r_u = cost_residuals(Xs, U, h, weights)
    f_s = ca.sumsqr(r_x) + ca.sumsqr(r_u)
    jr_u = ca.jacobian(r_u, u)  # constant (r_u is linear in U)
    gn_hess_u = np.array(ca.evalf(ca.densify(2.0 * jr_u.T @ jr_u)))
    lam_g = ca.SX.sym("lam_g", g_s.shape[0])
    w = ca.vertcat(xs1, u)  # multiple-shooting variables (x_1..x_N, U)
    partials = ca.Function(
        "mpc_partials",
        [Xs, u, head, c16, lam_g],
        [
            f_s,
            ca.gradient(f_s, w),
            g_s,
            ca.jacobian(g_s, w),
            ca.jacobian(r_x, w),
            ca.gradient(f_s + ca.dot(lam_g, g_s), xs1),
        ],
    )
    f, df_dw, g, dg_dw, dr_dw, dl_dx = partials(X, u, head, c16, lam_g)

    # Adjoint of the dynamics: stationarity in x_j gives mu_{j-1} = A_j^T mu_j - dl/dx_j (mu_N = 0, A_j = dF/dx_j).
    xk, uk = ca.SX.sym("xk", 3), ca.SX.sym("uk", 2)
    step_expr = ca.vertcat(*unicycle_step(xk, uk, dt, ca.cos, ca.sin))
    step = ca.Function("mpc_step", [xk, uk], [step_expr])
    step_a = ca.Function("mpc_step_a", [xk, uk], [ca.jacobian(step_expr, xk)])
    mus = []
    mu_j = ca.SX.zeros(3)
    for j in range(n, 0, -1):
        a_j = step_a(X[:, j], U[:, j]) if j < n else ca.SX.zeros(3, 3)
        mu_j = a_j.T @ mu_j - dl_dx[3 * (j - 1) : 3 * j]
        mus.append(mu_j)
    mu = ca.vertcat(*reversed(mus))  # mu[3k:3k+3] multiplies x_{k+1} - F(x_k, u_k)
    dyn = ca.vec(Xs[:, 1:] - ca.horzcat(*[step(Xs[:, k], U[:, k]) for k in range(n)]))
    mu_s = ca.SX.sym("mu", 3 * n)
    lagrangian_hessian = ca.Function(
        "mpc_lagrangian_hessian",
        [Xs, u, head, c16, mu_s, lam_g],
        [ca.hessian(f_s + ca.dot(mu_s, dyn) + ca.dot(lam_g, g_s), w)[0]],
    )
    hess_xu = lagrangian_hessian(X, u, head, c16, mu, lam_g)
    qx_u, qy_u = _spline_coordinates(X[0:2, 1:], h, layout.spline_shape)
    knot_cells = ca.Function("mpc_knot_cells", [u, head], [ca.floor(qx_u) + cols * ca.floor(qy_u)])
    z = ca.vertcat(sens, ca.SX.eye(2 * n))  # dw/dU
    # Outputs M are emitted as M^T where numpy wants M: CasADi's column-major buffer of M^T is M in C order.
    cores = {
        "eval": (
            [f, z.T @ df_dw, g, ca.densify(dg_dw @ z).T, ca.densify(sens).T],
            ["f", "grad_f", "g", "jac_g_t", "sens_t"],
        ),
        "hess_w": ([hess_xu], ["hess_w"]),
        "jac_r_w": ([dr_dw], ["jac_r_w"]),
        "fg": ([f, g], ["f", "g"]),
    }
    um = ca.MX.sym("x", 2 * n)
    p = ca.MX.sym("p", layout.size)
    lgm = ca.MX.sym("lam_g", g_s.shape[0])
    hm, coeffs = p[: layout.head_size], p[layout.head_size :]
    gathered = _gather_coefficients(knot_cells(um, hm), coeffs, n, cols)
    functions = {}
    for name, (outs, out_names) in cores.items():
        with_lam = name == "hess_w"
        core = ca.Function(f"mpc_core_{name}", [u, head, c16] + ([lam_g] if with_lam else []), outs)
        ins = [um, p] + ([lgm] if with_lam else [])
        args = [um, hm, gathered] + ([lgm] if with_lam else [])
        in_names = ["x", "p"] + (["lam_g"] if with_lam else [])
        functions[name] = ca.Function(f"mpc_{name}", ins, core.call(args), in_names, out_names)
    functions["rollout"] = ca.Function("mpc_rollout", [u, head], [X], ["x", "head"], ["states"])
    f_mx, g_mx = functions["fg"](um, p)
    sparsity = {"hess_w": hess_xu.sparsity(), "jac_r_w": dr_dw.sparsity()}
    return CondensedNLP(n, layout, functions, sparsity, gn_hess_u, {"x": um, "p": p, "f": f_mx, "g": g_mx})


@dataclass
class MultipleShootingNLP:
    """min_{X,U} |r|^2  s.t.  [dynamics (3N) = 0; rates (2N); clearance (N)], bounds; variables [vec(X); vec(U)].

    `nlp` for `nlpsol`; `functions` = {"jac_fg", "hess_lag"} in sqpmethod's signatures (derivatives built in SX:
    letting CasADi differentiate the MX gather graph cost ~0.6 ms per SQP iteration).
    """

    N: int
    layout: ParamLayout
    functions: dict[str, Any]
    nlp: dict[str, Any]


def multiple_shooting(n: int, dt: float, grid_shape: tuple[int, int], weights: CostWeights) -> MultipleShootingNLP:
    layout = ParamLayout(n, grid_shape)
    rows, cols = layout.spline_shape
    X = ca.SX.sym("X", 3, n + 1)
    U = ca.SX.sym("U", 2, n)
    head = ca.SX.sym("head", layout.head_size)
    h = _unpack_head(head, n)
    qx, qy = _spline_coordinates(X[0:2, 1:], h, layout.spline_shape)
    knot_cells = ca.Function("ms_knot_cells", [X, head], [ca.floor(qx) + cols * ca.floor(qy)])
    c16 = ca.SX.sym("c16", 16, n)
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
    gathered = _gather_coefficients(knot_cells(Xm, hm), coeffs, n, cols)
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
    return MultipleShootingNLP(n, layout, functions, {"x": xm, "p": p, "f": f_mx, "g": g_mx})


class _SparseRows:
    """A fixed-pattern CasADi sparse output as a CSR matrix whose data array is refilled in place."""

    def __init__(self, sparsity: Any) -> None:
        import scipy.sparse as sps

        rows = np.asarray(sparsity.row())
        cols = np.repeat(np.arange(sparsity.size2()), np.diff(np.asarray(sparsity.colind())))
        self.order = np.lexsort((cols, rows))  # CasADi's column-major nonzeros -> CSR order
        self.csr = sps.csr_matrix((np.zeros(rows.size), (rows[self.order], cols[self.order])), shape=sparsity.shape)
        self.csr.sort_indices()
        if self.csr.nnz != rows.size:
            raise ValueError("duplicate entries in a CasADi sparsity pattern")

    def __call__(self, nonzeros: np.ndarray) -> Any:
        self.csr.data[:] = nonzeros[self.order]
        return self.csr


class CondensedEvaluator:
    """Evaluates a `CondensedNLP`'s (compiled or interpreted) functions for `mnemo_mpc.planning.sqp.SQP`, with
    Z = [S; I] from the last `evaluate` for the Hessians (the condensing of the `CondensedNLP` docstring)."""

    def __init__(self, nlp: CondensedNLP, functions: dict[str, Any] | None = None) -> None:
        from mnemo_mpc.planning.codegen import BufferedFunction

        functions = functions or nlp.functions
        self.nx, self.ng = nlp.nx, nlp.ng
        self._n3 = 3 * nlp.N
        self._eval = BufferedFunction(functions["eval"])
        self._hess = BufferedFunction(functions["hess_w"])
        self._gn = BufferedFunction(functions["jac_r_w"])
        self._fg = BufferedFunction(functions["fg"])
        self._p = np.zeros(nlp.layout.size)
        self._x = np.zeros(self.nx)
        for fn in (self._eval, self._hess, self._gn, self._fg):
            fn.bind("p", self._p)
        for fn in (self._hess, self._gn):
            fn.bind("x", self._x)
        self._z = np.zeros((self._n3 + self.nx, self.nx))  # Z = [S; I]; `eval` writes S into it
        self._z[self._n3 :] = np.eye(self.nx)
        self._eval.bind_output("sens_t", self._z[: self._n3].reshape(-1))
        self._hess_w = _SparseRows(nlp.sparsity["hess_w"])
        self._jac_r_w = _SparseRows(nlp.sparsity["jac_r_w"])
        self._h = np.empty((self.nx, self.nx))
        self._gn_hess_u = nlp.gn_hess_u

    def set_parameters(self, p: np.ndarray) -> None:
        self._p[:] = p

    def evaluate(self, x: np.ndarray) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        o = self._eval(x=x)
        self._x[:] = x
        return float(o["f"][0]), o["grad_f"], o["g"], o["jac_g_t"].reshape(self.ng, self.nx)

    def hessian(self, lam_g: np.ndarray, exact: bool) -> np.ndarray:
        """A fresh array: Z^T H_w Z (symmetric to round-off), or 2 J_r^T J_r with J_r = dr/dw Z."""
        z = self._z
        if not exact:
            jr = self._jac_r_w(self._gn()["jac_r_w"]) @ z
            return 2.0 * (jr.T @ jr) + self._gn_hess_u
        hz = self._hess_w(self._hess(lam_g=lam_g)["hess_w"]) @ z
        n3 = self._n3
        h = np.dot(z[:n3].T, hz[:n3], out=self._h)
        h += hz[n3:]
        return h.copy()

    def merit(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        o = self._fg(x=x)
        return float(o["f"][0]), o["g"]
