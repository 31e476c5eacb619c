"""One robot file, read once (issue 24 item 4): the node's parameters and the builder every command shares.

`NavParams` is the single source of names, defaults, types and descriptions: the rclpy node declares every field as
a ROS parameter (with its description); `config/nav.yaml` and the robot profiles in `config/robots/` set them; the
tests check the YAML against this dataclass without ROS. A profile describes the robot (footprint, limits), its
sensor (`sensor:` section: lidar field of view, beams, noise, dropouts), its dynamics (`dynamics:` section: latency,
actuator lags, slip, odometry; `mnemo_mpc.sim.realism`) and the MPC's sizing (horizon_steps, dt, max_iter).

`build(params, real_time=...)` turns it into the robot, the MPC configuration and the controller configuration; the
node (`mnemo_mpc.ros.adapter`) and `demo` / `eval` / `collect` / `bench` (`mnemo_mpc.sim.profile.closed_loop_setup`)
all call it, so they plan for the same robot with the same MPC (tests/test_profile.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mnemo_mpc.errors import InputError
from mnemo_mpc.nav.modes import MODES, SQP_MODES
from mnemo_mpc.peers import CONTROLLERS
from mnemo_mpc.planning.costmap import MAX_COSTMAP_COST_WEIGHT, OCCUPANCY, check_semantics
from mnemo_mpc.safe_io import load_yaml

NODE_NAME = "mnemo_mpc_nav"
# Share of the control period one SQP solve may take (wall clock, checked after each iteration): the rest of the tick
# (distance field, sub-goal, warm start, checks) takes the other part.
SOLVE_BUDGET = 0.3
# A parameter file is a few kilobytes (config/nav.yaml: ~6 KB); 1 MiB leaves room for many nodes' entries.
MAX_PARAMS_FILE_BYTES = 1 << 20
# Upper bounds (issue 26), each from the memory or time it costs; `grid_window_m: 1e5` and `horizon_steps: 1e5` were
# accepted and the node's warm-up then died in CasADi with std::bad_alloc. Measured on the 2-core CI machine.
# The planning window: its NLP, distance field and crop are built for window_cells^2 cells. 400 x 400 (20 m at the
# default 0.05 m): warm-up (NLP build + first solve) 1.8 s and 167 MB peak, vs 0.3 s at the default 120.
MAX_WINDOW_CELLS = 400
UPPER_BOUNDS: dict[str, float] = {
    # the tick itself takes 5-10 ms: above 1 kHz no period is left for it
    "control_rate_hz": 1000.0,
    "diagnostics_rate_hz": 100.0,
    # input older than a minute is no view of the present; it only delays the stop
    "stale_timeout_s": 60.0,
    "transform_tolerance": 10.0,  # a transform older than this is no view of where the frames are
    # the FollowPath action's patience with a stopped planner: an hour is no longer a failure tolerance
    "failure_tolerance": 3600.0,
    "movement_time_allowance": 3600.0,  # likewise the progress checker's
    "required_movement_radius": 100.0,  # beyond any local window: no movement could count as progress
    # an incoming costmap is copied and converted per message (int8 -> float: 9 B per cell): 16 M cells ~150 MB
    "max_grid_cells": 16_000_000,
    # a path is converted and projected per message (16 B per pose): 1 M poses ~16 MB and ~50 ms
    "max_path_poses": 1_000_000,
    # the NLP grows with the horizon (2N controls, a dense condensed QP): warm-up 5.9 s and 137 MB at N = 100
    "horizon_steps": 100,
    # iterations per control step: each is one QP; the solve is also capped by time (SOLVE_BUDGET)
    "max_iter": 100,
    # a simulated scan traces every beam per step
    "sensor_beams": 10_000,
    "sensor_range_m": 100.0,
}


# Sections of a profile: `dynamics: {latency_s: ...}` in YAML is the ROS parameter `dynamics.latency_s` and the field
# `dynamics_latency_s` here.
SECTIONS = ("dynamics", "sensor")


# How the controller meets moving obstacles (`NavParams.moving_prediction`).
MOVING_PREDICTION = ("track", "reach")

# The MPC's weight on a Nav2 costmap's inflation cost (`MPCConfig.costmap_cost_weight`), from the closed-loop sweep of
# docs/costmap.md (30 worlds, seven families): 0.05 and 0.1 keep every episode's success and widen the clearance (p5
# 0.036 -> 0.061 / 0.063 m); 0.1 left 80 steps unconverged in the dense worlds (0.05: 2) and 0.3 and 1 lost dense
# worlds to timeouts, the robot holding back before passages its whole horizon would have to cross at a cost.
COSTMAP_COST_WEIGHT = 0.05


def param(default: Any, description: str, section: str | None = None) -> Any:
    """A parameter field: its default, the description the node declares it with, and its profile section."""
    return field(default=default, metadata={"description": description, "section": section})


def ros_name(f: Any) -> str:
    """The ROS parameter name of dataclass field `f`: `section.key` for a sectioned field, else the field's name."""
    section = f.metadata.get("section")
    return f"{section}.{f.name[len(section) + 1 :]}" if section else f.name


def flatten_sections(values: dict[str, Any], source: str) -> dict[str, Any]:
    """`{dynamics: {latency_s: x}}` and `{"dynamics.latency_s": x}` (rcl's flat form) -> `{dynamics_latency_s: x}`."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        key = str(key)
        if key in SECTIONS:
            if not isinstance(value, dict):
                raise InputError(f"{source}: section {key}: expected a mapping of names to values, got {value!r}")
            for sub, v in value.items():
                out[f"{key}_{sub}"] = v
        elif "." in key and key.split(".", 1)[0] in SECTIONS:
            out[key.replace(".", "_", 1)] = value
        else:
            out[key] = value
    return out


# Nav2's controller-server names for parameters we name otherwise: accepted in parameter files, on the command line
# and as node parameters (issue 29), each the same setting as ours.
NAV2_NAMES = {"controller_frequency": "control_rate_hz", "xy_goal_tolerance": "goal_tolerance_m"}


def nav2_names(values: dict[str, Any], source: str) -> dict[str, Any]:
    """`values` with Nav2's names (`NAV2_NAMES`) put under ours; both names with different values is an error."""
    out = dict(values)
    for nav2, ours in NAV2_NAMES.items():
        if nav2 in out:
            value = out.pop(nav2)
            if ours in out and out[ours] != value:
                raise InputError(
                    f"{source}: parameters {nav2} = {value!r} and {ours} = {out[ours]!r} are the same setting "
                    "(Nav2's name and ours): give one"
                )
            out[ours] = value
    return out


def require_finite(params: Any) -> None:
    """InputError naming the first float field of the parameter dataclass `params` that is NaN or infinite."""
    for f in dataclasses.fields(params):
        value = getattr(params, f.name)
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"parameter {f.name}: expected a finite number, got {value}")


@dataclass
class NavParams:
    # frames and topics (REP-105: the local plan and grid live in `odom`, commands are in the base frame)
    frame_id: str = param("odom", "fixed frame of the local grid, odometry pose, goal and local plan")
    base_frame_id: str = param("base_link", "robot base frame (commands are expressed in it)")
    grid_topic: str = param("local_costmap/costmap", "nav_msgs/OccupancyGrid: the local rolling-window grid")
    odom_topic: str = param("odom", "nav_msgs/Odometry: pose in frame_id and body velocity")
    scan_topic: str = param(
        "scan",
        "sensor_msgs/LaserScan: the lidar the grid is fused from, its returns placing walls finer than a cell "
        "(in base_frame_id, frame_id, or a frame /tf connects); empty: none",
    )
    goal_topic: str = param("goal_pose", "geometry_msgs/PoseStamped: the navigation goal, in frame_id")
    path_topic: str = param("plan", "nav_msgs/Path: optional global path in frame_id (sub-goals for the MPC)")
    cmd_vel_topic: str = param("cmd_vel", "geometry_msgs/Twist (or TwistStamped) velocity command")
    local_plan_topic: str = param("local_plan", "nav_msgs/Path: the MPC's planned horizon")
    use_stamped_twist: bool = param(False, "publish geometry_msgs/TwistStamped instead of Twist on cmd_vel")
    # timing and safety
    control_rate_hz: float = param(
        10.0,
        "control loop rate [Hz]; at least 1/dt, at most 1000 (a tick takes 5-10 ms). Acceleration limits hold between "
        "consecutive commands",
    )
    stale_timeout_s: float = param(
        0.5, "stop if odometry or the grid was received, or is stamped, longer ago than this [s] (at most 60)"
    )
    diagnostics_rate_hz: float = param(
        1.0, "rate of diagnostic_msgs/DiagnosticArray on /diagnostics [Hz] (at most 100)"
    )
    goal_tolerance_m: float = param(
        0.2, "goal reached when the robot centre is this close [m] (Nav2's name xy_goal_tolerance is accepted)"
    )
    yaw_goal_tolerance: float = param(
        math.pi,
        "and, once there, turned in place to the goal's heading within this [rad]; pi or more: the heading is not "
        "required (reported only). Nav2's default is 0.25",
    )
    transform_tolerance: float = param(
        0.1,
        "a goal or path in another frame (map) is expressed in frame_id through the newest /tf if it is no older than "
        "this [s]; else the input is stale (Nav2's transform_tolerance; at most 10)",
    )
    required_movement_radius: float = param(
        0.5,
        "progress checker: the robot must move this far [m] within movement_time_allowance (Nav2's name; at most 100)",
    )
    movement_time_allowance: float = param(
        10.0,
        "progress checker: else a recovery runs, and after the recoveries the goal has failed (FollowPath: "
        "FAILED_TO_MAKE_PROGRESS) [s] (Nav2's name; at most 3600)",
    )
    failure_tolerance: float = param(
        1.0,
        "FollowPath action: abort (NO_VALID_CONTROL) when the planner stops for longer than this [s] (stale input, "
        "stop fallbacks; at most 3600); -1: never (Nav2's name; its default 0 aborts at once, ours are transient)",
    )
    # the grid the MPC plans on: every incoming costmap is fitted to this robot-centred window (one NLP, bounded ticks)
    grid_window_m: float = param(
        6.0,
        "side of the square planning window around the robot [m]; at most 400 cells of grid_resolution (20 m at "
        "0.05 m: warm-up 1.8 s, 167 MB)",
    )
    grid_resolution: float = param(0.05, "cell size of the planning window [m]")
    max_grid_cells: int = param(
        4_000_000,
        "reject incoming grids with more cells than this (width * height); at most 16,000,000 (~150 MB per message)",
    )
    max_path_poses: int = param(
        20_000, "reject global paths with more poses than this; at most 1,000,000 (~16 MB per message)"
    )
    # robot (see mnemo_mpc.planning.robot.RobotModel; profiles in config/robots/)
    footprint: str = param(
        "",
        "robot footprint in base_link, Nav2 style: a convex polygon '[[x, y], ...]' [m] containing (0, 0); empty: "
        "a circle of robot_radius",
    )
    robot_radius: float = param(0.2, "circular footprint radius [m] (ignored when footprint is set, as in Nav2)")
    footprint_tolerance: float = param(
        0.02, "how far the covering discs the MPC checks may stick out of a polygon footprint [m] (smaller: more discs)"
    )
    safety_margin: float = param(0.05, "extra clearance beyond the footprint [m]")
    min_margin_m: float = param(
        0.01,
        "floor of the clearance margin where a narrow passage leaves less than safety_margin [m]: at least what the "
        "local grid gets wrong on this robot (eval's grid_error_m)",
    )
    v_min: float = param(0.0, "minimum linear velocity [m/s] (<= 0)")
    v_max: float = param(0.5, "maximum linear velocity [m/s]")
    w_max: float = param(1.5, "maximum |angular velocity| [rad/s]")
    a_max: float = param(1.0, "maximum |linear acceleration| [m/s^2]")
    alpha_max: float = param(3.0, "maximum |angular acceleration| [rad/s^2]")
    sensor_range_m: float = param(
        5.0, "range of the robot's 2-D lidar [m] (the simulated lidar's range_max; at most 100)"
    )
    # MPC (see mnemo_mpc.planning.mpc.MPCConfig)
    horizon_steps: int = param(30, "MPC horizon N (at most 100: warm-up 5.9 s, 137 MB)")
    dt: float = param(0.1, "MPC step [s]")
    sqp_method: str = param("sqp", "'sqp' (condensed NLP, compiled, DAQP) or 'sqpmethod' (CasADi's, multiple shooting)")
    qpsol: str = param("piqp", "QP backend of CasADi's sqpmethod (sqp_method: sqpmethod)")
    max_iter: int = param(10, "SQP iteration cap per control step (paper: 10; at most 100)")
    fallback_solver: str = param(
        "",
        "NLP solver for failed SQP solves: '' (off: the previous plan or a stop) or 'ipopt' (capped at 0.3 of a "
        "control period, which it can overrun by one of its iterations)",
    )
    unknown_policy: str = param("occupied", "how unknown grid cells count for clearance: 'occupied' or 'free'")
    costmap_semantics: str = param(
        "occupancy",
        "what the grid's values mean: 'occupancy' (map_server probabilities: >= 65 occupied, <= 25 free, else "
        "unknown), 'nav2_costmap' (a Nav2 costmap: 100 lethal is an obstacle, 1..98 inflation and 99 inscribed are "
        "free with a soft cost, the MPC checking the footprint itself; -1 unknown) or 'nav2_costmap_inscribed' (99 an "
        "obstacle too)",
    )
    costmap_cost_weight: float = param(
        COSTMAP_COST_WEIGHT,
        "weight of a Nav2 costmap's inflation cost (0..1 at the robot's centre, squared) per MPC knot; 0: off. Used "
        "with a nav2 costmap_semantics only; at most 100",
    )
    local_planner: str = param(
        "mpc",
        "the local planner: 'mpc' (the SQP MPC) or a peer behind the same controller and safety layer, 'mppi' "
        "(needs the [peers] extra) or 'dwa' (docs/peers.md); warm_start, warm_start_model and sqp_mode are the MPC's",
    )
    warm_start: str = param(
        "auto", "SQP start: cold, shift, learned, hybrid, or auto (hybrid when a model fits the robot, else shift)"
    )
    warm_start_model: str = param("", "warm-start model (ONNX); empty: a shipped model that fits the robot")
    sqp_mode: str = param(
        "full",
        "'full': SQP iterations to convergence (up to max_iter) each tick; 'rti': one iteration per tick from the "
        "start (real-time iteration), its iterate sent when it keeps the footprint collision-free",
    )
    moving_prediction: str = param(
        "reach",
        "moving obstacles: 'track' (tracked from the grids, met as predicted over the horizon: the MPC's "
        "time-varying constraints) or 'reach' (detected only: the room they can cover while the robot stops is "
        "marked occupied)",
    )
    # The robot as it really moves (issue 24; mnemo_mpc.sim.realism simulates it, `mnemo-mpc identify` measures it). The
    # controller predicts over the latency and inverts the lags and the slip when compensate_dynamics is on; 0 / 1:
    # ideal.
    compensate_dynamics: bool = param(
        True, "predict the state over the command latency and invert the actuator lags and slip (dynamics section)"
    )
    dynamics_latency_s: float = param(
        0.0,
        "command latency: from publishing cmd_vel to the wheels acting on it [s] (odometry age is measured)",
        "dynamics",
    )
    dynamics_latency_jitter_s: float = param(0.0, "half-width of the latency's jitter [s] (simulation)", "dynamics")
    dynamics_lag_v_s: float = param(0.0, "first-order time constant of the linear velocity loop [s]", "dynamics")
    dynamics_lag_w_s: float = param(0.0, "first-order time constant of the angular velocity loop [s]", "dynamics")
    dynamics_accel_v_max: float = param(
        0.0, "the drive's own linear acceleration saturation [m/s^2] (simulation); 0: none beyond the lag", "dynamics"
    )
    dynamics_accel_w_max: float = param(
        0.0, "the drive's own angular acceleration saturation [rad/s^2] (simulation); 0: none", "dynamics"
    )
    dynamics_slip_v: float = param(
        1.0, "body speed over wheel speed (skid-steer slip; the controller inverts it)", "dynamics"
    )
    dynamics_slip_w: float = param(
        1.0, "body yaw rate over wheel yaw rate (skid-steer slip; the controller inverts it)", "dynamics"
    )
    dynamics_slip_noise: float = param(
        0.0, "relative std of the slip factors per control period (simulation)", "dynamics"
    )
    dynamics_odom_v_noise: float = param(0.0, "relative std of the wheel-speed reading (simulation)", "dynamics")
    dynamics_gyro_bias_rad_s: float = param(0.0, "gyro yaw-rate bias [rad/s] (simulation)", "dynamics")
    dynamics_gyro_noise_rad_s: float = param(0.0, "gyro yaw-rate noise std [rad/s] (simulation)", "dynamics")
    dynamics_localization_period_s: float = param(
        0.0, "localiser fix period [s] (simulation); 0: the true pose (no odometry drift)", "dynamics"
    )
    dynamics_localization_noise_m: float = param(0.0, "localiser position noise std [m] (simulation)", "dynamics")
    dynamics_localization_noise_rad: float = param(0.0, "localiser heading noise std [rad] (simulation)", "dynamics")
    sensor_fov_deg: float = param(360.0, "lidar field of view, centred on the heading [deg]", "sensor")
    sensor_beams: int = param(360, "lidar beams per scan (at most 10,000)", "sensor")
    sensor_noise_m: float = param(0.01, "lidar range noise std [m]", "sensor")
    sensor_dropout: float = param(0.0, "probability that a lidar beam is lost (NaN) [0, 1)", "sensor")

    def __post_init__(self) -> None:
        require_finite(self)
        positive = (
            "control_rate_hz",
            "stale_timeout_s",
            "diagnostics_rate_hz",
            "goal_tolerance_m",
            "dt",
            "yaw_goal_tolerance",
            "required_movement_radius",
            "movement_time_allowance",
        )
        positive += ("robot_radius", "grid_window_m", "grid_resolution", "max_grid_cells", "max_path_poses")
        positive += ("footprint_tolerance", "sensor_range_m")
        for name in positive:
            if getattr(self, name) <= 0:
                raise InputError(f"parameter {name}: expected > 0, got {getattr(self, name)}")
        if self.transform_tolerance < 0:
            raise InputError(f"parameter transform_tolerance: expected >= 0 s, got {self.transform_tolerance}")
        if not (self.failure_tolerance >= 0 or self.failure_tolerance == -1):
            raise InputError(
                f"parameter failure_tolerance: expected >= 0 s, or -1 (never), got {self.failure_tolerance}"
            )
        if not 0 <= self.min_margin_m <= self.safety_margin:
            raise InputError(
                f"parameter min_margin_m: expected metres in [0, safety_margin = {self.safety_margin}], got "
                f"{self.min_margin_m}"
            )
        if self.control_period_s > self.dt * (1 + 1e-9):
            raise InputError(
                f"parameter control_rate_hz: expected >= 1/dt = {1 / self.dt:g} Hz (a command must not be held longer "
                f"than the MPC step dt = {self.dt} s it was planned for), got {self.control_rate_hz}"
            )
        for name, bound in UPPER_BOUNDS.items():
            if getattr(self, name) > bound:
                raise InputError(f"parameter {name}: expected at most {bound:,.0f}, got {getattr(self, name):,g}")
        # the ratio first: int(round(1e308 / 0.05)) would overflow
        if not 8 <= self.grid_window_m / self.grid_resolution < MAX_WINDOW_CELLS + 1 or not (
            8 <= self.window_cells <= MAX_WINDOW_CELLS
        ):
            raise InputError(
                f"parameters grid_window_m / grid_resolution: expected a window of 8 to {MAX_WINDOW_CELLS} cells per "
                f"side, got {self.grid_window_m / self.grid_resolution:,.4g}"
            )
        if self.horizon_steps < 2 or self.max_iter < 1:
            raise InputError(
                f"parameters horizon_steps >= 2 and max_iter >= 1 expected, got {self.horizon_steps}, {self.max_iter}"
            )
        if self.warm_start not in ("auto", *MODES):
            raise InputError(
                f"parameter warm_start: expected auto, cold, shift, learned or hybrid, got {self.warm_start!r}"
            )
        if self.local_planner not in CONTROLLERS:
            raise InputError(f"parameter local_planner: expected one of {CONTROLLERS}, got {self.local_planner!r}")
        if self.sqp_mode not in SQP_MODES:
            raise InputError(f"parameter sqp_mode: expected one of {SQP_MODES}, got {self.sqp_mode!r}")
        if self.moving_prediction not in MOVING_PREDICTION:
            raise InputError(
                f"parameter moving_prediction: expected one of {MOVING_PREDICTION}, got {self.moving_prediction!r}"
            )
        if self.sqp_method not in ("sqp", "sqpmethod"):
            raise InputError(f"parameter sqp_method: expected 'sqp' or 'sqpmethod', got {self.sqp_method!r}")
        if self.unknown_policy not in ("occupied", "free"):
            raise InputError(f"parameter unknown_policy: expected 'occupied' or 'free', got {self.unknown_policy!r}")
        check_semantics(self.costmap_semantics, "parameter costmap_semantics")
        if not 0.0 <= self.costmap_cost_weight <= MAX_COSTMAP_COST_WEIGHT:
            raise InputError(
                f"parameter costmap_cost_weight: expected a number in [0, {MAX_COSTMAP_COST_WEIGHT:g}] (0: off), got "
                f"{self.costmap_cost_weight}"
            )
        self.robot_model()  # footprint and limits checked now, each error naming its parameter
        self.realism()  # the dynamics and sensor sections likewise
        self.actuation()

    @property
    def control_period_s(self) -> float:
        return 1.0 / self.control_rate_hz

    @property
    def window_cells(self) -> int:
        return int(round(self.grid_window_m / self.grid_resolution))

    @classmethod
    def from_dict(cls, values: dict[str, Any], source: str = "parameters") -> NavParams:
        """Build from a name -> value mapping (see `checked_values`); Nav2's names for our parameters
        (`NAV2_NAMES`) are accepted."""
        return cls(**checked_values(cls, nav2_names(values, source), source))

    @classmethod
    def from_yaml(cls, path: str | Path, node_name: str = NODE_NAME) -> NavParams:
        """Read a ROS2 parameter file: `/**: {ros__parameters: {...}}` (any node name and namespace, the form
        config/nav.yaml uses) and/or `NODE_NAME:` / `/NS/NODE_NAME:`; where several match, the more specific wins,
        as in rcl."""
        path = Path(path)
        doc = load_yaml(path, MAX_PARAMS_FILE_BYTES, "parameter file")
        if not isinstance(doc, dict):
            raise InputError(f"{path}: expected a mapping of node names to 'ros__parameters:'")
        matches = [k for k in doc if k == "/**" or str(k).rsplit("/", 1)[-1] == node_name]
        if not matches:
            raise InputError(f"{path}: expected a '/**:' or '{node_name}:' entry with 'ros__parameters:'")
        values: dict[str, Any] = {}
        for key in sorted(matches, key=lambda k: k != "/**"):  # wildcard first, named entries override it
            entry = doc[key]
            if not isinstance(entry, dict) or not isinstance(entry.get("ros__parameters"), dict):
                raise InputError(f"{path}: entry '{key}': expected a 'ros__parameters:' mapping")
            # merged key by key, sections too (`dynamics.latency_s` is one parameter), as rcl does
            values.update(flatten_sections(entry["ros__parameters"], str(path)))
        values = {k: v for k, v in values.items() if k != "use_sim_time"}
        try:
            return cls.from_dict(values, source=str(path))
        except InputError as exc:  # a value's own check names the parameter; the file is named here once
            raise InputError(exc if str(exc).startswith(str(path)) else f"{path}: {exc}") from exc

    @classmethod
    def for_robot(cls, robot: Any, **values: Any) -> NavParams:
        """The parameters of a bare `RobotModel`: its footprint and limits, the dt `size_horizon` gives it (and a
        control rate of 1/dt), the built-in defaults elsewhere; `values` set any other field."""
        from mnemo_mpc.planning.sizing import size_horizon

        fp = robot.shape
        dt = size_horizon(robot, values.get("horizon_steps", cls.horizon_steps)).dt
        fields = {
            "footprint": "" if fp.is_circle else "[" + ", ".join(f"[{x!r}, {y!r}]" for x, y in fp.vertices) + "]",
            "robot_radius": float(robot.radius),
            "footprint_tolerance": float(robot.footprint_tolerance),
            "safety_margin": float(robot.safety_margin),
            "v_min": float(robot.v_min),
            "v_max": float(robot.v_max),
            "w_max": float(robot.w_max),
            "a_max": float(robot.a_max),
            "alpha_max": float(robot.alpha_max),
            "dt": dt,
            "control_rate_hz": 1.0 / dt,
        }
        return cls(**{**fields, **values})

    def descriptions(self) -> dict[str, str]:
        return {f.name: f.metadata["description"] for f in dataclasses.fields(self)}

    def robot_model(self) -> Any:
        """The `RobotModel` these parameters describe: the footprint polygon (or the circle of robot_radius when
        footprint is empty), its covering-disc tolerance and the limits."""
        from mnemo_mpc.planning.footprint import parse_footprint
        from mnemo_mpc.planning.robot import RobotModel

        try:
            shape = parse_footprint(self.footprint, self.robot_radius)
        except InputError as exc:
            raise InputError(f"parameter {exc}") from exc
        return RobotModel.from_footprint(
            shape,
            safety_margin=self.safety_margin,
            v_min=self.v_min,
            v_max=self.v_max,
            w_max=self.w_max,
            a_max=self.a_max,
            alpha_max=self.alpha_max,
            footprint_tolerance=self.footprint_tolerance,
        )

    def realism(self, level: str = "profile") -> Any:
        """The simulated robot these parameters state (`mnemo_mpc.realism.realism_for`); each bad value an
        InputError naming its parameter."""
        from mnemo_mpc.realism import realism_for

        try:
            return realism_for(self, level)
        except InputError as exc:
            raise InputError(f"parameter {exc}") from exc

    def actuation(self) -> Any:
        """The controller's model of the drive (`mnemo_mpc.nav.actuation.ActuationModel`), None when
        compensate_dynamics is off or the drive is ideal (no latency, no lag: nothing to compensate)."""
        from mnemo_mpc.nav.actuation import ActuationModel

        if not self.compensate_dynamics:
            return None
        try:
            model = ActuationModel(
                self.dynamics_latency_s,
                self.dynamics_lag_v_s,
                self.dynamics_lag_w_s,
                self.dynamics_slip_v,
                self.dynamics_slip_w,
            )
        except InputError as exc:
            raise InputError(f"parameter dynamics.{exc}") from exc
        return None if model.is_identity else model

    def mpc_config(self, real_time: bool = True) -> Any:
        """The MPC these parameters describe. `real_time` (the node, demo, eval): every solve bounded by
        SOLVE_BUDGET of the control period and the fallback as configured; off (`collect`): the iteration cap alone
        and IPOPT for failed solves, so a dataset does not depend on how busy the machine was."""
        from mnemo_mpc.planning.mpc import MPCConfig

        common = {
            "N": self.horizon_steps,
            "dt": self.dt,
            "method": self.sqp_method,
            "qpsol": self.qpsol,
            "max_iter": self.max_iter,
            "start_tolerance_m": 0.5 * self.grid_resolution,  # a lidar-built costmap (MPCConfig.start_tolerance_m)
            # A lidar with a blind sector behind: plans forward only; reversing is the recoveries' (MPCConfig)
            "plan_v_min": 0.0 if self.sensor_fov_deg < 360.0 else None,
            # An occupancy grid has no soft cost: its MPC is built without the term (no parameters, no work)
            "costmap_cost_weight": self.costmap_cost_weight if self.costmap_semantics != OCCUPANCY else 0.0,
        }
        if not real_time:
            return MPCConfig(**common)
        return MPCConfig(
            **common,
            max_time_s=SOLVE_BUDGET * self.control_period_s,
            fallback=self.fallback_solver or None,
            # the SQP and the rest of the tick take the rest of the period (and IPOPT's last iteration may overrun)
            fallback_max_time_s=0.3 * self.control_period_s,
        )

    def controller_config(self, **overrides: Any) -> Any:
        """The controller settings these parameters describe (warm start resolved by the caller: `build`)."""
        from mnemo_mpc.nav.controller import ControllerConfig
        from mnemo_mpc.nav.prediction import PredictionConfig
        from mnemo_mpc.planning.surfaces import SurfaceConfig

        values = {
            "goal_tolerance_m": self.goal_tolerance_m,
            "yaw_goal_tolerance": self.yaw_goal_tolerance,
            "required_movement_m": self.required_movement_radius,
            "progress_timeout_s": self.movement_time_allowance,
            "min_margin_m": self.min_margin_m,
            "unknown_policy": self.unknown_policy,
            "actuation": self.actuation(),
            "sqp_mode": self.sqp_mode,
            "tracking": PredictionConfig() if self.moving_prediction == "track" else None,
            "surfaces": SurfaceConfig(noise_m=self.sensor_noise_m),
        }
        return ControllerConfig(**{**values, **overrides})

    def controller(self, real_time: bool = True) -> Any:
        """The controller these parameters describe, with its warm-start model when the mode uses one."""
        return build(self, real_time=real_time).controller()


def checked_values(cls: type, values: dict[str, Any], source: str) -> dict[str, Any]:
    """`values` for the parameter dataclass `cls`, refusing unknown names and wrong types (ints are accepted as
    floats, as ROS does for YAML like `dt: 1` or `-p control_rate_hz:=50`)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise InputError(f"{source}: unknown parameter(s) {unknown}; expected some of {sorted(fields)}")
    defaults = cls()
    out = {}
    for name, value in values.items():
        expected = type(getattr(defaults, name))
        if expected is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
            raise InputError(
                f"{source}: parameter {name} expected {expected.__name__}, got {type(value).__name__} {value!r}"
            )
        out[name] = value
    return out


def write_default_yaml(path: str | Path) -> None:
    """Regenerate config/nav.yaml from the dataclass defaults (descriptions as comments)."""
    from mnemo_mpc.atomic import atomic_write_text

    p = NavParams()
    lines = [
        "# mnemo_mpc local planner parameters (generated from mnemo_mpc/profile.py: NavParams).",
        "# '/**' applies to the node under any name and namespace (launch namespace:=, -r __ns:=/robot1).",
        "/**:",
        "  ros__parameters:",
    ]
    section = None
    for f in dataclasses.fields(p):
        indent = "    "
        if f.metadata.get("section"):
            if f.metadata["section"] != section:
                section = f.metadata["section"]
                lines.append(f"    {section}:")
            indent = "      "
        value = yaml.safe_dump(getattr(p, f.name), default_flow_style=True).strip().removesuffix("...").strip()
        lines.append(f"{indent}# {f.metadata['description']}")
        lines.append(f"{indent}{ros_name(f).rsplit('.', 1)[-1]}: {value}")
    atomic_write_text(path, "\n".join(lines) + "\n")


@dataclass(frozen=True)
class Profile:
    """What one robot file builds (`build`): the robot, its MPC and its controller settings."""

    params: NavParams
    robot: Any  # RobotModel
    mpc: Any  # MPCConfig
    controller_config: Any  # ControllerConfig (warm_start still "shift"; `controller` resolves it)

    def controller(
        self, warmstart: str | None = None, model: str | None = None, planner: str | None = None, **overrides: Any
    ) -> Any:
        """The Controller, its warm start resolved (`mnemo_mpc.warmstart.runtime.resolve`): `warmstart` / `model`
        override the profile's `warm_start` / `warm_start_model` (None: the profile's; "auto": hybrid when a shipped
        model fits the robot, else shift); `overrides` set any other ControllerConfig field. `planner` overrides the
        profile's `local_planner`: a peer ("mppi", "dwa": `mnemo_mpc.peers.make_controller`) is the same Controller
        on the same robot, horizon and settings with its planner in the SQP's place, and has no warm start."""
        from mnemo_mpc.nav.controller import Controller
        from mnemo_mpc.warmstart.runtime import resolve

        p = self.params
        name = planner if planner is not None else p.local_planner
        if name != "mpc":
            from mnemo_mpc.peers import make_controller

            return make_controller(name, self.robot, self.mpc, dataclasses.replace(self.controller_config, **overrides))
        mode = warmstart if warmstart is not None else p.warm_start
        mode, provider = resolve(
            None if mode == "auto" else mode, model or p.warm_start_model or None, self.robot, self.mpc.N, self.mpc.dt
        )
        config = dataclasses.replace(self.controller_config, warm_start=mode, **overrides)
        return Controller(self.robot, self.mpc, config, provider)

    def to_dict(self) -> dict[str, Any]:
        return {
            "robot": dataclasses.asdict(self.robot),
            "mpc": dataclasses.asdict(self.mpc),
            "controller": dataclasses.asdict(self.controller_config),
        }


def build(params: NavParams | None = None, *, real_time: bool = True) -> Profile:
    """The robot, MPC and controller configuration of `params` (None: the built-in robot, `NavParams()`), the one
    builder of the node and every command (module docstring). Checks that the horizon reaches past the stopping
    distance and stays on the planning window (`mnemo_mpc.planning.sizing`), naming the parameter to change."""
    from mnemo_mpc.planning.sizing import check_horizon

    params = params if params is not None else NavParams()
    robot = params.robot_model()
    mpc = params.mpc_config(real_time)
    try:
        check_horizon(robot, mpc.N, mpc.dt, params.grid_window_m)
    except InputError as exc:
        raise InputError(f"parameters horizon_steps / dt / grid_window_m: {exc}") from exc
    # Real time: the own path is planned off the control step (nav.own_path), as a plan can take longer than a period.
    return Profile(params, robot, mpc, params.controller_config(plan_own_path_async=real_time))
