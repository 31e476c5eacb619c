"""Differential-drive robot in PyBullet, driven so that it follows the MPC's unicycle model (v, w).

The URDF (`sim/urdf/diff_drive.urdf` in the data folder `mnemo_mpc.resources` finds) mounts the chassis on a planar
joint chain (prismatic x, prismatic y, continuous yaw) anchored to the world. Each physics substep commands the joint
velocities of the unicycle, (x', y', yaw') = (v cos(yaw_mid), v sin(yaw_mid), w) with yaw_mid = yaw + w*dt/2 (the
midpoint heading of `mnemo_mpc.planning.robot.unicycle_step`), through velocity motors of bounded force. Free space
therefore yields the unicycle's motion to integration accuracy, while a wall stops the chassis through a real contact,
which the simulator reports as a collision. The wheel joints are spun at the differential-drive wheel speeds
(v -/+ w*track/2) / wheel_radius so the visual model and any wheel-odometry reader agree with the base motion.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.resources import candidate_dirs, share_dirs

URDF_NAME = "urdf/diff_drive.urdf"


def default_urdf_path() -> Path:
    """The shipped robot URDF in the first `sim/` data folder that has it (checkout, pip or colcon install); the
    most preferred candidate when none does, so loading it names the missing file."""
    for d in share_dirs("sim"):
        if (d / URDF_NAME).is_file():
            return d / URDF_NAME
    return candidate_dirs("sim")[0] / URDF_NAME


URDF_PATH = default_urdf_path()


@dataclass(frozen=True)
class DiffDriveConfig:
    """Geometry must match the URDF (checked on load). Forces are large enough to track the commanded velocity
    within one 1/240 s substep for the 10 kg chassis, and small enough that contacts stay stable."""

    radius_m: float = 0.2
    wheel_radius_m: float = 0.035
    track_m: float = 0.3  # wheel separation
    max_force_n: float = 500.0
    max_torque_nm: float = 200.0
    sensor_height_m: float = 0.2  # lidar plane, inside the 0.03-0.21 m chassis (rays ignore their own body)


class DiffDriveRobot:
    """The robot body in one PyBullet client. Poses are (x, y, yaw) in the map frame; velocities (v, w)."""

    def __init__(self, client: int, config: DiffDriveConfig | None = None, urdf_path: str | Path | None = None) -> None:
        import pybullet as p

        self._p = p
        self.client = client
        self.config = config or DiffDriveConfig()
        path = Path(urdf_path) if urdf_path is not None else URDF_PATH
        if not path.is_file():
            raise InputError(f"robot URDF: file not found: {path}")
        # Implicit cylinder: an exact circular footprint (the default tessellates URDF cylinders into a mesh).
        self.body = p.loadURDF(str(path), useFixedBase=True, flags=p.URDF_USE_IMPLICIT_CYLINDER, physicsClientId=client)
        names = {
            p.getJointInfo(self.body, j, physicsClientId=client)[1].decode(): j
            for j in range(p.getNumJoints(self.body, physicsClientId=client))
        }
        try:
            self._jx, self._jy, self._jyaw = names["joint_x"], names["joint_y"], names["joint_yaw"]
            self._wheels = (names["left_wheel_joint"], names["right_wheel_joint"])
        except KeyError as exc:
            raise InputError(
                f"robot URDF {path}: missing joint {exc}; expected joint_x, joint_y, joint_yaw, wheels"
            ) from exc
        self.chassis_link = self._jyaw  # a joint's child link shares its index
        shape = p.getCollisionShapeData(self.body, self.chassis_link, physicsClientId=client)
        if not shape or shape[0][2] != p.GEOM_CYLINDER or abs(shape[0][3][1] - self.config.radius_m) > 1e-6:
            raise InputError(
                f"robot URDF {path}: chassis collision must be a cylinder of radius {self.config.radius_m} m "
                f"(DiffDriveConfig.radius_m), got {shape[0][2:4] if shape else 'none'}"
            )
        for j in (self._jx, self._jy, self._jyaw, *self._wheels):
            p.changeDynamics(
                self.body, j, linearDamping=0.0, angularDamping=0.0, jointDamping=0.0, physicsClientId=client
            )

    # --- state ----------------------------------------------------------------------------------------------------
    def reset(self, pose: np.ndarray) -> None:
        """Teleport to (x, y, yaw) at rest."""
        p = self._p
        for j, q in zip((self._jx, self._jy, self._jyaw), pose, strict=True):
            p.resetJointState(self.body, j, float(q), 0.0, physicsClientId=self.client)
        for j in self._wheels:
            p.resetJointState(self.body, j, 0.0, 0.0, physicsClientId=self.client)

    def _joint_states(self) -> list:
        return self._p.getJointStates(self.body, [self._jx, self._jy, self._jyaw], physicsClientId=self.client)

    def pose(self) -> np.ndarray:
        """(x, y, yaw) with yaw wrapped to [-pi, pi)."""
        (x, _, _, _), (y, _, _, _), (yaw, _, _, _) = self._joint_states()
        return np.array([x, y, (yaw + math.pi) % (2 * math.pi) - math.pi])

    def velocity(self) -> np.ndarray:
        """Measured (v, w): forward speed along the heading and yaw rate."""
        (_, vx, _, _), (_, vy, _, _), (yaw, wz, _, _) = self._joint_states()
        return np.array([vx * math.cos(yaw) + vy * math.sin(yaw), wz])

    def wheel_speeds(self, v: float, w: float) -> tuple[float, float]:
        """Differential-drive inverse kinematics: (left, right) wheel angular speeds in rad/s."""
        c = self.config
        return (v - 0.5 * w * c.track_m) / c.wheel_radius_m, (v + 0.5 * w * c.track_m) / c.wheel_radius_m

    # --- actuation ------------------------------------------------------------------------------------------------
    def command(self, v: float, w: float, substep_dt: float) -> None:
        """Set the joint velocity motors for one physics substep of the unicycle (midpoint heading)."""
        p = self._p
        yaw = self._p.getJointState(self.body, self._jyaw, physicsClientId=self.client)[0]
        mid = yaw + 0.5 * w * substep_dt
        c = self.config
        p.setJointMotorControlArray(
            self.body,
            [self._jx, self._jy, self._jyaw, *self._wheels],
            p.VELOCITY_CONTROL,
            targetVelocities=[v * math.cos(mid), v * math.sin(mid), w, *self.wheel_speeds(v, w)],
            forces=[c.max_force_n, c.max_force_n, c.max_torque_nm, 1.0, 1.0],
            physicsClientId=self.client,
        )
