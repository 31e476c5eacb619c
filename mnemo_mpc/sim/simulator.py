"""Headless PyBullet simulator for closed-loop navigation: world geometry, the differential-drive robot, a 2-D lidar
and the fused local occupancy grid the MPC plans on.

    from mnemo_mpc.sim.worlds import generate_world
    from mnemo_mpc.sim import SimConfig, Simulator

    with Simulator(SimConfig()) as sim:
        obs = sim.reset(generate_world(seed=3))
        while not done:
            obs = sim.step(v, w)          # one control period (SimConfig.control_dt, default 0.1 s)
            obs.pose, obs.velocity, obs.local_grid, obs.collision, obs.time_s

Physics runs in DIRECT mode at `physics_hz` with a fixed substep; a control step holds (v, w) for
round(dt * physics_hz) substeps. Collisions come from the physics engine: after every substep the robot's contact
points with the world bodies (`getContactPoints`) at or below `collision_tolerance_m` separation.

The robot body is the profile's (`SimConfig.for_robot(robot)`): unless `SimConfig.urdf_path` names one, a body other
than the default disc gets its URDF generated (`mnemo_mpc.sim.robot.write_robot_urdf`: a cylinder, a box or the
footprint's prism mesh) into a temporary folder that lives as long as the simulator. Contacts and `clearance` are
then those of the real chassis: its collision shape is the footprint, so the engine's closest-point distance is the
footprint polygon's distance to the obstacles (tests/test_footprint_integration.py checks it against
`Footprint.world_signed_distance`).

Moving obstacles (`World.moving`) are kinematic bodies set to their pose at the end of each substep before the
physics runs, so the lidar sees them and a contact with one is a collision like any other. Each collision gets a
cause: "robot" when the robot was driving into the obstacle -- its own velocity (measured before the substep) has a
component above `robot_caused_speed_m_s` against the contact normal, i.e. towards the obstacle -- and "obstacle"
otherwise (the robot stood still, or moved away or along, and the obstacle ran into it). A contact with the static
world is always "robot": walls do not move.

A less obedient robot (`SimConfig.realism`, `mnemo_mpc.sim.realism`): commands act after a latency, through a lagging,
saturating drive, and the body slips; the controller is handed the odometry pose and twist (`Observation.pose`,
`.velocity`, in the drifting odom frame) and the local grid fused in that frame, with the localiser's map -> odom
transform (`Observation.map_from_odom`, `Simulator.to_odom`) for goals and paths, while collisions, clearance and the
episode's outcome use the true pose (`Observation.true_pose`). With the ideal realism (the default) every step is
exactly the ideal robot's.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from mnemo_mpc.errors import InputError, MnemoError
from mnemo_mpc.planning.grid import OccupancyGrid
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim.lidar import Lidar, LidarConfig, LidarScan
from mnemo_mpc.sim.local_grid import LocalGrid, LocalGridConfig
from mnemo_mpc.sim.realism import Drive, Realism
from mnemo_mpc.sim.robot import DiffDriveConfig, DiffDriveRobot, diff_drive_config, write_robot_urdf
from mnemo_mpc.sim.world import StaticGeometryConfig, build_moving_obstacles, build_static_geometry
from mnemo_mpc.sim.worlds import World

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimConfig:
    physics_hz: float = 240.0  # PyBullet's default substep
    control_dt: float = 0.1  # 10 Hz control
    seed: int = 0  # lidar noise stream; reset(world) reseeds it with (seed, world.seed)
    collision_tolerance_m: float = 0.0  # a contact with separation <= this is a collision
    robot_caused_speed_m_s: float = 0.02  # approach speed along the contact normal above which the robot caused it
    # A moving obstacle touches the robot at separation <= this: PyBullet resolves a kinematic body's contact with
    # the chassis at a small positive separation (measured ~7e-5 m for two cylinders), never at <= 0.
    moving_contact_tolerance_m: float = 1e-3
    robot: DiffDriveConfig = field(default_factory=DiffDriveConfig)
    lidar: LidarConfig = field(default_factory=LidarConfig)
    local_grid: LocalGridConfig = field(default_factory=LocalGridConfig)
    geometry: StaticGeometryConfig = field(default_factory=StaticGeometryConfig)
    # The robot's URDF; None: the shipped one for the default body, else one generated from `robot` (module docstring).
    urdf_path: str | None = None
    realism: Realism = field(default_factory=Realism)  # the ideal robot unless a level asks for less (module docstring)

    def __post_init__(self) -> None:
        if not self.physics_hz > 0 or not self.control_dt > 0:
            raise InputError(
                f"SimConfig: expected physics_hz > 0 and control_dt > 0, got {self.physics_hz}, {self.control_dt}"
            )

    @classmethod
    def for_robot(
        cls,
        robot: RobotModel,
        *,
        control_dt: float = 0.1,
        sensor_range_m: float | None = None,
        min_physics_hz: float = 240.0,
        **overrides: object,
    ) -> SimConfig:
        """The simulator for a robot profile: its body (`diff_drive_config(robot)`, URDF generated on start), the
        control period (the MPC's dt), the lidar's range (the profile's `sensor_range_m`; None keeps LidarConfig's)
        and a physics rate of at least `min_physics_hz` that divides the control period into whole substeps (a
        command is held exactly dt). The default robot at dt 0.1 s gets `SimConfig()` exactly."""
        if not (math.isfinite(control_dt) and control_dt > 0):
            raise InputError(f"SimConfig.for_robot control_dt: expected seconds > 0, got {control_dt}")
        substeps = max(1, math.ceil(control_dt * min_physics_hz - 1e-9))
        fields: dict[str, object] = {
            "physics_hz": substeps / control_dt,
            "control_dt": float(control_dt),
            "robot": diff_drive_config(robot),
        }
        if sensor_range_m is not None:
            fields["lidar"] = LidarConfig(range_max_m=float(sensor_range_m))
        fields.update(overrides)
        return cls(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True, eq=False)
class Observation:
    """What the robot knows after a step. `collision` is True if the chassis touched an obstacle during the step
    (`Simulator.collided` stays True for the rest of the episode)."""

    pose: np.ndarray  # (3,) x, y, yaw in the map frame: what the robot knows (odometry + localiser; exact if ideal)
    velocity: np.ndarray  # (2,) measured v (m/s along the heading), w (rad/s): the odometry's twist
    local_grid: OccupancyGrid  # robot-centred fused window, origin moves with the robot
    scan: LidarScan
    collision: bool
    time_s: float
    step: int
    collision_cause: str | None = None  # "robot" or "obstacle" when `collision` (see the module docstring)
    true_pose: np.ndarray | None = None  # (3,) the ground truth (the same as `pose` for the ideal robot)
    # The localiser's map -> odom transform (x, y, yaw) when `pose` is odometry (mnemo_mpc.sim.realism); None: the
    # map frame itself (ideal). Goals and paths in the map frame reach the controller through it (`Simulator.to_odom`).
    map_from_odom: np.ndarray | None = None


@dataclass
class StepTiming:
    """Wall-clock seconds of the last step, by stage."""

    physics_s: float = 0.0
    lidar_s: float = 0.0
    grid_s: float = 0.0


class Simulator:
    """One PyBullet DIRECT client. `reset(world)` (re)builds the scene; `step(v, w)` advances one control period."""

    def __init__(self, config: SimConfig | None = None) -> None:
        import pybullet as p

        self._p = p
        self.config = config or SimConfig()
        self.client = p.connect(p.DIRECT)
        if self.client < 0:
            raise MnemoError("Simulator: could not start a PyBullet DIRECT client")
        self.world: World | None = None
        self.robot: DiffDriveRobot | None = None
        self.world_bodies: list[int] = []
        self.moving_bodies: list[int] = []
        self.collision_causes: dict[str, int] = {"robot": 0, "obstacle": 0}  # steps in contact, by cause
        self.lidar: Lidar | None = None
        self.local_grid = LocalGrid(self.config.local_grid)
        self.time_s = 0.0
        self.steps = 0
        self.collided = False
        self.timing = StepTiming()
        self._substep = 1.0 / self.config.physics_hz
        self.realism = self.config.realism
        self._ideal = self.realism.is_ideal
        # odometry drifts and the localiser fixes it: the controller's frame is `odom`, not the map
        self._drifts = not self._ideal and self.realism.localization_period_s > 0
        self.drive = Drive(self.realism, np.random.default_rng(0))
        self._lidar_config = self.realism.lidar(self.config.lidar)
        self._urdf_dir: str | None = None
        self.urdf_path = self._robot_urdf()

    def _robot_urdf(self) -> str | None:
        """The URDF to load (module docstring): the configured one, None for the shipped default, or one generated
        for `config.robot` into a temporary folder removed by `close`."""
        c = self.config
        if c.urdf_path is not None or c.robot == DiffDriveConfig():
            return c.urdf_path
        from mnemo_mpc.planning.footprint import Footprint

        shape = Footprint(c.robot.footprint) if c.robot.footprint else Footprint.circle(c.robot.radius_m)
        self._urdf_dir = tempfile.mkdtemp(prefix="mnemo_mpc-robot-")
        return str(write_robot_urdf(RobotModel.from_footprint(shape), self._urdf_dir, c.robot))

    # --- lifecycle ------------------------------------------------------------------------------------------------
    def reset(self, world: World, start: np.ndarray | None = None) -> Observation:
        """Load `world` (static geometry from its grid), place the robot at `start` (default `world.start`) at rest,
        clear the local grid and take a first scan."""
        p = self._p
        c = self.config
        p.resetSimulation(physicsClientId=self.client)
        p.setGravity(0, 0, 0, physicsClientId=self.client)  # planar robot: nothing falls
        p.setPhysicsEngineParameter(fixedTimeStep=self._substep, physicsClientId=self.client)
        self.world = world
        self.world_bodies = build_static_geometry(self.client, world.grid, c.geometry)
        self.moving_bodies = build_moving_obstacles(self.client, world, c.geometry)
        self.collision_causes = {"robot": 0, "obstacle": 0}
        self.robot = DiffDriveRobot(self.client, c.robot, urdf_path=self.urdf_path)
        pose = np.asarray(world.start if start is None else start, dtype=float)
        if pose.shape != (3,) or not np.all(np.isfinite(pose)):
            raise InputError(f"Simulator.reset start: expected a finite (x, y, yaw), got {pose.tolist()}")
        self.robot.reset(pose)
        self.lidar = Lidar(
            self.client, self._lidar_config, np.random.default_rng(np.random.SeedSequence([c.seed, world.seed]))
        )
        self.drive = Drive(self.realism, np.random.default_rng(np.random.SeedSequence([c.seed, world.seed, 1])))
        self.drive.reset(pose)
        self.local_grid.reset(pose[:2])
        self.time_s, self.steps, self.collided = 0.0, 0, False
        p.performCollisionDetection(physicsClientId=self.client)
        cause = self.contact_cause(np.zeros(2))
        self.collided = cause is not None
        return self._observe(cause)

    def close(self) -> None:
        if self.client >= 0:
            self._p.disconnect(physicsClientId=self.client)
            self.client = -1
        if getattr(self, "_urdf_dir", None) is not None:
            shutil.rmtree(self._urdf_dir, ignore_errors=True)
            self._urdf_dir = None

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: pybullet may already be gone
            pass

    # --- stepping -------------------------------------------------------------------------------------------------
    def step(self, v: float, w: float, dt: float | None = None) -> Observation:
        """Hold (v, w) for `dt` seconds (default `control_dt`), then scan and fuse the local grid."""
        if self.robot is None:
            raise MnemoError("Simulator.step: call reset(world) first")
        v, w = float(v), float(w)
        if not (math.isfinite(v) and math.isfinite(w)):
            raise InputError(f"Simulator.step: expected finite (v, w), got ({v}, {w})")
        dt = self.config.control_dt if dt is None else float(dt)
        if not dt > 0:
            raise InputError(f"Simulator.step dt: expected > 0 s, got {dt}")
        n_sub = max(1, int(round(dt * self.config.physics_hz)))
        t0 = time.perf_counter()
        cause: str | None = None
        if not self._ideal:
            self.drive.send(v, w, self.time_s)
        for i in range(n_sub):
            t_sub = self.time_s + (i + 1) * self._substep
            self._move_obstacles(t_sub)
            v_world = np.zeros(2)
            if self.moving_bodies:  # only a moving obstacle's contact asks who moved
                pose, vel = self.robot.pose(), self.robot.velocity()
                v_world = vel[0] * np.array([math.cos(pose[2]), math.sin(pose[2])])
            body = (v, w) if self._ideal else self.drive.body_velocity(t_sub, self._substep)
            self.robot.command(float(body[0]), float(body[1]), self._substep)
            self._p.stepSimulation(physicsClientId=self.client)
            if not self._ideal:
                self.drive.odometry(float(body[1]), self._substep, t_sub, self.robot.pose())
            now = self.contact_cause(v_world)
            cause = cause or now  # the first contact of the step names its cause
        self.timing.physics_s = time.perf_counter() - t0
        self.time_s += n_sub * self._substep
        self.steps += 1
        self.collided |= cause is not None
        if cause is not None:
            self.collision_causes[cause] += 1
        return self._observe(cause)

    def _move_obstacles(self, t: float) -> None:
        """Put every moving obstacle where its motion has it at time `t`."""
        half_h = self.config.geometry.wall_height_m / 2
        for body, ob in zip(self.moving_bodies, self.world.moving, strict=True):
            x, y = ob.position(t)
            self._p.resetBasePositionAndOrientation(
                body,
                [float(x), float(y), half_h],
                self._p.getQuaternionFromEuler([0.0, 0.0, ob.yaw]),
                physicsClientId=self.client,
            )

    def _observe(self, cause: str | None) -> Observation:
        t0 = time.perf_counter()
        true_pose = self.robot.pose()
        scan = self.lidar.scan(true_pose, exclude_body=self.robot.body)
        pose, velocity = true_pose, self.robot.velocity()
        if not self._ideal:
            # The beams leave the true pose; the robot registers them where it believes it is.
            pose = self.drive.estimate.copy()
            scan = dataclasses.replace(scan, pose=pose.copy())
            velocity = self.drive.measured_velocity(float(self.robot.velocity()[1]))
        t1 = time.perf_counter()
        grid = self.local_grid.update(scan)
        t2 = time.perf_counter()
        self.timing.lidar_s, self.timing.grid_s = t1 - t0, t2 - t1
        return Observation(
            pose=pose,
            true_pose=true_pose,
            map_from_odom=self.drive.map_from_odom if self._drifts else None,
            velocity=velocity,
            local_grid=grid,
            scan=scan,
            collision=cause is not None,
            time_s=self.time_s,
            step=self.steps,
            collision_cause=cause,
        )

    # --- queries --------------------------------------------------------------------------------------------------
    def pose(self) -> np.ndarray:
        return self.robot.pose()

    def to_odom(self, points: np.ndarray) -> np.ndarray:
        """Map-frame (x, y[, yaw]) rows in the frame the robot's pose is given in (`Observation.map_from_odom`)."""
        return self.drive.to_odom(points) if self._drifts else np.asarray(points, dtype=float)

    def to_map(self, pose: np.ndarray) -> np.ndarray:
        """A pose in the robot's frame (`Observation.pose`) in the map frame, through the localiser's transform."""
        return self.drive.to_map(pose) if self._drifts else np.asarray(pose, dtype=float)

    def velocity(self) -> np.ndarray:
        return self.robot.velocity()

    def scan(self) -> LidarScan:
        """A fresh scan at the current (true) pose (draws noise; does not touch the local grid)."""
        return self.lidar.scan(self.robot.pose(), exclude_body=self.robot.body)

    def contact_cause(self, robot_velocity: np.ndarray) -> str | None:
        """None when the chassis touches nothing now; else "robot" or "obstacle" for a robot moving at
        `robot_velocity` (vx, vy in the map frame), by the rule in the module docstring."""
        cause = None
        for body, static in [(b, True) for b in self.world_bodies] + [(b, False) for b in self.moving_bodies]:
            tol = self.config.collision_tolerance_m if static else self.config.moving_contact_tolerance_m
            pts = self._p.getContactPoints(
                bodyA=self.robot.body, bodyB=body, linkIndexA=self.robot.chassis_link, physicsClientId=self.client
            )
            for pt in pts:
                if pt[8] > tol:
                    continue
                if static:
                    return "robot"
                # pt[7]: the contact normal on B (the obstacle), pointing at A (the robot).
                approach = -float(np.dot(robot_velocity, np.asarray(pt[7][:2])))
                if approach > self.config.robot_caused_speed_m_s:
                    return "robot"
                cause = "obstacle"
        return cause

    def clearance(self, max_distance: float = 1.0) -> float:
        """True distance (m) from the chassis surface to the nearest obstacle, static or moving, capped at
        `max_distance`; negative when penetrating. Uses the engine's closest-point query, independent of any grid."""
        best = max_distance
        for body in self.world_bodies + self.moving_bodies:
            pts = self._p.getClosestPoints(
                self.robot.body, body, max_distance, linkIndexA=self.robot.chassis_link, physicsClientId=self.client
            )
            for pt in pts:
                best = min(best, pt[8])
        return float(best)
