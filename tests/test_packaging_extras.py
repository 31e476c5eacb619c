"""A lean node install: `pip install mnemo_mpc` is the node's runtime, everything else is an extra (setup.py).

The node core runs with the base install alone (every other installed distribution made unimportable), every base
requirement is used by the node core, the core imports no extra's package, and constraints.txt pins them all. The
package lists are setup.py's own (`BASE`, `EXTRAS`), read by running it with `setuptools.setup` captured.
"""

from __future__ import annotations

import ast
import json
import os
import runpy
import subprocess
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from unittest import mock

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_packaging import _is_ros_package

ROOT = Path(__file__).resolve().parents[1]
# The node core: what `nav_node` runs, plus the planning library it is built on.
CORE = [
    "mnemo_mpc.ros.node",
    "mnemo_mpc.ros.adapter",
    "mnemo_mpc.nav.controller",
    "mnemo_mpc.warmstart.runtime",
    "mnemo_mpc.profile",
    *sorted(f"mnemo_mpc.planning.{p.stem}" for p in (ROOT / "mnemo_mpc" / "planning").glob("*.py")),
]
# Functions of core modules that import an extra's package on purpose, for a path the node never takes.
OPTIONAL = {
    "mnemo_mpc/planning/plot.py": {"matplotlib"},  # figures for commands and notebooks
    "mnemo_mpc/ros/convert.py": {"rosbags"},  # MessageTypes.from_rosbags: bag replay and the tests
    "mnemo_mpc/ros/tracks.py": {"rosbags"},  # MarkerTypes.from_rosbags: the tests
    "mnemo_mpc/warmstart/export.py": {"torch", "onnx", "onnxruntime"},  # export (runtime imports its constants)
    "mnemo_mpc/peers/__init__.py": {"pytorch_mppi"},  # local_planner mppi: the [peers] extra, else one clear error
}


@cache
def setup_kwargs() -> dict:
    """setup.py's arguments to `setup()`, without building anything."""
    captured: dict = {}
    cwd = os.getcwd()
    try:
        os.chdir(ROOT)  # its data_files globs are relative
        with mock.patch("setuptools.setup", lambda **kw: captured.update(kw)):
            runpy.run_path(str(ROOT / "setup.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
    return captured


def base() -> list[Requirement]:
    return [Requirement(r) for r in setup_kwargs()["install_requires"]]


def extras() -> dict[str, list[Requirement]]:
    return {name: [Requirement(r) for r in reqs] for name, reqs in setup_kwargs()["extras_require"].items()}


def names(reqs: list[Requirement]) -> set[str]:
    return {canonicalize_name(r.name) for r in reqs}


@cache
def _modules_by_dist() -> dict[str, frozenset[str]]:
    out: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            out.setdefault(canonicalize_name(dist), set()).add(module)
    return {d: frozenset(m) for d, m in out.items()}


def import_names(dist: str) -> set[str]:
    """The top-level modules a distribution provides (installed), else its name as a module."""
    dist = canonicalize_name(dist)
    return set(_modules_by_dist().get(dist, ())) or {dist.replace("-", "_")}


def closure(reqs: list[Requirement]) -> set[str]:
    """The installed distributions `reqs` bring in, transitively (markers evaluated here, extras followed)."""
    seen: set[str] = set()
    todo = [(r, {""}) for r in reqs]
    while todo:
        req, parent_extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in parent_extras):
            continue
        name = canonicalize_name(req.name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        todo += [(Requirement(r), {"", *req.extras}) for r in dist.requires or []]
    return {name for name, _ in seen}


def blocked_modules() -> set[str]:
    """Top-level modules of every installed distribution the base install (with the ROS messages) does not bring."""
    allowed = closure(base() + extras()["ros"]) | {canonicalize_name("mnemo_mpc")}
    modules = {m for dist, mods in _modules_by_dist().items() if dist not in allowed for m in mods}
    keep = {m for dist in allowed for m in _modules_by_dist().get(dist, ())}  # namespaces shared with an allowed one
    return modules - keep - set(sys.stdlib_module_names)


# Run in a fresh interpreter: an import finder refuses the blocked modules, then the node's path runs once.
NODE_RUN = r"""
import importlib, importlib.abc, json, sys
blocked = set(json.loads(sys.argv[1]))
core = json.loads(sys.argv[2])

class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in blocked:
            raise ModuleNotFoundError(f"No module named {name!r} (not in the base install)", name=name)
        return None

preloaded = {m.partition(".")[0] for m in sys.modules}  # by site (.pth files), before the finder
sys.meta_path.insert(0, NotInstalled())
try:
    import rclpy  # noqa: F401  (from ROS or the ros extra, not the base install)
except ImportError:
    core = [m for m in core if m != "mnemo_mpc.ros.node"]
for name in core:
    importlib.import_module(name)

import numpy as np
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.mpc import SQPMPC
from mnemo_mpc.profile import NavParams, build

# The node's controller as nav_node builds it (warm start "auto": a shipped model, run with onnxruntime), its own
# path planned in this process (real_time=False) so that the global path's search runs under the finder too.
profile = build(NavParams(), real_time=False)
controller = profile.controller()
data = np.zeros((60, 60), np.int8)
data[:2, :] = data[-2:, :] = data[:, :2] = data[:, -2:] = 100
data[25:35, 27:33] = 100
out = controller.step(OccupancyGrid(data, 0.05), [0.5, 0.5, 0.0], [0.0, 0.0], [2.4, 2.4, 0.0])
mpcs = [m for m in vars(controller).get("_mpcs", {}).values() if isinstance(m, SQPMPC)]
loaded = {m.partition(".")[0] for m in sys.modules}
print(json.dumps({
    "status": out.status,
    "warm_start": controller.config.warm_start,
    "source": out.warm_start_source,
    "success": bool(out.plan is not None and out.plan.success),
    "mpcs": len(mpcs),
    "node": "mnemo_mpc.ros.node" in sys.modules,
    "loaded": sorted(loaded - set(sys.stdlib_module_names)),
    "leaked": sorted((loaded - preloaded) & blocked),
}))
"""


def test_the_node_core_runs_with_the_base_install_alone():
    blocked = blocked_modules()
    # The extras' own packages are among the refused (the finder refuses more: everything they bring too).
    extra_only = set().union(*(names(reqs) for n, reqs in extras().items() if n != "ros")) - names(base())
    assert {"torch", "pybullet", "zarr", "scikit-learn", "matplotlib", "rosbags", "ray"} <= extra_only
    installed = {d for d in extra_only if d in _modules_by_dist()}
    assert all(import_names(d) <= blocked for d in installed), {d: import_names(d) - blocked for d in installed}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_MPC_MODELS", "AMENT"))}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", NODE_RUN, json.dumps(sorted(blocked)), json.dumps(CORE)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["leaked"] == [], res
    assert res["warm_start"] == "hybrid" and res["mpcs"] == 1, res  # the shipped model loaded; one SQPMPC built
    assert res["status"] == "planned" and res["success"], res
    # The run took the node's paths through the base packages: the QP solver, the model, the own path's search.
    used = {"casadi", "daqp", "onnx", "onnxruntime", "skimage", "threadpoolctl", "yaml"}
    if not os.environ.get("MNEMO_MPC_CACHE_DIR"):
        used.add("platformdirs")  # the compile cache's default folder
    assert used <= set(res["loaded"]), sorted(used - set(res["loaded"]))
    try:
        import rclpy  # noqa: F401
    except ImportError:
        return
    assert res["node"], res


def _imports(path: Path) -> list[tuple[str, int, bool]]:
    """(module, line, inside a function) for each absolute import in `path`."""
    out = []

    def walk(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                out.append((child.module, child.lineno, inner))
                if child.module.startswith("mnemo_mpc"):  # `from mnemo_mpc.x import y` may import module y
                    out.extend((f"{child.module}.{a.name}", child.lineno, inner) for a in child.names)
            walk(child, inner)

    walk(ast.parse(path.read_text(), str(path)), False)
    return out


def _source(module: str) -> Path | None:
    base_path = ROOT / module.replace(".", "/")
    for path in (base_path.with_suffix(".py"), base_path / "__init__.py"):
        if path.is_file():
            return path
    return None


def core_imports() -> dict[str, list[tuple[str, bool]]]:
    """Third-party top-level module -> [(file:line, inside a function)] over the node core: the CORE modules and
    every mnemo_mpc module they import at module level (what importing them loads)."""
    found: dict[str, list[tuple[str, bool]]] = {}
    seen: set[str] = set()
    todo = list(CORE)
    while todo:
        module = todo.pop()
        path = _source(module)
        if module in seen or path is None:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        for name, line, lazy in _imports(path):
            top = name.partition(".")[0]
            if top == "mnemo_mpc":
                if not lazy:
                    todo.append(name)
            elif top not in sys.stdlib_module_names:
                found.setdefault(top, []).append((f"{path.relative_to(ROOT)}:{line}", lazy))
    assert {"mnemo_mpc.nav.controller", "mnemo_mpc.planning.sqp", "mnemo_mpc.ros.convert"} <= seen
    return found


def test_the_base_install_is_the_node_cores_imports():
    """Every base requirement is imported by the node core (none is there only for sim / train / research), and the
    core imports no extra's package but in the OPTIONAL functions."""
    imported = core_imports()
    unused = {r.name for r in base() if r.marker is None or r.marker.evaluate()} - {
        r.name for r in base() if import_names(r.name) & set(imported)
    }
    assert not unused, f"base requirements the node core never imports: {sorted(unused)}"
    base_modules = set().union(*(import_names(r.name) for r in base()))
    extra_modules = set().union(*(import_names(r.name) for n, reqs in extras().items() if n != "ros" for r in reqs))
    bad = {
        module: [where for where, lazy in places if not lazy or module not in OPTIONAL.get(where.split(":")[0], ())]
        for module, places in imported.items()
        if module not in base_modules and not _is_ros_package(module)
    }
    bad = {m: w for m, w in bad.items() if w}
    assert not bad, f"the node core imports packages outside the base install: {bad}"
    assert extra_modules - base_modules, "no extra beyond the base?"


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            spec = list(req.specifier)
            assert len(spec) == 1 and spec[0].operator == "==", f"constraints.txt: {line!r} is not a pin"
            pins[canonicalize_name(req.name)] = spec[0].version
    return pins


def test_constraints_pin_the_base_and_every_extra():
    pins = _pins()
    groups = {"base": base(), **extras()}
    assert {"sim", "train", "research", "ros", "dev"} <= set(groups)
    missing = {g: sorted(names(reqs) - set(pins)) for g, reqs in groups.items()}
    assert not any(missing.values()), f"not pinned in constraints.txt: {missing}"
    # dev is the test suite's: every other extra but ros (from ROS or `make test`'s .[dev,ros]).
    others = set().union(*(names(reqs) for g, reqs in groups.items() if g not in ("base", "dev", "ros")))
    assert others <= names(groups["dev"]), sorted(others - names(groups["dev"]))
    assert not names(base()) & others, "a base requirement repeated in an extra"


def test_constraints_pin_what_the_requirements_bring_in():
    """Everything installed here for the base and the non-ROS extras, transitively, has its pin (the ROS wheels pin
    their own dependencies: `ros` and the ROS build wheels of `nav2` are not followed)."""
    pins = _pins()
    reqs = base() + [
        r
        for name, rs in extras().items()
        if name != "ros"
        for r in rs
        if not canonicalize_name(r.name).startswith("ros-")
    ]
    brought = closure(reqs) - {canonicalize_name("mnemo_mpc")}
    if not {"torch", "pybullet"} <= brought:
        pytest.skip("the extras are not installed here")
    assert not brought - set(pins), f"installed but not pinned in constraints.txt: {sorted(brought - set(pins))}"


def test_the_makefile_installs_everything_pinned():
    """`make demo` / `make test` install every extra, each pip install held to constraints.txt (torch above all)."""
    installs = [
        line.strip()
        for line in (ROOT / "Makefile").read_text().splitlines()
        if "pip install" in line and "-m pip" in line
    ]
    installs = [line for line in installs if "--upgrade pip" not in line]  # the installer itself
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    assert any('-e ".[dev,ros]"' in line for line in installs), installs
    assert any(line.endswith(" torch") for line in installs), "torch first, on its own"
