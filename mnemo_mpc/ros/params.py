"""The node's parameters: one dataclass is the single source of names, defaults, types and descriptions.

The rclpy node declares every field as a ROS parameter (with its description); `config/nav.yaml` sets them; the
tests check the YAML against this dataclass without ROS. No rclpy import here.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mnemo_mpc.errors import InputError
from mnemo_mpc.warmstart import MODES

NODE_NAME = "mnemo_mpc_nav"


def _p(default: Any, description: str) -> Any:
    return field(default=default, metadata={"description": description})


@dataclass
class NavParams:
    # frames and topics (REP-105: the local plan and grid live in `odom`, commands are in the base frame)
    frame_id: str = _p("odom", "fixed frame of the local grid, odometry pose, goal and local plan")
    base_frame_id: str = _p("base_link", "robot base frame (commands are expressed in it)")
    grid_topic: str = _p("local_costmap/costmap", "nav_msgs/OccupancyGrid: the local rolling-window grid")
    odom_topic: str = _p("odom", "nav_msgs/Odometry: pose in frame_id and body velocity")
    goal_topic: str = _p("goal_pose", "geometry_msgs/PoseStamped: the navigation goal, in frame_id")
    path_topic: str = _p("plan", "nav_msgs/Path: optional global path in frame_id (sub-goals for the MPC)")
    cmd_vel_topic: str = _p("cmd_vel", "geometry_msgs/Twist (or TwistStamped) velocity command")
    local_plan_topic: str = _p("local_plan", "nav_msgs/Path: the MPC's planned horizon")
    use_stamped_twist: bool = _p(False, "publish geometry_msgs/TwistStamped instead of Twist on cmd_vel")
    # timing and safety
    control_rate_hz: float = _p(10.0, "control loop rate [Hz]")
    stale_timeout_s: float = _p(0.5, "stop if odometry or the grid is older than this [s]")
    goal_tolerance_m: float = _p(0.2, "goal reached when the robot centre is this close [m]")
    # robot (see mnemo_mpc.planning.robot.RobotModel)
    robot_radius: float = _p(0.2, "circular footprint radius [m]")
    safety_margin: float = _p(0.05, "extra clearance beyond the footprint [m]")
    v_min: float = _p(0.0, "minimum linear velocity [m/s] (<= 0)")
    v_max: float = _p(0.5, "maximum linear velocity [m/s]")
    w_max: float = _p(1.5, "maximum |angular velocity| [rad/s]")
    a_max: float = _p(1.0, "maximum |linear acceleration| [m/s^2]")
    alpha_max: float = _p(3.0, "maximum |angular acceleration| [rad/s^2]")
    # MPC (see mnemo_mpc.planning.mpc.MPCConfig)
    horizon_steps: int = _p(30, "MPC horizon N")
    dt: float = _p(0.1, "MPC step [s]")
    sqp_method: str = _p("sqp", "'sqp' (condensed NLP, compiled, DAQP) or 'sqpmethod' (CasADi's, multiple shooting)")
    qpsol: str = _p("piqp", "QP backend of CasADi's sqpmethod (sqp_method: sqpmethod)")
    max_iter: int = _p(10, "SQP iteration cap per control step (paper: 10)")
    fallback_solver: str = _p("ipopt", "NLP solver for failed SQP solves ('' to disable)")
    unknown_policy: str = _p("occupied", "how unknown grid cells count for clearance: 'occupied' or 'free'")
    warm_start: str = _p(
        "auto", "SQP start: cold, shift, learned, hybrid, or auto (hybrid when a model fits the robot, else shift)"
    )
    warm_start_model: str = _p("", "warm-start model (ONNX); empty: a shipped model that fits the robot")

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise InputError(f"parameter {f.name}: expected a finite number, got {value}")
        for name in ("control_rate_hz", "stale_timeout_s", "goal_tolerance_m", "dt", "robot_radius"):
            if getattr(self, name) <= 0:
                raise InputError(f"parameter {name}: expected > 0, got {getattr(self, name)}")
        if self.horizon_steps < 2 or self.max_iter < 1:
            raise InputError(
                f"parameters horizon_steps >= 2 and max_iter >= 1 expected, got {self.horizon_steps}, {self.max_iter}"
            )
        if self.warm_start not in ("auto", *MODES):
            raise InputError(
                f"parameter warm_start: expected auto, cold, shift, learned or hybrid, got {self.warm_start!r}"
            )
        if self.sqp_method not in ("sqp", "sqpmethod"):
            raise InputError(f"parameter sqp_method: expected 'sqp' or 'sqpmethod', got {self.sqp_method!r}")
        if self.unknown_policy not in ("occupied", "free"):
            raise InputError(f"parameter unknown_policy: expected 'occupied' or 'free', got {self.unknown_policy!r}")

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "parameters") -> NavParams:
        """Build from a name -> value mapping, refusing unknown names and wrong types (ints are accepted as
        floats, as ROS does for YAML like `dt: 1`)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise InputError(f"{source}: unknown parameter(s) {unknown}; expected some of {sorted(fields)}")
        defaults = cls()
        kwargs = {}
        for name, value in values.items():
            expected = type(getattr(defaults, name))
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise InputError(
                    f"{source}: parameter {name} expected {expected.__name__}, got {type(value).__name__} {value!r}"
                )
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, path: str | Path, node_name: str = NODE_NAME) -> NavParams:
        """Read a ROS2 parameter file (`node_name: {ros__parameters: {...}}`)."""
        path = Path(path)
        try:
            doc = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise InputError(f"{path}: cannot read parameter file: {exc}") from exc
        try:
            values = doc[node_name]["ros__parameters"]
        except (TypeError, KeyError) as exc:
            raise InputError(f"{path}: expected a '{node_name}: ros__parameters:' mapping") from exc
        values = {k: v for k, v in values.items() if k != "use_sim_time"}
        return cls.from_dict(values, source=str(path))

    def descriptions(self) -> dict[str, str]:
        return {f.name: f.metadata["description"] for f in dataclasses.fields(self)}

    def robot_model(self) -> Any:
        from mnemo_mpc.planning.robot import RobotModel

        return RobotModel(
            radius=self.robot_radius,
            safety_margin=self.safety_margin,
            v_min=self.v_min,
            v_max=self.v_max,
            w_max=self.w_max,
            a_max=self.a_max,
            alpha_max=self.alpha_max,
        )

    def mpc_config(self) -> Any:
        from mnemo_mpc.planning.mpc import MPCConfig

        return MPCConfig(
            N=self.horizon_steps,
            dt=self.dt,
            method=self.sqp_method,
            qpsol=self.qpsol,
            max_iter=self.max_iter,
            fallback=self.fallback_solver or None,
        )

    def controller(self) -> Any:
        """The controller these parameters describe, with its warm-start model when the mode uses one."""
        from mnemo_mpc.nav.controller import Controller, ControllerConfig
        from mnemo_mpc.warmstart.runtime import resolve

        robot, mpc = self.robot_model(), self.mpc_config()
        mode = None if self.warm_start == "auto" else self.warm_start
        mode, provider = resolve(mode, self.warm_start_model or None, robot, mpc.N, mpc.dt)
        config = ControllerConfig(
            goal_tolerance_m=self.goal_tolerance_m, unknown_policy=self.unknown_policy, warm_start=mode
        )
        return Controller(robot, mpc, config, provider)


def write_default_yaml(path: str | Path) -> None:
    """Regenerate config/nav.yaml from the dataclass defaults (descriptions as comments)."""
    from mnemo_mpc.atomic import atomic_write_text

    p = NavParams()
    lines = [
        "# mnemo_mpc local planner parameters (generated from mnemo_mpc/ros/params.py: NavParams).",
        f"{NODE_NAME}:",
        "  ros__parameters:",
    ]
    for f in dataclasses.fields(p):
        lines.append(f"    # {f.metadata['description']}")
        value = yaml.safe_dump(getattr(p, f.name), default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"    {f.name}: {value}")
    atomic_write_text(path, "\n".join(lines) + "\n")
