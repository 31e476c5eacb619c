"""The package is both an ament_python ROS2 package and a pip package: check both faces."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_package_xml_validates_with_catkin_pkg():
    catkin_pkg = pytest.importorskip("catkin_pkg.package", reason="catkin_pkg is a dev dependency")
    pkg = catkin_pkg.parse_package(str(ROOT / "package.xml"))
    pkg.validate()  # raises InvalidPackage on any format-3 violation
    assert pkg.package_format == 3
    assert pkg.name == "mnemo_mpc"
    assert pkg.get_build_type() == "ament_python"
    exec_deps = {d.name for d in pkg.exec_depends}
    assert {"rclpy", "geometry_msgs", "nav_msgs", "sensor_msgs", "launch", "launch_ros"} <= exec_deps


def test_versions_agree():
    from catkin_pkg.package import parse_package

    import mnemo_mpc

    setup_py = (ROOT / "setup.py").read_text()
    assert f'version="{mnemo_mpc.__version__}"' in setup_py
    assert parse_package(str(ROOT / "package.xml")).version == mnemo_mpc.__version__


def test_colcon_build(tmp_path):
    colcon = shutil.which("colcon", path=str(Path(sys.executable).parent)) or shutil.which("colcon")
    if colcon is None:
        pytest.skip("colcon-core is not installed (dev dependency)")
    src = tmp_path / "src" / "mnemo_mpc"
    # Only what git would ship: no .venv, build outputs or caches.
    files = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for rel in files:
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    proc = subprocess.run(
        [colcon, "build", "--base-paths", "src"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    install = tmp_path / "install" / "mnemo_mpc"
    assert (install / "share" / "ament_index" / "resource_index" / "packages" / "mnemo_mpc").is_file()
    assert (install / "share" / "mnemo_mpc" / "package.xml").is_file()
    assert (install / "share" / "mnemo_mpc" / "launch" / "nav.launch.py").is_file()
    assert (install / "share" / "mnemo_mpc" / "config" / "nav.yaml").is_file()
    # `ros2 run mnemo_mpc nav_node` looks in lib/<package>.
    assert (install / "lib" / "mnemo_mpc" / "nav_node").is_file()
    assert (install / "lib" / "mnemo_mpc" / "mnemo-mpc").is_file()


def test_cli_help_lists_commands():
    out = subprocess.run(
        [sys.executable, "-m", "mnemo_mpc.cli", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "COMMAND" in out
