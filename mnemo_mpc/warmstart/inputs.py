"""What the warm-start model sees of an MPC problem: one definition for training data and for the runtime.

Seed 002 §5.2 feeds "current robot pose p_r, a goal pose p_g and a visual occupancy grid". The MPC's optimum depends
on more than that, and a model can only predict what its inputs determine, so the context here is everything the
NLP's parameters hold (`mnemo_mpc.planning.nlp.ParamLayout`), expressed in the robot's frame:

* **grid** (2, S, S): the signed distance field the MPC plans on (unknown cells count as obstacles), sampled on an
  S x S lattice of `resolution` metres that moves and turns with the robot (rows along its heading, from
  `behind_m` behind it; columns across, left to right), so the same situation looks the same wherever it happens.
  Channel 0 is the distance clipped to [-0.25, clip_m] / clip_m, channel 1 the margin to the required clearance
  clipped to [-1, 1] over `margin_scale_m` (sharp where the constraint binds).
* **vector** (2N + 7): current velocity over its limits, the sub-goal (position over `scale_m`, cos and sin
  of the heading difference), the N reference points (knots 1..N) over `scale_m`, and the terminal-heading switch.

All in the robot frame: mirroring left and right (`mirror`) is an exact symmetry of the problem (y, yaw and w change
sign), the augmentation the data module uses.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.robot import RobotModel

# The ONNX graph's contract, written by `warmstart.export` and checked by `warmstart.runtime`: its format tag (in the
# metadata), input names and output name.
FORMAT = "mnemo_mpc.warmstart_vit/1"
INPUTS = ("grid", "vector")
OUTPUT = "controls"


@dataclass(frozen=True)
class InputSpec:
    size: int = 40  # cells per side of the crop
    resolution: float = 0.1  # metres per crop cell: 4 m x 4 m
    behind_m: float = 1.0  # the crop starts this far behind the robot (3 m ahead, 2 m to each side)
    clip_m: float = 1.0
    margin_scale_m: float = 0.1
    scale_m: float = 3.0  # positions in the vector are divided by this
    N: int = 30
    dt: float = 0.1

    def __post_init__(self) -> None:
        if self.size < 2 or not (self.resolution > 0 and self.clip_m > 0 and self.scale_m > 0):
            raise InputError(f"InputSpec: expected size >= 2 and positive lengths, got {self}")
        if self.N < 1 or not self.dt > 0:
            raise InputError(f"InputSpec: expected N >= 1 and dt > 0, got N={self.N}, dt={self.dt}")

    @property
    def vector_size(self) -> int:
        return 2 * self.N + 7

    def lattice(self) -> np.ndarray:
        """(S, S, 2) robot-frame (forward, left) coordinates of the crop's cell centres (read-only, cached)."""
        return _lattice(self)


@functools.lru_cache(maxsize=8)
def _lattice(spec: InputSpec) -> np.ndarray:
    centres = (np.arange(spec.size) + 0.5) * spec.resolution
    fwd = centres - spec.behind_m
    left = centres - 0.5 * spec.size * spec.resolution
    f, lft = np.meshgrid(fwd, left, indexing="ij")
    out = np.stack([f, lft], axis=-1)
    out.flags.writeable = False
    return out


def _rotation(yaw: float) -> np.ndarray:
    c, s = math.cos(yaw), math.sin(yaw)
    return np.array([[c, -s], [s, c]])


def grid_input(field: DistanceField, pose: np.ndarray, robot: RobotModel, spec: InputSpec) -> np.ndarray:
    """(2, S, S) float32: the distance field around `pose` in the robot frame (module docstring)."""
    pose = np.asarray(pose, dtype=float)
    points = spec.lattice() @ _rotation(pose[2]).T + pose[:2]
    d = field.distance(points)
    out = np.empty((2, spec.size, spec.size), dtype=np.float32)
    out[0] = np.clip(d, -0.25, spec.clip_m) / spec.clip_m
    out[1] = np.clip((d - robot.clearance) / spec.margin_scale_m, -1.0, 1.0)
    return out


def heading_on(pose: np.ndarray, subgoal: np.ndarray, robot: RobotModel, spec: InputSpec) -> float:
    """The MPC's terminal-heading switch (`SQPMPC.parameters`): the sub-goal is within one horizon at v_max."""
    return 1.0 if float(np.hypot(*(np.asarray(subgoal)[:2] - pose[:2]))) <= robot.v_max * spec.dt * spec.N else 0.0


def vector_input(
    pose: np.ndarray,
    velocity: np.ndarray,
    subgoal: np.ndarray,
    reference: np.ndarray,
    robot: RobotModel,
    spec: InputSpec,
) -> np.ndarray:
    """(2N + 7,) float32: velocity, sub-goal and reference (knots 1..N) in the robot frame (module docstring).

    `reference` is (N+1, 2|3) map-frame points for knots 0..N, as `SQPMPC.solve` takes it."""
    pose, velocity, subgoal = (np.asarray(a, dtype=float) for a in (pose, velocity, subgoal))
    reference = np.asarray(reference, dtype=float)
    if reference.shape[0] != spec.N + 1:
        raise InputError(f"vector_input.reference: expected {spec.N + 1} knots, got {reference.shape[0]}")
    to_robot = _rotation(pose[2]).T
    goal_rel = to_robot @ (subgoal[:2] - pose[:2])
    dyaw = subgoal[2] - pose[2]
    ref = (reference[1:, :2] - pose[:2]) @ to_robot.T
    vel = np.clip(velocity, robot.control_lower, robot.control_upper)
    out = np.empty(spec.vector_size, dtype=np.float32)
    out[0] = vel[0] / robot.v_max
    out[1] = vel[1] / robot.w_max
    out[2:4] = goal_rel / spec.scale_m
    out[4] = math.cos(dyaw)
    out[5] = math.sin(dyaw)
    out[6 : 6 + 2 * spec.N] = (ref / spec.scale_m).reshape(-1)
    out[-1] = heading_on(pose, subgoal, robot, spec)
    return out


# Which vector entries change sign under the left-right mirror: w, goal y, sin(dyaw), reference y (odd entries).
def mirror_sign(spec: InputSpec) -> np.ndarray:
    sign = np.ones(spec.vector_size, dtype=np.float32)
    sign[[1, 3, 5]] = -1.0
    sign[7 : 6 + 2 * spec.N : 2] = -1.0
    return sign


def mirror(grid: np.ndarray, vector: np.ndarray, controls: np.ndarray, spec: InputSpec) -> tuple:
    """The left-right mirrored problem (an exact symmetry): columns of the crop reversed, lateral and angular
    quantities negated. Works on single examples and on batches (leading axes)."""
    sign_u = np.array([1.0, -1.0], dtype=np.float32)
    return grid[..., ::-1].copy(), vector * mirror_sign(spec), controls * sign_u
