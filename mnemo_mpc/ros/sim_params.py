"""The simulator node's parameters: one dataclass holds names, defaults, types and descriptions (as `NavParams`).

The rclpy node declares every field with its description and dynamic typing, so `-p sim_rate_hz:=20` (an integer)
or `start: [1, 2, 0]` are accepted and checked here; a bad value is one `InputError` naming the parameter. No rclpy
import here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.profile import checked_values, param, require_finite

SIM_NODE_NAME = "mnemo_mpc_sim"


@dataclass
class SimNodeParams:
    # world: a generated one, or a map_server map with a start and a goal
    world_seed: int = param(7, "generated world seed (mnemo_mpc.sim.worlds.generate_world; `mnemo-mpc demo --seed`)")
    world_kind: str = param(
        "", "generated world kind: rooms, corridor, doors, clutter, open, mixed; empty: from the seed"
    )
    map_yaml: str = param(
        "", "map_server map (YAML + image; or relative to the sim/ data folder) instead of a generated world"
    )
    start: str | list = param("", "robot start in a map_yaml world: x,y,yaw [m, m, rad] (a string or a list of 3)")
    robot_params: str = param(
        "",
        "robot profile: a params YAML with footprint, limits and sensor_range_m (config/robots/*.yaml, or the "
        "planner's own params file); the simulated body, its lidar's range and the generated world's sizing follow "
        "it; empty: the generic 0.2 m disc",
    )
    goal: str | list = param("", "goal in a map_yaml world: x,y,yaw [m, m, rad] (a string or a list of 3)")
    # time
    sim_rate_hz: float = param(
        20.0, "simulation steps per simulated second; odom, grid, scan and /clock each step [Hz]"
    )
    physics_hz: float = param(
        240.0, "physics substeps per simulated second, at least (PyBullet's fixed step; whole substeps a step) [Hz]"
    )
    real_time_factor: float = param(1.0, "simulated seconds per wall-clock second (1: real time)")
    cmd_timeout_s: float = param(0.5, "stop the robot when the last cmd_vel is older than this, in simulated time [s]")
    time_limit_s: float = param(
        0.0, "exit with status 1 after this much simulated time without reaching the goal; 0: never"
    )
    seed: int = param(0, "lidar noise seed")
    realism: str = param(
        "profile",
        "the simulated robot (mnemo_mpc.sim.realism): ideal (obeys the planner's model), profile (the latency, lags, "
        "slip, odometry and lidar robot_params states; odometry then drifts in frame_id and goal and plan are "
        "re-published through the localiser's fixes) or harsh",
    )
    # frames and topics (REP-105: ground-truth odometry in `odom`, the robot in `base_link`)
    frame_id: str = param("odom", "fixed frame of odometry, grid, goal and plan (the world's map frame)")
    base_frame_id: str = param("base_link", "robot frame: odometry child frame and the lidar's frame")
    map_frame_id: str = param(
        "",
        "a name (map): goal and plan in this frame (the world's), and /tf map_frame_id -> frame_id (the localiser's "
        "estimate) and frame_id -> base_frame_id (the odometry) every step, as a robot with a localiser publishes "
        "(needs tf2_msgs); empty: goal and plan in frame_id, no /tf",
    )
    odom_topic: str = param("odom", "nav_msgs/Odometry out: ground-truth pose and body velocity")
    grid_topic: str = param("local_costmap/costmap", "nav_msgs/OccupancyGrid out: the lidar-fused rolling window")
    scan_topic: str = param("scan", "sensor_msgs/LaserScan out: the simulated 2-D lidar")
    cmd_vel_topic: str = param("cmd_vel", "geometry_msgs/Twist (or TwistStamped) in: the command held until the next")
    use_stamped_twist: bool = param(False, "subscribe geometry_msgs/TwistStamped on cmd_vel instead of Twist")
    goal_topic: str = param("goal_pose", "geometry_msgs/PoseStamped out (transient local): the world's goal")
    path_topic: str = param("plan", "nav_msgs/Path out (transient local): the global path on the world's map")
    publish_goal: bool = param(True, "publish the world's goal once on goal_topic (latched) so a planner drives there")
    publish_plan: bool = param(True, "publish the global path (mnemo_mpc.planning.global_path) once on path_topic")
    # episode
    goal_tolerance_m: float = param(0.25, "goal reached when the robot centre is this close (as `mnemo-mpc demo`) [m]")
    exit_on_goal: bool = param(False, "exit with status 0 once the goal is reached")
    result_file: str = param("", "write a JSON summary (time to goal in simulated and wall time, collisions) at exit")

    def __post_init__(self) -> None:
        require_finite(self)
        for name in ("sim_rate_hz", "physics_hz", "real_time_factor", "cmd_timeout_s", "goal_tolerance_m"):
            if getattr(self, name) <= 0:
                raise InputError(f"parameter {name}: expected > 0, got {getattr(self, name)}")
        if self.physics_hz < self.sim_rate_hz:
            raise InputError(
                f"parameter physics_hz: expected >= sim_rate_hz ({self.sim_rate_hz}), got {self.physics_hz}"
            )
        if self.time_limit_s < 0:
            raise InputError(f"parameter time_limit_s: expected >= 0 (0: no limit), got {self.time_limit_s}")
        if self.world_seed < 0 or self.seed < 0:
            raise InputError(f"parameters world_seed and seed: expected >= 0, got {self.world_seed}, {self.seed}")
        from mnemo_mpc.sim.realism import LEVELS
        from mnemo_mpc.sim.worlds import KINDS

        if self.realism not in LEVELS:
            raise InputError(f"parameter realism: expected one of {list(LEVELS)}, got {self.realism!r}")

        if self.map_frame_id and self.map_frame_id in (self.frame_id, self.base_frame_id):
            raise InputError(
                f"parameter map_frame_id: expected a frame other than frame_id and base_frame_id, got "
                f"{self.map_frame_id!r}"
            )
        if self.world_kind and self.world_kind not in KINDS:
            raise InputError(f"parameter world_kind: expected one of {list(KINDS)} or empty, got {self.world_kind!r}")
        if self.map_yaml:
            self.start_pose()
            self.goal_pose()
        elif self.start != "" or self.goal != "":
            raise InputError("parameters start and goal: only with map_yaml (a generated world has its own)")

    # --- poses -----------------------------------------------------------------------------------------------------
    def start_pose(self) -> np.ndarray:
        from mnemo_mpc.sim.world import parse_pose

        return parse_pose(self.start, "parameter start")

    def goal_pose(self) -> np.ndarray:
        from mnemo_mpc.sim.world import parse_pose

        return parse_pose(self.goal, "parameter goal")

    def map_yaml_path(self) -> Path:
        """`map_yaml` as given, else relative to the shipped `sim/` data folder (`worlds/open_45.yaml`)."""
        path = Path(self.map_yaml).expanduser()
        if path.is_file() or path.is_absolute():
            return path
        from mnemo_mpc.resources import share_file

        try:
            return share_file("sim", path)
        except InputError as exc:
            raise InputError(f"parameter map_yaml: no file {self.map_yaml!r} here or in the sim/ data folder") from exc

    def nav_params(self) -> Any:
        """The `NavParams` of `robot_params` (None without it: the built-in robot)."""
        if not self.robot_params:
            return None
        from mnemo_mpc.profile import NavParams

        path = Path(self.robot_params).expanduser()
        if not path.is_file():
            raise InputError(f"parameter robot_params: no file {self.robot_params!r}")
        try:
            return NavParams.from_yaml(path)
        except InputError as exc:
            raise InputError(f"parameter robot_params: {exc}") from None

    def robot_profile(self) -> tuple[Any, float | None]:
        """(RobotModel, lidar range in metres or None) of `robot_params`; the default robot and None without it."""
        from mnemo_mpc.planning.robot import RobotModel

        nav = self.nav_params()
        return (RobotModel(), None) if nav is None else (nav.robot_model(), nav.sensor_range_m)

    # --- construction ----------------------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "parameters") -> SimNodeParams:
        """Build from a name -> value mapping, refusing unknown names and wrong types (ints are accepted as floats,
        as ROS YAML writes `sim_rate_hz: 20`)."""
        # start and goal: "x,y,yaw" or a list, parsed by the dataclass itself
        poses = {k: (v if isinstance(v, str) else list(v)) for k, v in values.items() if k in ("start", "goal")}
        rest = {k: v for k, v in values.items() if k not in ("start", "goal")}
        kwargs = {**checked_values(cls, rest, source), **poses}
        return cls(**kwargs)

    def descriptions(self) -> dict[str, str]:
        return {f.name: f.metadata["description"] for f in dataclasses.fields(self)}

    def world(self, robot: Any = None) -> Any:
        """The `World` these parameters name (generated for `robot` -- the profile's passages, doors and endpoint
        clearances, as `mnemo-mpc demo --params` generates it -- or the map with start and goal). Raises
        `InputError` / `MapFormatError` / `InfeasibleProblemError` for a bad map or an impossible start or goal."""
        if self.map_yaml:
            from mnemo_mpc.sim.world import load_map_world

            return load_map_world(self.map_yaml_path(), self.start_pose(), self.goal_pose())
        from mnemo_mpc.planning.robot import RobotModel
        from mnemo_mpc.sim.worlds import WorldConfig, generate_world

        return generate_world(
            self.world_seed, WorldConfig.for_robot(robot or RobotModel()), kind=self.world_kind or None
        )


__all__ = ["SIM_NODE_NAME", "SimNodeParams"]
