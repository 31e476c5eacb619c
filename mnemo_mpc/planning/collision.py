"""The footprint collision check, shared by the MPC's clearance constraint, the controller's fallbacks and the
recoveries (the role of Nav2's `FootprintCollisionChecker`).

The robot is covered by discs (`RobotModel.discs`: centre offsets and radii in the body frame; one disc at the
origin for a round robot). A pose keeps clearance c when every disc centre is at least its radius + c from an
obstacle on the distance field. Between two knots of a plan the robot drives a constant-(v, w) arc, so a trajectory
is checked along `RobotModel.densify`'s points with the heading yaw_k + w_k tau there, exactly.
"""

from __future__ import annotations

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.robot import RobotModel


def robot_discs(robot: RobotModel) -> np.ndarray:
    """The covering discs (K, 3) = (ox, oy, r) of the robot's footprint in its own frame (x forward), as
    `RobotModel.discs` fits them (`planning.footprint`); one disc of `robot.radius` at the centre for a round robot."""
    discs = np.asarray(robot.discs, dtype=float).reshape(-1, 3)
    if discs.shape[0] < 1 or not np.all(np.isfinite(discs)) or np.any(discs[:, 2] <= 0):
        raise InputError(f"robot discs: expected (K >= 1, 3) finite (ox, oy, r > 0), got {discs.tolist()}")
    return discs


class FootprintChecker:
    """Clearances of `robot`'s covering discs on a `DistanceField`; `dt` and `densify` say how a plan's knots are
    filled in (the MPC's step and its `MPCConfig.densify` points per step)."""

    def __init__(self, robot: RobotModel, dt: float, densify: int) -> None:
        self.robot = robot
        self.discs = robot_discs(robot)  # (K, 3): x, y offsets in the body frame, radius
        self.dt = float(dt)
        self.densify = int(densify)

    def disc_centres(self, poses: np.ndarray) -> np.ndarray:
        """Map-frame centres (..., K, 2) of the covering discs at poses (..., 3)."""
        poses = np.asarray(poses, dtype=float)
        c, s = np.cos(poses[..., 2:3]), np.sin(poses[..., 2:3])
        ox, oy = self.discs[:, 0], self.discs[:, 1]
        return np.stack([poses[..., 0:1] + c * ox - s * oy, poses[..., 1:2] + s * ox + c * oy], axis=-1)

    def disc_distances(self, field: DistanceField, pose: np.ndarray) -> np.ndarray:
        """The distance field (bilinear) at each covering disc's centre for the robot at `pose`: (K,)."""
        return np.asarray(field.distance(self.disc_centres(pose)), dtype=float).reshape(-1)

    def pose_margins(self, field: DistanceField, poses: np.ndarray, exact: bool = False) -> np.ndarray:
        """Per pose (..., 3): min over the discs of distance(centre) - radius; with `exact`, the distance to the
        obstacle cells themselves near them (`DistanceField.exact_distance`) rather than the bilinear field."""
        centres = self.disc_centres(poses)  # (..., K, 2)
        d = field.exact_distance(centres) if exact else field.distance(centres)
        return np.min(np.asarray(d) - self.discs[:, 2], axis=-1)

    def trajectory_clearance(
        self, field: DistanceField, states: np.ndarray, controls: np.ndarray, pts: np.ndarray | None = None
    ) -> float:
        """min over the densified trajectory and the discs of distance(centre) - radius, for knots `states` (N+1, 3)
        joined by `controls` (N, 2); `pts`: the densified positions when the caller has them."""
        states, controls = np.asarray(states, dtype=float), np.asarray(controls, dtype=float)
        if pts is None:
            pts = self.robot.densify(states, controls, self.dt, self.densify)
        if self.discs.shape[0] == 1 and not self.discs[0, :2].any():
            return float(field.min_clearance(pts)) - float(self.discs[0, 2])
        tau = (np.arange(self.densify) / self.densify) * self.dt
        yaw = (states[:-1, 2:3] + controls[:, 1:2] * tau[None, :]).reshape(-1)
        yaw = np.concatenate([yaw, states[-1:, 2]])
        centres = self.disc_centres(np.concatenate([pts, yaw[:, None]], axis=1))  # (M, K, 2)
        return float(np.min(np.asarray(field.distance(centres)) - self.discs[:, 2]))
