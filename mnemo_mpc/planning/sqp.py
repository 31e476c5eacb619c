"""A sequential quadratic programming (SQP) method for small dense NLPs: the MPC's condensed problem.

    min_x f(x)  s.t.  lbg <= g(x) <= ubg,  lbx <= x <= ubx

Seed 002 §5.2 runs "one instance of trajectory optimization with SQP" per MPC step, 1 iteration when warm-started;
this is that SQP, built so that a better start is never slower:

* **QP step.** min_d 1/2 d^T H d + grad_f^T d  s.t.  lbg - g <= J d <= ubg - g,  lbx - x <= d <= ubx - x, solved
  exactly by DAQP (a dual active-set method for dense QPs; the condensed MPC has 2N = 60 variables). Its solution
  satisfies the QP's KKT conditions to round-off (~1e-15), so a start at the optimum takes a zero step.
* **Hessian.** Far from a solution, the Gauss-Newton Hessian of the sum-of-squares cost, 2 J_r^T J_r (positive
  definite, so every QP is convex and its step a descent direction); once the dual residual is below `newton_du`,
  the exact Hessian of the Lagrangian: Newton's quadratic convergence for warm starts, Gauss-Newton's robustness for
  cold ones. Where the exact Hessian makes the QP non-convex (DAQP says so), its negative eigenvalues are clipped
  (`convexified`). newton_du = 0.3 was chosen on a validation suite (docs/results.md).
* **Globalisation.** Backtracking on the l1 merit phi = f + sigma * (constraint violation), sigma >= 1.01 |lambda|_inf,
  Armijo test phi(x + t d) <= phi(x) + c1 t D + 10 eps |phi(x)|. The last term is IPOPT's round-off allowance: at
  (or within round-off of) a solution D ~ 0 and the merit difference is noise, which without it rejects the zero
  step and cuts it to beta^max_iter_ls.
* **Multipliers.** The QP's multipliers are taken whole, whatever step length the line search chose: they are the
  QP's estimate at the linearisation point and do not depend on t. (CasADi's sqpmethod moves them by t; with a
  step cut to 0.8^9 they crawl towards the QP's and a start at the optimum needs > 10 iterations to pass tol_du.)
* **Convergence** as CasADi's sqpmethod: max constraint violation < tol_pr and |grad_x L|_inf < tol_du, with
  L = f + lam_g^T g + lam_x^T x; a start that already satisfies both takes 0 iterations. The test needs only f, g and
  grad_x L (`Problem.lagrangian`, one reverse sweep for the MPC); the QP's derivatives are evaluated only when a QP
  follows.

The problem is evaluated by a `Problem` (for the MPC: `mnemo_mpc.planning.nlp.CondensedEvaluator`, dense
derivatives of the condensed NLP). `stats` per solve: iterations, Hessian used per iteration, line-search steps, and
the time spent in derivatives (incl. Hessians), QP, line search (incl. the Lagrangian's gradient at the accepted
point) and in total.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from mnemo_mpc.errors import InputError

EPS = float(np.finfo(float).eps)
DAQP_INF = 1e30  # DAQP treats bounds at or beyond this as absent
HESSIANS = ("hybrid", "exact", "gauss_newton")
CONVEXIFY = ("clip", "reflect")
# DAQP exit flags (daqp/include/constants.h)
_DAQP_STATUS = {
    1: "optimal",
    2: "soft_optimal",
    -1: "infeasible",
    -2: "cycling",
    -3: "unbounded",
    -4: "iteration_limit",
    -5: "nonconvex",
    -6: "overdetermined_initial_active_set",
}


@dataclass(frozen=True)
class SQPOptions:
    """Tolerances are CasADi sqpmethod's meaning (see the module docstring); beta, c1 its defaults."""

    max_iter: int = 10
    tol_pr: float = 1e-6
    tol_du: float = 1e-4
    max_iter_ls: int = 10
    beta: float = 0.8
    c1: float = 1e-4
    hessian: str = "hybrid"
    newton_du: float = 0.3  # hybrid: exact Hessian once |grad L|_inf <= this (cost O(1); chosen on a validation suite)
    convexify: str = "clip"  # an indefinite exact Hessian: eigenvalues below margin x max|eig| clipped or reflected
    convexify_margin: float = 1e-6
    # Wall-clock budget: no new iteration starts after it (the one running finishes); None: iterations only. A
    # control loop sets it from its period so that a hard problem cannot overrun the tick.
    max_time_s: float | None = None

    def __post_init__(self) -> None:
        if self.hessian not in HESSIANS:
            raise InputError(f"SQPOptions.hessian: expected one of {HESSIANS}, got {self.hessian!r}")
        if self.convexify not in CONVEXIFY:
            raise InputError(f"SQPOptions.convexify: expected one of {CONVEXIFY}, got {self.convexify!r}")
        if self.max_iter < 0 or self.max_iter_ls < 0:
            raise InputError(
                f"SQPOptions: max_iter and max_iter_ls must be >= 0, got {self.max_iter}, {self.max_iter_ls}"
            )
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise InputError(f"SQPOptions.max_time_s: expected > 0 or None, got {self.max_time_s}")
        for name in ("tol_pr", "tol_du", "newton_du", "convexify_margin"):
            if not getattr(self, name) > 0:
                raise InputError(f"SQPOptions.{name}: expected > 0, got {getattr(self, name)}")
        if not (0 < self.beta < 1 and 0 < self.c1 < 1):
            raise InputError(f"SQPOptions: expected 0 < beta, c1 < 1, got {self.beta}, {self.c1}")


@dataclass
class SQPResult:
    x: np.ndarray
    f: float
    g: np.ndarray
    lam_g: np.ndarray
    lam_x: np.ndarray
    iterations: int  # QP solves
    success: bool
    status: str
    stats: dict[str, Any] = field(default_factory=dict)


def convexified(h: np.ndarray, strategy: str, margin: float) -> np.ndarray:
    """h with its eigenvalues below margin x max|eig| raised to that floor ("clip") or to their absolute value
    ("reflect"). At a strict local minimum the Hessian is positive definite on the null space of the active
    constraints; negative curvature lies along constraint normals, which the active constraints pin, so modifying it
    leaves the QP step nearly unchanged there (CasADi's sqpmethod offers the same two strategies)."""
    w, v = np.linalg.eigh(0.5 * (h + h.T))
    floor = margin * max(1.0, float(np.abs(w).max()))
    w = np.maximum(w, floor) if strategy == "clip" else np.maximum(np.abs(w), floor)
    return (v * w) @ v.T


class Problem(Protocol):
    """What the SQP evaluates (for the MPC: `mnemo_mpc.planning.nlp.CondensedEvaluator`)."""

    nx: int
    ng: int

    def set_parameters(self, p: np.ndarray) -> None: ...

    def lagrangian(self, x: np.ndarray, lam_g: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """f, g (ng) and grad_x (f + lam_g^T g) at x: the convergence test (arrays valid until the next call)."""
        ...

    def derivatives(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """grad_f (nx) and dense jac_g (ng, nx) at x for the QP; later `hessian` calls refer to this x."""
        ...

    def hessian(self, lam_g: np.ndarray, exact: bool) -> np.ndarray:
        """Dense (nx, nx): the exact Hessian of f + lam_g^T g, or the Gauss-Newton one (positive definite)."""
        ...

    def merit(self, x: np.ndarray) -> tuple[float, np.ndarray]:
        """f, g at x (the line search)."""
        ...


class SQP:
    """The method of the module docstring on a `Problem`."""

    def __init__(self, problem: Problem, options: SQPOptions | None = None) -> None:
        self.options = options or SQPOptions()
        self.problem = problem
        self.nx, self.ng = int(problem.nx), int(problem.ng)

    def solve(
        self,
        x0: np.ndarray,
        p: np.ndarray,
        lbx: np.ndarray,
        ubx: np.ndarray,
        lbg: np.ndarray,
        ubg: np.ndarray,
        lam_g0: np.ndarray | None = None,
        lam_x0: np.ndarray | None = None,
        max_iter: int | None = None,
        max_time_s: float | None = None,
    ) -> SQPResult:
        """`max_iter` and `max_time_s` (None: the options') bound this call."""
        import daqp

        opt, problem, nx = self.options, self.problem, self.nx
        max_iter = opt.max_iter if max_iter is None else int(max_iter)
        max_time_s = opt.max_time_s if max_time_s is None else float(max_time_s)
        t_start = time.perf_counter()
        t_deriv = t_qp = t_ls = 0.0
        problem.set_parameters(p)
        x = np.array(x0, dtype=float)
        lam = np.zeros(nx + self.ng)  # [lam_x; lam_g]
        if lam_g0 is not None and lam_x0 is not None:
            lam[:nx], lam[nx:] = lam_x0, lam_g0
        lb = np.concatenate([lbx, lbg]).astype(float)
        ub = np.concatenate([ubx, ubg]).astype(float)
        z = np.empty(nx + self.ng)  # (x, g(x)): the bounded quantities
        viol, above = np.empty_like(z), np.empty_like(z)

        def violation(x_: np.ndarray, g_: np.ndarray) -> np.ndarray:
            """max(lb - z, z - ub, 0) per bound (at most one side is violated when lb <= ub)."""
            z[:nx], z[nx:] = x_, g_
            np.subtract(lb, z, out=viol)
            np.maximum(viol, np.subtract(z, ub, out=above), out=viol)
            return np.maximum(viol, 0.0, out=viol)

        sigma = 0.0
        hessians: list[str] = []
        ls_steps: list[float] = []
        iterations = 0
        status = "max_iter"
        t0 = time.perf_counter()
        f, g, grad_lag = problem.lagrangian(x, lam[nx:])
        t_deriv += time.perf_counter() - t0
        pr = du = math.inf
        while True:
            pr = float(violation(x, g).max())
            du = float(np.abs(grad_lag + lam[:nx]).max())
            if not (math.isfinite(pr) and math.isfinite(du) and math.isfinite(f)):
                status = "non_finite"
                break
            if pr < opt.tol_pr and du < opt.tol_du:
                status = "converged"
                break
            if iterations >= max_iter:
                break
            if max_time_s is not None and time.perf_counter() - t_start >= max_time_s:
                status = "time_limit"
                break
            # QP in the step d: bounds on x and on the linearised g, both relative to z = (x, g(x)).
            qp_upper = np.minimum(ub - z, DAQP_INF)
            qp_lower = np.maximum(lb - z, -DAQP_INF)
            l1 = float(viol.sum())
            t0 = time.perf_counter()
            grad_f, jac = problem.derivatives(x)
            exact = opt.hessian == "exact" or (opt.hessian == "hybrid" and du <= opt.newton_du)
            kind = "exact" if exact else "gauss_newton"
            hess = problem.hessian(lam[nx:], exact=exact)
            t1 = time.perf_counter()
            d, _, flag, info = daqp.solve(hess, grad_f, jac, qp_upper, qp_lower)
            t2 = time.perf_counter()
            if flag == -5 and exact:  # not convex: the exact Hessian is indefinite here
                kind = "exact_convexified"
                hess = convexified(hess, opt.convexify, opt.convexify_margin)
                t3 = time.perf_counter()
                d, _, flag, info = daqp.solve(hess, grad_f, jac, qp_upper, qp_lower)
                t1, t2 = t1 + (t3 - t2), time.perf_counter()
            t_deriv += t1 - t0
            t_qp += t2 - t1
            iterations += 1
            hessians.append(kind)
            if flag != 1 or not math.isfinite(float(d.sum())):
                status = f"qp_{_DAQP_STATUS.get(flag, f'exit_{flag}')}"
                break
            lam_qp = np.asarray(info["lam"], dtype=float)
            # l1 merit line search with a round-off allowance (module docstring).
            sigma = max(sigma, 1.01 * float(np.abs(lam_qp).max()))
            phi0 = f + sigma * l1
            slope = float(grad_f @ d) - sigma * l1
            allowance = 10.0 * EPS * abs(phi0)
            # The full step's trial is evaluated with the Lagrangian's gradient (cheap, one reverse sweep): when it is
            # accepted, as it mostly is, that is the next convergence test already.
            t = 1.0
            xc = x + d
            fc, gc, grad_lag = problem.lagrangian(xc, lam_qp[nx:])
            for k in range(max(opt.max_iter_ls, 1)):
                if k:
                    xc = x + t * d
                    fc, gc = problem.merit(xc)
                phic = fc + sigma * float(violation(xc, gc).sum())
                if phic <= phi0 + opt.c1 * t * slope + allowance or k + 1 >= opt.max_iter_ls:
                    break  # after max_iter_ls cuts the step is taken anyway (as sqpmethod does)
                t *= opt.beta
            ls_steps.append(t)
            x, lam = xc, lam_qp
            if t < 1.0:
                f, g, grad_lag = problem.lagrangian(x, lam[nx:])
            else:
                f, g = fc, gc
            t_ls += time.perf_counter() - t2
        return SQPResult(
            x=x,
            f=f,
            g=np.array(g),
            lam_g=lam[nx:].copy(),
            lam_x=lam[:nx].copy(),
            iterations=iterations,
            success=status == "converged",
            status=status,
            stats={
                "pr_inf": pr,
                "du_inf": du,
                "hessian": hessians,
                "step": ls_steps,
                "t_derivatives_s": t_deriv,
                "t_qp_s": t_qp,
                "t_linesearch_s": t_ls,
                "t_total_s": time.perf_counter() - t_start,
            },
        )
