"""The simulator node's logic without ROS: a PyBullet `Simulator` stepped at `sim_rate_hz` in simulated time, the last
`cmd_vel` held until `cmd_timeout_s` (then a stop), and per step the messages to publish (/clock, odometry, the local
grid, the scan) plus what happened (collision started, goal reached, time limit).

The node (`mnemo_mpc.ros.sim_node`) only moves messages and paces steps on the wall clock; the tests drive this class
directly with rosbags message classes.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mnemo_mpc.nav.recovery import wrap_angle
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.sim_convert import (
    SimMessageTypes,
    command_from_twist,
    make_clock,
    make_laser_scan,
    make_odometry,
    path_states,
)
from mnemo_mpc.ros.sim_params import SimNodeParams

# A localiser stamps map -> odom this far ahead (AMCL's transform_tolerance, default 1.0 s; slam_toolbox's
# transform_timeout): the transform holds until the next correction, and a listener looking it up at its sensor
# data's time, just after a /clock tick that arrived before the /tf, must find it. Stamped at the simulated time
# instead, the planner's lookups fell 0.12 s past the newest sample under load (beyond Nav2's transform_tolerance 0.1).
LOCALISER_POST_DATE_S = 1.0


@dataclass
class SimOutputs:
    """One step's messages (publish /clock first, so stamps are never ahead of a listener's clock) and events."""

    time_s: float
    clock: Any
    odom: Any
    grid: Any
    scan: Any
    events: list[str] = field(default_factory=list)  # lines for the ROS log
    exit_code: int | None = None  # the node should exit with this status (goal with exit_on_goal, time limit)
    # The localiser updated the map -> odom transform: publish goal and plan again (`goal_msg`, `path_msg`)
    frame_changed: bool = False
    # With map_frame_id: /tf's (parent, child, (x, y, yaw), stamp), map -> odom (the localiser's) and odom -> base
    transforms: list[tuple[str, str, np.ndarray, float]] = field(default_factory=list)


class SimAdapter:
    """World + simulator + command hold. Times are simulated seconds since the episode started (/clock starts at 0)."""

    def __init__(self, params: SimNodeParams, types: SimMessageTypes, robot: Any = None, world: Any = None) -> None:
        """`world` (a `World`) replaces the one the parameters name; `robot` (a `RobotModel`) the profile of
        `robot_params` (its lidar range then stays the default's)."""
        from mnemo_mpc.sim.profile import closed_loop_setup
        from mnemo_mpc.sim.simulator import SimConfig, Simulator

        self.params, self.types = params, types
        sensor_range, nav = None, None
        if robot is None:
            nav = params.nav_params()
            robot, sensor_range = params.robot_profile()
        self.robot = robot
        self.world = world if world is not None else params.world(robot)
        self.goal = np.asarray(self.world.goal, dtype=float)
        self.global_path: np.ndarray | None = None
        if params.publish_plan:
            from mnemo_mpc.planning.global_path import plan_global_path

            # As the episode runner does: the path on the known map; InfeasibleProblemError when there is none.
            self.global_path = plan_global_path(self.world.grid, self.world.start[:2], self.goal[:2], self.robot)
        # A step is exactly 1 / sim_rate_hz, in a whole number of physics substeps at physics_hz or faster (the rule
        # of SimConfig.for_robot); simulated time is counted in integer nanoseconds, so stamps never drift and a time
        # just below a whole second cannot round to the wrong second.
        self.substeps = max(1, math.ceil(params.physics_hz / params.sim_rate_hz - 1e-9))
        self.step_ns = round(1e9 / params.sim_rate_hz)
        self.time_ns = 0
        # The profile's body, lidar range, local window and realism (as `demo --params` simulates it), stepped at
        # this rate.
        setup = closed_loop_setup(nav or robot, sensor_range_m=sensor_range, realism=params.realism)
        self.sim = Simulator(
            SimConfig.for_robot(
                robot,
                control_dt=self.step_s,
                sensor_range_m=sensor_range,
                min_physics_hz=params.physics_hz,
                seed=params.seed,
                local_grid=setup.sim.local_grid,
                realism=setup.realism,
            )
        )
        self.obs = self.sim.reset(self.world)
        self._frame = self.obs.map_from_odom  # the localiser's transform goal and plan were last published through
        self._cmd = (0.0, 0.0)
        self._cmd_time: float | None = None  # simulated time the held command arrived
        self._timed_out = True
        self._in_contact = bool(self.obs.collision)
        self.collisions = int(self._in_contact)
        self.goal_time_s: float | None = None
        self.goal_wall_s: float | None = None
        self.first_cmd_time_s: float | None = None
        self.commands = 0  # cmd_vel messages received
        self._first_msg_wall: float | None = None  # wall time of the first and the last of them
        self._last_msg_wall: float | None = None
        self.path_length_m = 0.0
        self.steps = 0
        self._wall_start: float | None = None

    @property
    def step_s(self) -> float:
        """Simulated seconds per step (1 / sim_rate_hz, to the nanosecond)."""
        return self.step_ns / 1e9

    @property
    def time_s(self) -> float:
        """Simulated seconds since the start (/clock)."""
        return self.time_ns / 1e9

    # --- inputs ----------------------------------------------------------------------------------------------------
    def on_cmd_vel(self, msg: Any) -> None:
        """Hold (v, w) from a Twist or TwistStamped; InputError (dropped by the node) when not finite."""
        self._cmd = command_from_twist(msg)
        self._cmd_time = self.time_s
        self.commands += 1
        self._last_msg_wall = time.perf_counter()
        if self._first_msg_wall is None:
            self._first_msg_wall = self._last_msg_wall
        if self.first_cmd_time_s is None and (self._cmd[0] != 0.0 or self._cmd[1] != 0.0):
            self.first_cmd_time_s = self.time_s

    def command_timed_out(self) -> bool:
        return self._cmd_time is None or self.time_s - self._cmd_time > self.params.cmd_timeout_s + 1e-9

    def command(self) -> tuple[float, float]:
        """The command the robot executes now: the last one, or a stop once it is older than cmd_timeout_s."""
        return (0.0, 0.0) if self.command_timed_out() else self._cmd

    # --- outputs ---------------------------------------------------------------------------------------------------
    def goal_msg(self) -> Any:
        """The goal in frame_id: through the localiser's latest map -> odom transform when odometry drifts; with
        map_frame_id, the world's goal in that frame as it is (/tf carries the transform)."""
        b, frame = self.types.base, self.params.map_frame_id
        header = convert.make_header(b, self.time_s, frame or self.params.frame_id)
        return b.PoseStamped(
            header=header, pose=convert.make_pose(b, *(self.goal if frame else self.sim.to_odom(self.goal)))
        )

    def path_msg(self) -> Any | None:
        if self.global_path is None:
            return None
        states, frame = path_states(self.global_path), self.params.map_frame_id
        states = states if frame else self.sim.to_odom(states)
        return convert.make_path(self.types.base, states, self.time_s, frame or self.params.frame_id)

    def transforms(self) -> list[tuple[str, str, np.ndarray, float]]:
        """/tf now, with map_frame_id: map -> odom, the localiser's estimate (`Observation.map_from_odom`, identity
        for odometry that does not drift), stamped LOCALISER_POST_DATE_S ahead as AMCL stamps it, and odom ->
        base_link, the odometry's pose, stamped now; else none."""
        p, obs, t = self.params, self.obs, self.time_s
        if not p.map_frame_id:
            return []
        fix = obs.map_from_odom if obs.map_from_odom is not None else np.zeros(3)
        return [
            (p.map_frame_id, p.frame_id, np.array(fix, float), t + LOCALISER_POST_DATE_S),
            (p.frame_id, p.base_frame_id, obs.pose[:3].copy(), t),
        ]

    def observation(self, events: list[str] | None = None, exit_code: int | None = None) -> SimOutputs:
        """Messages for the current observation, stamped with the simulated time."""
        p, t, obs, lidar = self.params, self.time_s, self.obs, self.sim.config.lidar
        return SimOutputs(
            time_s=t,
            clock=make_clock(self.types, t),
            odom=make_odometry(self.types, obs.pose, obs.velocity, t, p.frame_id, p.base_frame_id),
            grid=convert.make_grid_msg(self.types.base, obs.local_grid, t, p.frame_id),
            scan=make_laser_scan(
                self.types,
                obs.scan.angles,
                obs.scan.ranges,
                obs.scan.hit,
                lidar.range_min_m,
                lidar.range_max_m,
                t,
                p.base_frame_id,
                scan_time_s=self.step_s,
            ),
            events=events or [],
            exit_code=exit_code,
            frame_changed=self._frame_changed() and not p.map_frame_id,  # in map: /tf carries the fix
            transforms=self.transforms(),
        )

    def _frame_changed(self) -> bool:
        fix = self.obs.map_from_odom
        changed = fix is not None and (self._frame is None or not np.array_equal(fix, self._frame))
        if changed:
            self._frame = fix.copy()
        return changed

    def distance_to_goal(self) -> float:
        return float(np.hypot(*(self.goal[:2] - self._true_pose()[:2])))

    def _true_pose(self) -> np.ndarray:
        return self.obs.pose if self.obs.true_pose is None else self.obs.true_pose

    # --- stepping --------------------------------------------------------------------------------------------------
    def step(self) -> SimOutputs:
        """Advance one step (1 / sim_rate_hz simulated seconds) under the held command; messages and events."""
        p = self.params
        if self._wall_start is None:
            self._wall_start = time.perf_counter()
        events: list[str] = []
        v, w = self.command()
        timed_out = self.command_timed_out()
        if timed_out and not self._timed_out and self._cmd != (0.0, 0.0):
            events.append(f"cmd_vel older than cmd_timeout_s={p.cmd_timeout_s} s at t={self.time_s:.2f} s: stopping")
        self._timed_out = timed_out
        before = self._true_pose()[:2].copy()
        self.obs = self.sim.step(v, w, self.step_s)
        self.time_ns += self.step_ns
        self.steps += 1
        self.path_length_m += float(np.hypot(*(self._true_pose()[:2] - before)))
        t = self.time_s
        if self.obs.collision and not self._in_contact:
            self.collisions += 1
            events.append(
                f"collision at t={t:.2f} s, pose ({self._true_pose()[0]:.2f}, {self._true_pose()[1]:.2f}), "
                f"clearance {self.sim.clearance():.3f} m"
            )
        self._in_contact = bool(self.obs.collision)
        exit_code = None
        dist = self.distance_to_goal()
        if self.goal_time_s is None and dist <= p.goal_tolerance_m:
            self.goal_time_s = t
            self.goal_wall_s = time.perf_counter() - self._wall_start
            events.append(
                f"goal reached at t={t:.2f} s simulated ({self.goal_wall_s:.2f} s wall): {dist:.3f} m from the goal, "
                f"driven {self.path_length_m:.2f} m, {self.collisions} collision(s)"
            )
            if p.exit_on_goal:
                exit_code = 0
        if exit_code is None and self.goal_time_s is None and p.time_limit_s > 0 and t >= p.time_limit_s - 1e-9:
            events.append(f"time limit {p.time_limit_s} s reached, {dist:.2f} m from the goal")
            exit_code = 1
        return self.observation(events, exit_code)

    def summary(self) -> dict[str, Any]:
        """JSON-ready episode summary (times in seconds; `wall` from the first step)."""
        wall = time.perf_counter() - self._wall_start if self._wall_start is not None else 0.0
        t = self.time_s
        w = self.world
        return {
            "world": w.name,
            "seed": int(w.seed),
            "kind": w.kind,
            "map_yaml": self.params.map_yaml or None,
            "start": [round(float(v), 4) for v in w.start],
            "goal": [round(float(v), 4) for v in w.goal],
            "success": self.goal_time_s is not None,
            "time_to_goal_s": None if self.goal_time_s is None else round(self.goal_time_s, 3),
            "wall_time_to_goal_s": None if self.goal_wall_s is None else round(self.goal_wall_s, 3),
            "first_command_s": None if self.first_cmd_time_s is None else round(self.first_cmd_time_s, 3),
            # The planner's achieved command rate per wall-clock second (at real_time_factor 1: per simulated one)
            "commands": self.commands,
            "command_rate_hz": self._command_rate(),
            "sim_time_s": round(t, 3),
            "wall_time_s": round(wall, 3),
            "real_time_factor": round(t / wall, 3) if wall > 0 else None,
            "steps": self.steps,
            "collisions": self.collisions,
            "path_length_m": round(self.path_length_m, 4),
            "global_path_length_m": None
            if self.global_path is None
            else round(float(np.sum(np.hypot(*np.diff(self.global_path, axis=0).T))), 4),
            "final_dist_to_goal_m": round(self.distance_to_goal(), 4),
            # the true heading's error to the goal's at the end (a goal checker with a yaw tolerance aligns it)
            "final_heading_error_rad": round(abs(float(wrap_angle(self._true_pose()[2] - w.goal[2]))), 4),
            "goal_tolerance_m": self.params.goal_tolerance_m,
            "realism": self.sim.realism.to_dict(),
        }

    def _command_rate(self) -> float | None:
        if self.commands < 2 or self._first_msg_wall is None or self._last_msg_wall is None:
            return None
        span = self._last_msg_wall - self._first_msg_wall
        return round((self.commands - 1) / span, 3) if span > 0 else None

    def close(self) -> None:
        self.sim.close()


__all__ = ["SimAdapter", "SimOutputs"]
