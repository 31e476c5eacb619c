"""Imports point down the layers (docs/architecture.md): a module imports only from its own layer or below, at the top
of the file or inside a function alike. An upward import is how a low layer ends up needing the whole package (the
node pulling the simulator, a controller that cannot be reused without the model's training code)."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mnemo_mpc"

# Lowest first. A key is a package or a module (dotted, below mnemo_mpc); the longest key that prefixes a module's name
# places it. The model and its runtime sit below the data they are trained on; training sits above the dataset.
LAYERS: list[tuple[str, ...]] = [
    ("", "errors", "atomic", "safe_io", "resources"),  # "": mnemo_mpc/__init__.py (the version)
    ("memory", "theory"),
    ("planning", "icl", "optimizers"),
    ("nav",),
    ("peers",),  # the MPC's peers (MPPI, DWA) in the Controller's place: nav's stages around another planner
    ("warmstart",),  # the ViT, its inputs and the ONNX runtime: what a node runs
    ("realism", "profile"),  # one robot file: robot, MPC, controller (with the runtime's provider), stated realism
    ("sim",),
    ("dataset",),
    ("warmstart.data", "warmstart.train", "warmstart.compare", "warmstart.pack", "warmstart.export"),  # training
    ("ros",),
    ("bench", "commands", "experiments", "cli"),  # the applications
]
RANK = {key: rank for rank, keys in enumerate(LAYERS) for key in keys}


def layer(module: str) -> int:
    """Rank of `module` (dotted, below mnemo_mpc; "" for the package itself)."""
    if not module:
        return RANK[""]
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        key = ".".join(parts[:n])
        if key in RANK:
            return RANK[key]
    raise KeyError(f"{module!r} is in no layer: add it to LAYERS (and to docs/architecture.md)")


def imports_of(path: Path) -> list[tuple[str, int]]:
    """(imported module below mnemo_mpc, line) for every import of the package in `path`, top-level or nested."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] if node.module != "mnemo_mpc" else [f"mnemo_mpc.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        for name in names:
            if name == "mnemo_mpc" or name.startswith("mnemo_mpc."):
                target = name.removeprefix("mnemo_mpc").removeprefix(".")
                out.append(("" if target == "__version__" else target, node.lineno))
    return out


def module_name(path: Path, root: Path = PACKAGE) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def upward_imports(root: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        here = module_name(path, root)
        for target, line in imports_of(path):
            if layer(target) > layer(here):
                found.append(f"{path.relative_to(root.parent)}:{line}: {here or 'mnemo_mpc'} imports {target}")
    return found


def test_imports_only_point_down():
    assert upward_imports() == []


def test_every_module_has_a_layer():
    for path in PACKAGE.rglob("*.py"):
        layer(module_name(path))  # raises for a package no one placed


def test_an_upward_import_is_found(tmp_path):
    """The check itself: a nav module importing the simulator is reported."""
    pkg = tmp_path / "mnemo_mpc"
    (pkg / "nav").mkdir(parents=True)
    (pkg / "nav" / "bad.py").write_text("def f():\n    from mnemo_mpc.sim.episode import run_episode\n")
    (pkg / "nav" / "good.py").write_text("from mnemo_mpc.planning.mpc import SQPMPC\n")
    assert upward_imports(pkg) == ["mnemo_mpc/nav/bad.py:2: nav.bad imports sim.episode"]
    with pytest.raises(KeyError, match="no layer"):
        layer("gadgets.thing")
