"""The package is both an ament_python ROS2 package and a pip package: check both faces."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import sysconfig
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Modules whose top-level package is a ROS package (an exec_depend), as opposed to Python libraries.
ROS_SOURCES = [*sorted((ROOT / "mnemo_mpc" / "ros").glob("*.py")), ROOT / "launch" / "nav.launch.py"]
ROS_SOURCES.append(ROOT / "mnemo_mpc" / "resources.py")
SIM_DATA = (
    "urdf/diff_drive.urdf",
    "worlds/open_45.yaml",
    "worlds/open_45.pgm",
    "scenarios/sample_worlds.json",
    "bags/open_45/metadata.yaml",  # the sample bag `mnemo-mpc replay` runs on
    "bags/open_45/open_45.db3",
)


def _is_ros_package(name: str) -> bool:
    return (
        name in ("rclpy", "launch", "launch_ros", "ament_index_python")
        or name.endswith(("_msgs", "_interfaces"))
        or name.startswith("tf2")
    )


def ros_imports() -> dict[str, list[str]]:
    """ROS packages imported anywhere (module level or inside functions) by the ROS-facing sources -> the files."""
    found: dict[str, list[str]] = {}
    for path in ROS_SOURCES:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if _is_ros_package(top):
                    found.setdefault(top, []).append(path.name)
    return found


def source_copy(dest: Path) -> Path:
    """What git would ship (tracked and untracked-but-not-ignored files), copied to `dest`."""
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for rel in files:
        if (ROOT / rel).is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dest / rel)
    return dest


def lookup_from(site_packages: Path, cwd: Path, env_extra: dict[str, str]) -> dict[str, str]:
    """Import the installed copy in `site_packages` (not this checkout) in a fresh interpreter and ask it where its
    data is."""
    code = (
        "import json, mnemo_mpc\n"
        "from mnemo_mpc.resources import share_dir, share_file\n"
        "from mnemo_mpc.sim.robot import URDF_PATH\n"
        "from mnemo_mpc.warmstart.runtime import model_dirs\n"
        "print(json.dumps({'package': mnemo_mpc.__file__, 'sim': str(share_dir('sim')), 'urdf': str(URDF_PATH),"
        " 'scenarios': str(share_file('sim', 'scenarios/sample_worlds.json')),"
        " 'models': [str(d) for d in model_dirs()]}))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_MPC_SIM", "MNEMO_MPC_MODELS", "AMENT"))}
    env.update(PYTHONPATH=str(site_packages), **env_extra)
    proc = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_package_xml_validates_with_catkin_pkg():
    catkin_pkg = pytest.importorskip("catkin_pkg.package", reason="catkin_pkg is a dev dependency")
    pkg = catkin_pkg.parse_package(str(ROOT / "package.xml"))
    pkg.validate()  # raises InvalidPackage on any format-3 violation
    assert pkg.package_format == 3
    assert pkg.name == "mnemo_mpc"
    assert pkg.get_build_type() == "ament_python"


def test_exec_depends_agree_with_the_ros_imports():
    """Every ROS package the node, simulator, launch file or resource lookup imports is an exec_depend, and every
    ROS exec_depend is imported somewhere (no stale tf2_ros / visualization_msgs)."""
    catkin_pkg = pytest.importorskip("catkin_pkg.package", reason="catkin_pkg is a dev dependency")
    exec_deps = {d.name for d in catkin_pkg.parse_package(str(ROOT / "package.xml")).exec_depends}
    ros_deps = {d for d in exec_deps if _is_ros_package(d)}
    imported = ros_imports()
    missing = {name: files for name, files in imported.items() if name not in exec_deps}
    assert not missing, f"imported but not an exec_depend in package.xml: {missing}"
    assert ros_deps == set(imported), f"exec_depend but imported nowhere: {sorted(ros_deps - set(imported))}"
    assert {"rclpy", "nav_msgs", "sensor_msgs", "rosgraph_msgs", "launch", "launch_ros"} <= ros_deps


def test_launch_file_adds_the_simulator_with_use_sim(monkeypatch):
    """nav.launch.py against stand-ins for launch / launch_ros (not installable as wheels): use_sim adds sim_node,
    both nodes take use_sim_time, which follows use_sim unless given."""

    def recorder(name):
        return type(name, (), {"__init__": lambda self, *a, **k: self.__dict__.update(args=a, kwargs=k)})

    stubs = {
        "launch": {"LaunchDescription": recorder("LaunchDescription")},
        "launch.actions": {"DeclareLaunchArgument": recorder("DeclareLaunchArgument")},
        "launch.conditions": {"IfCondition": recorder("IfCondition")},
        "launch.substitutions": {"LaunchConfiguration": recorder("LaunchConfiguration")},
        "launch_ros": {},
        "launch_ros.actions": {"Node": recorder("Node")},
        "launch_ros.parameter_descriptions": {"ParameterValue": recorder("ParameterValue")},
        "ament_index_python": {},
        "ament_index_python.packages": {"get_package_share_directory": lambda name: f"/opt/share/{name}"},
    }
    for name, attrs in stubs.items():
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(**attrs))
    ns: dict = {}
    exec(compile((ROOT / "launch" / "nav.launch.py").read_text(), "nav.launch.py", "exec"), ns)
    entities = ns["generate_launch_description"]().args[0]
    args = {e.args[0]: e.kwargs["default_value"] for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    assert args["use_sim"] == "false" and args["use_sim_time"].args == ("use_sim",)
    nodes = {e.kwargs["executable"]: e.kwargs for e in entities if type(e).__name__ == "Node"}
    assert set(nodes) == {"nav_node", "sim_node"}
    assert nodes["sim_node"]["condition"].args[0].args == ("use_sim",)
    assert "condition" not in nodes["nav_node"]
    for kw in nodes.values():
        params = [p for p in kw["parameters"] if isinstance(p, dict)][0]
        assert params["use_sim_time"].args == ("use_sim_time",)
    from mnemo_mpc.ros.sim_params import SimNodeParams

    sim_params = [p for p in nodes["sim_node"]["parameters"] if isinstance(p, dict)][0]
    assert set(sim_params) - {"use_sim_time"} <= set(SimNodeParams().descriptions())


def test_versions_agree():
    from catkin_pkg.package import parse_package

    import mnemo_mpc

    setup_py = (ROOT / "setup.py").read_text()
    assert f'version="{mnemo_mpc.__version__}"' in setup_py
    assert parse_package(str(ROOT / "package.xml")).version == mnemo_mpc.__version__


def test_colcon_build(tmp_path):
    """The documented workspace build, `colcon build --packages-select mnemo_mpc` (README): the option comes from the
    colcon-package-selection extension (the dev extra), and a second package in the workspace is left alone."""
    colcon = shutil.which("colcon", path=str(Path(sys.executable).parent)) or shutil.which("colcon")
    if colcon is None:
        pytest.skip("colcon-core is not installed (dev dependency)")
    source_copy(tmp_path / "src" / "mnemo_mpc")
    other = tmp_path / "src" / "other_pkg"  # a workspace neighbour that --packages-select must not build
    other.mkdir()
    (other / "package.xml").write_text(
        '<?xml version="1.0"?>\n<package format="3"><name>other_pkg</name><version>0.0.0</version>'
        '<description>not selected</description><maintainer email="a@b.c">a</maintainer><license>none</license>'
        "<export><build_type>ament_python</build_type></export></package>\n"
    )
    (other / "setup.py").write_text('from setuptools import setup\n\nsetup(name="other_pkg", version="0.0.0")\n')
    # The selection first: after `--base-paths` (nargs *) colcon without the extension took "--packages-select
    # mnemo_mpc" for two more base paths, built both packages and exited 0.
    argv = [colcon, "build", "--packages-select", "mnemo_mpc", "--base-paths", "src"]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert not (tmp_path / "build" / "other_pkg").exists() and not (tmp_path / "install" / "other_pkg").exists()
    install = tmp_path / "install" / "mnemo_mpc"
    share = install / "share" / "mnemo_mpc"
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / "mnemo_mpc").is_file()
    assert (share / "package.xml").is_file()
    assert (share / "launch" / "nav.launch.py").is_file()
    assert (share / "config" / "nav.yaml").is_file()
    assert (share / "rviz" / "mnemo_mpc.rviz").is_file()
    for rel in SIM_DATA:
        assert (share / "sim" / rel).is_file(), rel
    # `ros2 run mnemo_mpc nav_node` / `sim_node` look in lib/<package>.
    assert (install / "lib" / "mnemo_mpc" / "nav_node").is_file()
    assert (install / "lib" / "mnemo_mpc" / "controller_server").is_file()  # the lifecycle node
    assert (install / "lib" / "mnemo_mpc" / "sim_node").is_file()
    assert (install / "lib" / "mnemo_mpc" / "mnemo-mpc").is_file()
    # The installed package finds its data: through the ament index (a sourced workspace) and, unsourced, from its
    # own install prefix.
    site = next(install.glob("lib/python3*/site-packages"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for env in ({"AMENT_PREFIX_PATH": str(install)}, {}):
        found = lookup_from(site, elsewhere, env)
        assert Path(found["package"]).is_relative_to(install), found
        assert found["sim"] == str(share / "sim") and found["urdf"] == str(share / "sim" / "urdf" / "diff_drive.urdf")
        assert found["scenarios"] == str(share / "sim" / "scenarios" / "sample_worlds.json")
        assert found["models"][0] == str(share / "models")


def test_pip_install_finds_its_data(tmp_path):
    """A (non-editable) pip install into a prefix: data_files land in <prefix>/share/mnemo_mpc and the installed
    package finds them from there, away from any checkout."""
    src = source_copy(tmp_path / "src")
    prefix = tmp_path / "prefix"
    proc = subprocess.run(
        # --ignore-installed: without it pip uninstalls this environment's own (editable) mnemo_mpc first.
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
        + ["--ignore-installed", "--prefix", str(prefix), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    share = prefix / "share" / "mnemo_mpc"
    assert (share / "rviz" / "mnemo_mpc.rviz").is_file()
    for rel in SIM_DATA:
        assert (share / "sim" / rel).is_file(), rel
    purelib = sysconfig.get_path("purelib", vars={"base": str(prefix), "platbase": str(prefix)})
    found = lookup_from(Path(purelib), tmp_path, {})
    assert Path(found["package"]).is_relative_to(prefix), found
    assert found["sim"] == str(share / "sim") and found["urdf"] == str(share / "sim" / "urdf" / "diff_drive.urdf")
    assert found["models"][0] == str(share / "models")
    # The interface packages' sources travel as package data (`mnemo-mpc ros-interfaces build` reads them in place).
    installed = Path(purelib) / "mnemo_mpc" / "ros" / "interfaces"
    from mnemo_mpc.ros import interfaces

    for source in interfaces.source_files() + [interfaces.SOURCES / "COLCON_IGNORE"]:
        assert (installed / source.relative_to(interfaces.SOURCES)).is_file(), source
    # This environment's own install is untouched.
    here = subprocess.run(
        [sys.executable, "-c", "import mnemo_mpc; print(mnemo_mpc.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert here.returncode == 0, here.stderr[-2000:]


def test_cli_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "mnemo_mpc.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "COMMAND" in out


def test_the_readme_stays_a_short_front_door():
    """The README is the front door (DEVELOPERS.md; issue 27): at most 180 lines, none over 120 characters; the
    measured detail lives in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 180
    assert [i + 1 for i, line in enumerate(lines) if len(line) > 120] == []
