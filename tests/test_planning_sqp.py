"""Our SQP (planning.sqp) on the condensed MPC (planning.nlp): a better start is never slower, the condensing is
exact, compiled functions are the interpreted ones, and the compile cache never loads a bad entry."""

from __future__ import annotations

import json
import logging
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mnemo_mpc.bench import sqp as bench
from mnemo_mpc.errors import InputError
from mnemo_mpc.planning import codegen
from mnemo_mpc.planning import nlp as nlp_forms
from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig, WarmStart
from mnemo_mpc.planning.sqp import SQP, SQPOptions, convexified

SUITE = replace(bench.quick_config(), problems=4, steps=2, sigmas=(0.001, 0.005, 0.02, 0.1))


@pytest.fixture(scope="module")
def recorded():
    """A small fixed suite of the benchmark's problems, with their cold solutions (ours)."""
    mpc = SQPMPC(SUITE.robot, SUITE.mpc, SUITE.window)
    out = []
    for i, problem in enumerate(bench.make_problems(SUITE)):
        res = bench.run_problem(mpc, SUITE, problem, index=i)
        out.append(res)
    return mpc, out


def test_a_start_at_the_optimum_takes_at_most_one_iteration_and_none_with_its_multipliers(recorded):
    mpc, out = recorded
    oracle = [r for res in out for r, _ in res["oracle"]]
    with_duals = [r for res in out for r, _ in res["oracle_duals"]]
    assert len(oracle) >= 6 and len(oracle) == len(with_duals)
    assert all(r.success and r.iterations <= 1 for r in oracle)
    assert all(r.success and r.iterations == 0 for r in with_duals)
    colds = [r for res in out for r, _ in res["cold"] if r.success]
    for cold, a, b in zip(colds, oracle, with_duals, strict=True):
        assert abs(a.cost - cold.cost) <= 1e-9 * max(1.0, abs(cold.cost))
        assert abs(b.cost - cold.cost) <= 1e-12 * max(1.0, abs(cold.cost))


@pytest.mark.parametrize("kind", ["white", "smooth"])
def test_mean_iterations_do_not_rise_as_the_start_improves(recorded, kind):
    _, out = recorded
    means = []
    for sigma in sorted(SUITE.sigmas, reverse=True):
        runs = [r for res in out for r, _ in res["perturbed"][kind][sigma]]
        assert runs and all(r.success for r in runs)
        means.append(np.mean([r.iterations for r in runs]))
    assert all(b <= a for a, b in zip(means, means[1:], strict=False)), means
    cold = np.mean([r.iterations for res in out for r, _ in res["cold"]])
    assert means[-1] < cold


def test_compiled_and_interpreted_functions_give_the_same_iterates(recorded):
    mpc, out = recorded
    interpreted = SQPMPC(SUITE.robot, replace(SUITE.mpc, compile=False), SUITE.window)
    assert mpc.build_info.compiled, mpc.build_info.reason  # the CI machine has a C compiler
    world, path = bench.make_problems(SUITE)[1].world, bench.make_problems(SUITE)[1].path
    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.global_path import local_reference

    state = np.asarray(world.start, dtype=float)
    field = DistanceField(world.grid.window(state[:2], SUITE.window))
    ref = local_reference(path, state, SUITE.mpc.N, SUITE.mpc.dt, 0.4, world.goal[2], 0)
    a = mpc.solve(field, state, np.zeros(2), ref.goal, ref.points)
    b = interpreted.solve(field, state, np.zeros(2), ref.goal, ref.points)
    assert a.success and a.iterations == b.iterations and a.solver_stats["hessian"] == b.solver_stats["hessian"]
    np.testing.assert_allclose(a.controls, b.controls, atol=1e-10)
    np.testing.assert_allclose(a.duals["lam_g"], b.duals["lam_g"], atol=1e-8)


def _symbolic_single_shooting(n: int, shape: tuple[int, int]):
    """The brute-force oracle: CasADi's own derivatives of the composed (single-shooting) expressions."""
    import casadi as ca

    from mnemo_mpc.planning.nlp import (
        ParamLayout,
        _gather_coefficients,
        _rates,
        _rollout,
        _spline_clearance,
        _spline_coordinates,
        _unpack_head,
        cost_residuals,
    )

    layout = ParamLayout(n, shape)
    _, cols = layout.spline_shape
    u = ca.SX.sym("u", 2 * n)
    U = ca.reshape(u, 2, n)
    head = ca.SX.sym("head", layout.head_size)
    h = _unpack_head(head, n)
    c16 = ca.SX.sym("c16", 16, n)
    X = _rollout(h["state"], U, 0.1)
    qx, qy = _spline_coordinates(X[0:2, 1:], h, layout.spline_shape)
    g = ca.vertcat(ca.vec(_rates(U, h["u_prev"])), _spline_clearance(qx, qy, c16))
    r_x, r_u = cost_residuals(X, U, h, MPCConfig().weights)
    f = ca.sumsqr(r_x) + ca.sumsqr(r_u)
    lam = ca.SX.sym("lam", g.shape[0])
    jr = ca.jacobian(ca.vertcat(r_x, r_u), u)
    core = ca.Function(
        "oracle",
        [u, head, c16, lam],
        [f, ca.gradient(f, u), g, ca.jacobian(g, u), ca.hessian(f + ca.dot(lam, g), u)[0], 2 * jr.T @ jr],
    )
    knot = ca.Function("knot", [u, head], [ca.floor(qx) + cols * ca.floor(qy)])
    um, p, lm = ca.MX.sym("u", 2 * n), ca.MX.sym("p", layout.size), ca.MX.sym("lam", g.shape[0])
    hm = p[: layout.head_size]
    gathered = _gather_coefficients(knot(um, hm), p[layout.head_size :], n, cols)
    return ca.Function("oracle_mx", [um, p, lm], core.call([um, hm, gathered, lm])), layout


def test_condensing_equals_the_symbolic_derivatives_of_the_single_shooting_problem():
    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.grid import OccupancyGrid

    n, shape = 8, (24, 24)
    oracle, layout = _symbolic_single_shooting(n, shape)
    problem = nlp_forms.condensed(n, 0.1, shape, MPCConfig().weights)
    ev = nlp_forms.CondensedEvaluator(problem)
    data = np.zeros(shape, np.int8)
    data[10:14, 14:17] = 100
    field = DistanceField(OccupancyGrid(data, 0.05, (-0.6, -0.6, 0.4)))
    rng = np.random.default_rng(3)
    for heading_on in (0.0, 1.0):
        head = layout.head(
            np.array([-0.1, 0.0, 0.2]),
            np.array([0.2, 0.3]),
            np.array([0.5, 0.2, 0.7]),
            heading_on,
            rng.normal(0, 0.3, (n, 2)),
            field.grid.origin,
            0.05,
        )
        p = np.concatenate([head, field.spline_coefficients(3).ravel()])
        u, lam = rng.uniform(-0.3, 0.5, 2 * n), rng.normal(size=3 * n)
        f0, grad0, g0, jac0, hess0, gn0 = (np.asarray(v) for v in oracle(u, p, lam))
        ev.set_parameters(p)
        f, g, grad_lag = ev.lagrangian(u, lam)
        assert abs(f - f0.item()) <= 1e-12 * max(1.0, abs(f))
        np.testing.assert_allclose(grad_lag, grad0.ravel() + jac0.T @ lam, atol=1e-12)
        grad, jac = ev.derivatives(u)
        np.testing.assert_allclose(grad, grad0.ravel(), atol=1e-12)
        np.testing.assert_allclose(g, g0.ravel(), atol=1e-12)
        np.testing.assert_allclose(jac, jac0, atol=1e-12)
        np.testing.assert_allclose(ev.hessian(lam, exact=True), hess0, atol=1e-11)
        np.testing.assert_allclose(ev.hessian(lam, exact=False), gn0, atol=1e-12)


class _Quadratic:
    """min 1/2 |x - c|^2 s.t. x_0 + x_1 >= 1: a Problem with a known solution."""

    nx, ng = 2, 1

    def __init__(self) -> None:
        self.c = np.array([0.2, 0.3])

    def set_parameters(self, p):
        pass

    def lagrangian(self, x, lam_g):
        return 0.5 * float((x - self.c) @ (x - self.c)), np.array([x.sum()]), x - self.c + lam_g[0]

    def derivatives(self, x):
        return x - self.c, np.ones((1, 2))

    def hessian(self, lam_g, exact):
        return np.eye(2)

    def merit(self, x):
        return 0.5 * float((x - self.c) @ (x - self.c)), np.array([x.sum()])


def test_sqp_converges_and_accepts_a_zero_step_at_the_optimum():
    sqp = SQP(_Quadratic(), SQPOptions())
    args = (np.zeros(0), np.full(2, -np.inf), np.full(2, np.inf), np.array([1.0]), np.array([np.inf]))
    res = sqp.solve(np.zeros(2), *args)
    assert res.success and res.iterations == 1
    np.testing.assert_allclose(res.x, [0.45, 0.55], atol=1e-12)
    again = sqp.solve(res.x, *args)  # primal only: one (zero) step to recover the multiplier
    assert again.success and again.iterations == 1 and again.stats["step"] == [1.0]
    assert sqp.solve(res.x, *args, lam_g0=res.lam_g, lam_x0=res.lam_x).iterations == 0


def test_convexified_hessian_is_positive_definite_and_keeps_the_positive_part():
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    h = (q * np.array([3.0, 1.0, 0.5, -0.2, -2.0])) @ q.T
    for strategy, want in (("clip", [3e-6, 3e-6, 0.5, 1.0, 3.0]), ("reflect", [0.2, 0.5, 1.0, 2.0, 3.0])):
        np.testing.assert_allclose(np.linalg.eigvalsh(convexified(h, strategy, 1e-6)), want, rtol=1e-9, atol=1e-12)


def test_sqp_options_validation():
    with pytest.raises(InputError, match="hessian"):
        SQPOptions(hessian="bfgs")
    with pytest.raises(InputError, match="tol_du"):
        SQPOptions(tol_du=-1.0)


# --- compile cache --------------------------------------------------------------------------------------------
# glibc's dlopen returns a library already loaded under the same path, so every entry a test damages is built by
# another process first, and damaged by replacing the file (a new inode), as a concurrent writer would.
SMALL = """
import casadi as ca
def small_functions(kind="sin"):
    x, p = ca.SX.sym("x", 3), ca.SX.sym("p", 2)
    y = ca.sin(x) * p[0] + p[1] if kind == "sin" else ca.cos(x) * p[0]
    return {"f": ca.Function("cg_test_f", [x, p], [y], ["x", "p"], ["y"])}
"""
_ns: dict = {}
exec(SMALL, _ns)
small_functions = _ns["small_functions"]
WANT = np.sin([0.1, 0.2, 0.3]) * 2 + 1


def _eval(functions):
    return np.asarray(functions["f"](np.array([0.1, 0.2, 0.3]), np.array([2.0, 1.0]))).ravel()


def _build_elsewhere(directory, tag, kind="sin"):
    import subprocess
    import sys

    code = (
        SMALL
        + f"""
from pathlib import Path
from mnemo_mpc.planning.codegen import compiled
_, info = compiled(small_functions({kind!r}), {tag!r}, Path({str(directory)!r}))
assert info.compiled, info.reason
print(info.path)
"""
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _replace(path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".new")
    tmp.write_bytes(data)
    tmp.replace(path)


def test_compiled_functions_are_cached_and_reused(tmp_path):
    first, info = codegen.compiled(small_functions(), "cg_hit", tmp_path)
    assert info.compiled and not info.cache_hit and info.build_s > 0
    second, info2 = codegen.compiled(small_functions(), "cg_hit", tmp_path)
    assert info2.compiled and info2.cache_hit and info2.path == info.path
    np.testing.assert_allclose(_eval(second), WANT, rtol=1e-14)
    meta = json.loads(Path(info.path).with_suffix(".json").read_text())
    assert meta["casadi"] and meta["sha256"] and meta["functions"] == ["f"]


def test_another_process_finds_the_cache_entry(tmp_path):
    path = _build_elsewhere(tmp_path, "cg_shared")
    functions, info = codegen.compiled(small_functions(), "cg_shared", tmp_path)
    assert info.cache_hit and Path(info.path) == path
    np.testing.assert_allclose(_eval(functions), WANT, rtol=1e-14)


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign_meta", "no_meta", "foreign_library"])
def test_a_corrupt_or_foreign_cache_entry_is_rebuilt_never_loaded(tmp_path, damage, caplog):
    tag = f"cg_{damage}"
    lib = _build_elsewhere(tmp_path, tag)
    meta = lib.with_suffix(".json")
    if damage == "truncate":
        _replace(lib, lib.read_bytes()[:100])
    elif damage == "garbage":
        _replace(lib, b"\x7fELF" + b"\0" * 4000)
    elif damage == "foreign_meta":
        m = json.loads(meta.read_text())
        m["key"] = "0" * 20
        meta.write_text(json.dumps(m))
    elif damage == "no_meta":
        meta.unlink()
    else:  # a valid library of other functions under this name, with a matching recorded hash
        other = _build_elsewhere(tmp_path, "cg_other", kind="cos")
        _replace(lib, other.read_bytes())
        m = json.loads(meta.read_text())
        m["sha256"] = codegen._sha256(lib)
        meta.write_text(json.dumps(m))
    with caplog.at_level(logging.WARNING, logger="mnemo_mpc.planning.codegen"):
        functions, rebuilt = codegen.compiled(small_functions(), tag, tmp_path)
    assert rebuilt.compiled and not rebuilt.cache_hit
    if damage != "no_meta":
        assert "not usable" in caplog.text
    np.testing.assert_allclose(_eval(functions), WANT, rtol=1e-14)


def test_without_a_compiler_the_interpreted_functions_are_used(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.INFO, logger="mnemo_mpc.planning.codegen"):
        functions, info = codegen.compiled(small_functions(), "cg_nocc", tmp_path)
    assert not info.compiled and "compiler" in info.reason
    assert caplog.text.count("interpreted") == 1
    np.testing.assert_allclose(_eval(functions), WANT, rtol=1e-14)


def test_warm_start_with_duals_of_the_other_method_is_refused(recorded):
    mpc, out = recorded
    cold = next(r for res in out for r, _ in res["cold"] if r.success)
    wrong = WarmStart(cold.states, cold.controls, np.zeros(6 * SUITE.mpc.N), np.zeros(5 * SUITE.mpc.N + 3))
    with pytest.raises(InputError, match="multipliers"):
        mpc._start(cold.states[0], wrong, None)


def test_a_wall_clock_budget_stops_the_sqp_between_iterations():
    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.grid import OccupancyGrid
    from mnemo_mpc.planning.mpc import SQPMPC, MPCConfig
    from mnemo_mpc.planning.robot import RobotModel
    from mnemo_mpc.planning.sqp import SQPOptions

    with pytest.raises(InputError, match="max_time_s"):
        SQPOptions(max_time_s=0.0)
    field = DistanceField(OccupancyGrid(np.zeros((40, 40), np.int8), 0.05, (-1.0, -1.0, 0.0)))
    goal = np.array([0.6, 0.2, 0.0])
    budget = SQPMPC(RobotModel(), MPCConfig(max_time_s=1e-9, fallback=None), (40, 40))
    res = budget.solve(field, np.zeros(3), np.zeros(2), goal)
    assert res.status == "time_limit" and res.iterations == 0 and not res.success
    free = budget.with_config(max_time_s=None).solve(field, np.zeros(3), np.zeros(2), goal)
    assert free.success and free.iterations >= 2


def test_the_compiler_is_asked_its_version_once_per_binary(tmp_path, monkeypatch):
    """`cc --version` (a process launch) runs once per compiler binary, again when the binary changes."""
    import os
    import subprocess

    cc = tmp_path / "cc"
    cc.write_text("#!/bin/sh\necho 'fake cc 1.0'\n")
    cc.chmod(0o755)
    calls = []
    real = subprocess.run

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(subprocess, "run", counting)
    assert codegen._compiler_id(str(cc)) == "fake cc 1.0"
    assert codegen._compiler_id(str(cc)) == "fake cc 1.0"
    assert len(calls) == 1
    cc.write_text("#!/bin/sh\necho 'fake cc 2.0'\n")
    os.utime(cc, ns=(cc.stat().st_atime_ns, cc.stat().st_mtime_ns + 1_000_000_000))
    assert codegen._compiler_id(str(cc)) == "fake cc 2.0" and len(calls) == 2
