"""PyBullet worlds, robot, lidar -> local grid sensor, closed-loop episodes (uses the library; never imported by it).

Public API: `Simulator`, `SimConfig`, `Observation` (simulator.py); `LidarConfig`, `LidarScan` (lidar.py);
`LocalGrid`, `LocalGridConfig` (local_grid.py); `DiffDriveConfig` (robot.py); `build_static_geometry`,
`load_map_world`, `merge_occupied_rectangles` (world.py). Importing this package does not import pybullet; creating
a `Simulator` does.
"""

from mnemo_mpc.sim.lidar import LidarConfig, LidarScan
from mnemo_mpc.sim.local_grid import LocalGrid, LocalGridConfig
from mnemo_mpc.sim.robot import DiffDriveConfig
from mnemo_mpc.sim.simulator import Observation, SimConfig, Simulator, StepTiming
from mnemo_mpc.sim.world import StaticGeometryConfig, build_static_geometry, load_map_world, merge_occupied_rectangles

__all__ = [
    "DiffDriveConfig",
    "LidarConfig",
    "LidarScan",
    "LocalGrid",
    "LocalGridConfig",
    "Observation",
    "SimConfig",
    "Simulator",
    "StaticGeometryConfig",
    "StepTiming",
    "build_static_geometry",
    "load_map_world",
    "merge_occupied_rectangles",
]
