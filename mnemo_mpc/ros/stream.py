"""The realistic input stream of the node core (`NavAdapter`), closed loop on a simulated clock (issue 9).

A robot drives in generated worlds (`mnemo_mpc.sim.worlds`, small ones so that episodes end and restart): it
follows the published commands (`RobotModel.step`, the kinematic unicycle) exactly -- or, for a profile whose drive
the node compensates (`compensate_dynamics` with a latency or lags), through that drive: each command acts
`latency_s` after it is published and each velocity follows it as a first-order lag, the model the node inverts
(`nav.actuation`; an exact robot under a node that over-drives it to beat a lag it does not have overshot every goal:
the Jackal reached none of its episodes' goals in `bench node`). Its odometry arrives at
`odom_rate_hz`, the local grid (the world's ground truth cropped with `OccupancyGrid.window` to a
`window_cells`-square window around the robot) at `grid_rate_hz`, and each episode's goal (and, usually, a global
path) once, as ROS 2 messages (rosbags' classes). The clock misbehaves as a real one may: sensor dropouts, and the
sim clock resetting (time going backwards). A share of the episodes (`1 - path_probability`) has no global path, so
the controller plans its own (`nav/own_path.py`).

`mnemo_mpc.ros.hostile` mixes malformed messages into this stream (`HostileScenario`) and checks the node's
contract on it (`run_fuzz`, which `mnemo-mpc bench node` times).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from mnemo_mpc.nav.actuation import CommandHistory
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.profile import NavParams
from mnemo_mpc.ros import convert
from mnemo_mpc.ros.sim_convert import SimMessageTypes, make_odometry, path_states

TOPICS = ("grid", "odometry", "goal", "path")
# header stamp -> arrival, per topic: each stream's stamps are in order, and a hostile message of a topic is stamped
# like the stream it imitates (unless its stamp is the point)
LATENCY_S = {"odometry": 0.005, "grid": 0.05, "goal": 0.0, "path": 0.0}
REST_M_S = 1e-3  # a lagging drive's velocity decays to 0 and never reaches it: below this it is at rest


@dataclass(frozen=True)
class StreamConfig:
    """One run of the stream. The run stops once `messages` messages were delivered (or after `max_ticks`)."""

    seed: int = 0
    messages: int = 10_000
    max_ticks: int = 1_000_000
    odom_rate_hz: float = 50.0
    grid_rate_hz: float = 10.0
    window_cells: int = 120  # local grid: window_cells x window_cells at the world's resolution (0.05 m)
    clock_resets: int = 2  # sim clock jumps backwards
    dropouts: int = 4  # odometry and/or grid stop for 0.7-2 s
    # an episode's goal comes with a global path; without one the controller plans its own path (nav/own_path.py:
    # the code a far goal made unbounded), so both kinds of episode run
    path_probability: float = 0.6
    episode_s: float = 40.0  # a new world after this much sim time without reaching the goal
    world_size_m: float = 8.0
    start_s: float = 1000.0  # sim clock at the first tick

    def __post_init__(self) -> None:
        from mnemo_mpc.errors import InputError

        if self.messages < 1 or self.max_ticks < 1 or self.window_cells < 8:
            raise InputError(
                f"{type(self).__name__}: expected messages >= 1, max_ticks >= 1, window_cells >= 8, got "
                f"{self.messages}, {self.max_ticks}, {self.window_cells}"
            )


@dataclass
class Delivery:
    """One message handed to a callback at `recv_s` (sim time)."""

    topic: str  # one of TOPICS
    msg: Any
    recv_s: float
    variant: str  # "clean" or the hostile variant's name
    label: str  # "clean" here; the hostile mix's labels: `mnemo_mpc.ros.hostile.LABELS`


# --- messages ---------------------------------------------------------------------------------------------------------
class MessageFactory:
    """Builds well-formed input messages (rosbags' classes: the real ROS 2 definitions, CDR-serialisable)."""

    def __init__(self, frame_id: str, distro: str = "ROS2_HUMBLE") -> None:
        from rosbags.typesys import Stores, get_typestore

        self.store = get_typestore(getattr(Stores, distro))
        self.sim_types = SimMessageTypes.from_rosbags(distro)
        self.types = self.sim_types.base
        self.frame_id = frame_id

    def header(self, stamp_s: float, frame_id: str | None = None) -> Any:
        return convert.make_header(self.types, stamp_s, self.frame_id if frame_id is None else frame_id)

    def grid(self, grid: OccupancyGrid, stamp_s: float) -> Any:
        msg = convert.make_grid_msg(self.types, grid, stamp_s, self.frame_id)
        msg.info.resolution = float(np.float32(msg.info.resolution))  # a float32 field: what a subscriber reads
        return msg

    def odometry(self, pose: np.ndarray, velocity: np.ndarray, stamp_s: float) -> Any:
        return make_odometry(self.sim_types, pose, velocity, stamp_s, self.frame_id, "base_link")

    def goal(self, goal: np.ndarray, stamp_s: float) -> Any:
        return self.types.PoseStamped(header=self.header(stamp_s), pose=convert.make_pose(self.types, *goal))

    def path(self, points: np.ndarray, stamp_s: float) -> Any:
        return convert.make_path(self.types, path_states(points), stamp_s, self.frame_id)

    def roundtrip(self, msg: Any) -> Any:
        """The message as a subscriber receives it: CDR-serialised and read back (float32 fields rounded...)."""
        return self.store.deserialize_cdr(bytes(self.store.serialize_cdr(msg, msg.__msgtype__)), msg.__msgtype__)


# --- the world the robot drives in ----------------------------------------------------------------------------------
@dataclass
class Episode:
    world: Any  # sim.worlds.World
    goal: np.ndarray
    path: np.ndarray | None
    started_s: float
    occupied: np.ndarray  # the world's occupied mask (collisions)
    occupied_xy: np.ndarray  # centres of occupied cells (goals "inside obstacles")


@dataclass
class ScenarioState:
    pose: np.ndarray
    velocity: np.ndarray  # what the robot does: the last published command (through the drive, when it lags)
    episode: Episode
    grid: OccupancyGrid  # the current local window


# --- the scenario ---------------------------------------------------------------------------------------------------
class Scenario:
    """The realistic message stream, closed loop through the published commands (module docstring). A subclass adds
    messages of its own (`_injected`); a goal or path it sends is replaced by the episode's when `_restore_at` (a
    tick) comes."""

    def __init__(self, cfg: StreamConfig, params: NavParams, factory: MessageFactory | None = None) -> None:
        from mnemo_mpc.sim.worlds import WorldConfig

        self.cfg, self.params = cfg, params
        self.rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, int(round(params.control_rate_hz * 1000))]))
        self.factory = factory or MessageFactory(params.frame_id)
        self.robot = params.robot_model()
        self.period_s = 1.0 / params.control_rate_hz
        self.drive = params.actuation()  # None: the robot follows the commands exactly
        self._sent = CommandHistory(self.drive) if self.drive is not None else None
        self.now = cfg.start_s
        self.world_config = WorldConfig(
            size_m=(cfg.world_size_m, cfg.world_size_m),
            min_start_goal_m=0.4 * cfg.world_size_m,
            max_start_goal_m=1.2 * cfg.world_size_m,
        )
        self.episodes = 0
        self.own_path_episodes = 0  # episodes whose goal came without a global path
        self.goals_reached = 0
        self.collisions = 0
        self.clock_resets = 0
        self.tick = 0
        self._next_odom = self.now
        self._next_grid = self.now
        self._idle_ticks = 0
        self._restore_at: int | None = None
        self._send_goal = True
        self._dropout_until = {"odometry": -math.inf, "grid": -math.inf}
        # Rare events at random ticks of the run (its length estimated from the message rates). A subclass's own are
        # drawn first (`_schedule`): the order the recorded runs' seeds drew them in (results/*.json).
        per_tick = self._messages_per_tick()
        horizon = int(min(cfg.max_ticks, cfg.messages / per_tick)) + 21
        self._schedule(horizon)
        self._reset_at = set(self.rng.integers(20, horizon, cfg.clock_resets).tolist())
        self._dropout_at = set(self.rng.integers(10, horizon, cfg.dropouts).tolist())
        self.state = self._new_episode(np.zeros(2))

    def _messages_per_tick(self) -> float:
        """Mean messages per control period (the sensor streams'; a subclass adds its own)."""
        return self.period_s * (self.cfg.odom_rate_hz + self.cfg.grid_rate_hz)

    def _schedule(self, horizon: int) -> None:
        """Draw a subclass's rare events over the run's estimated `horizon` ticks (none here)."""

    # --- episodes ---
    def _new_episode(self, velocity: np.ndarray) -> ScenarioState:
        from mnemo_mpc.errors import MnemoError
        from mnemo_mpc.planning.global_path import plan_global_path
        from mnemo_mpc.sim.worlds import generate_world

        world = generate_world(self.cfg.seed * 100_003 + self.episodes, self.world_config)
        self.episodes += 1
        path = None
        # 1 - path_probability of the episodes, evenly spread from the first one on, have no global path
        share = 1.0 - self.cfg.path_probability
        k = self.episodes - 1
        if math.floor(k * share) == math.floor((k - 1) * share):
            try:
                path = plan_global_path(world.grid, world.start[:2], world.goal[:2], self.robot)
            except MnemoError:
                path = None
            if path is not None and self.rng.random() < 0.3:  # sparse, ~1 m between waypoints (issue 9, defect 8)
                path = np.vstack([path[::20], path[-1:]])
        self.own_path_episodes += path is None
        mask = world.grid.occupied_mask()
        rows, cols = np.nonzero(mask)
        occupied = world.grid.grid_to_world(np.column_stack([cols + 0.5, rows + 0.5]))
        episode = Episode(world, np.asarray(world.goal, float), path, self.now, mask, occupied)
        pose = np.asarray(world.start, dtype=float)
        self._send_goal = True
        self._idle_ticks = 0
        return ScenarioState(pose, np.asarray(velocity, float), episode, self._window(world.grid, pose))

    def _window(self, grid: OccupancyGrid, pose: np.ndarray) -> OccupancyGrid:
        n = self.cfg.window_cells
        return grid.window(pose[:2], (n, n))

    # --- one control period ---
    def deliveries(self) -> list[Delivery]:
        """Messages arriving in (now - T, now], in arrival order. Applies clock events at the period's start."""
        cfg, rng, f, s = self.cfg, self.rng, self.factory, self.state
        t_end = self.now
        t_start = t_end - self.period_s
        out: list[Delivery] = []
        if self.tick in self._reset_at:  # the sim clock restarts: time goes backwards
            jump = float(rng.uniform(5.0, 300.0))
            self._shift_clock(-jump)
            t_end, t_start = self.now, self.now - self.period_s
            self.clock_resets += 1
        if self.tick in self._dropout_at:
            which = ("odometry", "grid", "both")[int(rng.integers(3))]
            until = t_end + float(rng.uniform(0.7, 2.0))
            for topic in ("odometry", "grid") if which == "both" else (which,):
                self._dropout_until[topic] = until
        # realistic stream
        while self._next_odom <= t_end:
            t = max(self._next_odom, t_start)
            if t > self._dropout_until["odometry"]:
                out.append(
                    Delivery("odometry", f.odometry(s.pose, s.velocity, t - LATENCY_S["odometry"]), t, "clean", "clean")
                )
            self._next_odom += 1.0 / cfg.odom_rate_hz
        while self._next_grid <= t_end:
            t = max(self._next_grid, t_start)
            if t > self._dropout_until["grid"]:
                s.grid = self._window(s.episode.world.grid, s.pose)
                out.append(Delivery("grid", f.grid(s.grid, t - LATENCY_S["grid"]), t, "clean", "clean"))
            self._next_grid += 1.0 / cfg.grid_rate_hz
        if self._send_goal or (self._restore_at is not None and self.tick >= self._restore_at):
            # without a global path the episode sends an empty one: it clears a hostile path still held
            path = s.episode.path if s.episode.path is not None else np.zeros((0, 2))
            out.append(Delivery("path", f.path(path, t_end), t_end, "clean", "clean"))
            out.append(Delivery("goal", f.goal(s.episode.goal, t_end), t_end, "clean", "clean"))
            self._send_goal, self._restore_at = False, None
        out.extend(self._injected(t_start, t_end))
        out.sort(key=lambda d: d.recv_s)
        return out

    def _injected(self, t_start: float, t_end: float) -> list[Delivery]:
        """A subclass's own messages arriving in (t_start, t_end] (none here: the realistic stream alone)."""
        return []

    def _shift_clock(self, delta: float) -> None:
        self.now = max(10.0, self.now + delta)
        self._next_odom = self._next_grid = self.now - self.period_s
        self._dropout_until = {"odometry": -math.inf, "grid": -math.inf}

    def advance(self, command: np.ndarray | None) -> None:
        """The robot follows the published command (kept when nothing is published) for one period."""
        s = self.state
        if self._sent is None:
            if command is not None:
                s.velocity = np.asarray(command, dtype=float).copy()
            s.pose = self.robot.step(s.pose, s.velocity, self.period_s)
        else:  # the drive the node inverts, as the node's own prediction models it (`CommandHistory.predict`)
            if command is not None:
                self._sent.record(self.now, command)
            s.pose, body = self._sent.predict(s.pose, s.velocity, self.now, self.now + self.period_s)
            s.velocity = self._sent.model.measured_twist(body)  # what its odometry reports
        s.pose[2] = math.atan2(math.sin(s.pose[2]), math.cos(s.pose[2]))
        self.now += self.period_s
        self.tick += 1
        g = s.episode.world.grid
        rc = g.world_to_cell(s.pose[:2])
        # The robot's centre in a wall: possible when an accepted odd grid (a reshaped one...) hid it. Not a contract
        # violation, but the episode is over.
        collided = not g.in_bounds(rc) or bool(s.episode.occupied[int(rc[0]), int(rc[1])])
        self.collisions += collided
        near_goal = float(np.hypot(*(s.pose[:2] - s.episode.goal[:2]))) <= self.params.goal_tolerance_m
        at_rest = near_goal and not np.any(np.abs(s.velocity) > (REST_M_S if self.drive is not None else 0.0))
        self._idle_ticks = self._idle_ticks + 1 if at_rest else 0
        timed_out = not 0.0 <= self.now - s.episode.started_s <= self.cfg.episode_s  # or the clock went back
        if self._idle_ticks >= 3 or timed_out or collided:
            self.goals_reached += int(self._idle_ticks >= 3)
            self.state = self._new_episode(s.velocity)
