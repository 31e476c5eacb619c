"""Every test has exactly one kind, `unit`, `integration` or `ros`, given by tests/conftest.py (see its docstring)."""

from __future__ import annotations

import ast
from pathlib import Path

import conftest

HERE = Path(__file__).parent
MODULES = sorted(p.stem for p in HERE.glob("test_*.py"))
LISTS = {"unit": conftest.UNIT, "integration": conftest.INTEGRATION, "ros": conftest.ROS}


def _test_names(module: str) -> set[str]:
    tree = ast.parse((HERE / f"{module}.py").read_text())
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")}


def test_every_test_module_is_listed_under_exactly_one_kind():
    unlisted = [m for m in MODULES if not any(m in mods for mods in LISTS.values())]
    assert not unlisted, f"classify in tests/conftest.py (UNIT, INTEGRATION or ROS, see its docstring): {unlisted}"
    twice = [m for m in MODULES if sum(m in mods for mods in LISTS.values()) > 1]
    assert not twice, f"listed under more than one kind in tests/conftest.py: {twice}"
    gone = sorted(set().union(*LISTS.values()) - set(MODULES))
    assert not gone, f"tests/conftest.py lists modules that do not exist: {gone}"


def test_the_named_tests_exist_and_change_their_kind():
    for module, by_kind in conftest.EXCEPTIONS.items():
        names = _test_names(module)
        for kind, tests in by_kind.items():
            assert kind in conftest.KINDS and kind != conftest.module_kind(module), (module, kind)
            assert set(tests) <= names, (module, sorted(set(tests) - names))
        listed = [t for tests in by_kind.values() for t in tests]
        assert len(listed) == len(set(listed)), module
    for module, tests in conftest.SLOW_IN_PROCESS.items():
        assert conftest.module_kind(module) == "unit", module
        assert set(tests) <= _test_names(module), (module, sorted(set(tests) - _test_names(module)))
        assert not set(tests) & set(conftest.EXCEPTIONS.get(module, {}).get("integration", ())), module


def test_every_collected_test_has_exactly_one_kind(kind_problems):
    """Over what this session collected (before `-m` deselects): a module missing from the lists, or a marker of
    another kind written on a test, shows here."""
    assert not kind_problems, "\n".join(f"{nodeid}: {kinds or 'no kind'}" for nodeid, kinds in kind_problems[:20])
