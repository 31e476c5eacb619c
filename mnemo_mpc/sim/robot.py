"""Differential-drive robot in PyBullet, driven so that it follows the MPC's unicycle model (v, w).

The URDF (`sim/urdf/diff_drive.urdf` in the data folder `mnemo_mpc.resources` finds) mounts the chassis on a planar
joint chain (prismatic x, prismatic y, continuous yaw) anchored to the world. Each physics substep commands the joint
velocities of the unicycle, (x', y', yaw') = (v cos(yaw_mid), v sin(yaw_mid), w) with yaw_mid = yaw + w*dt/2 (the
midpoint heading of `mnemo_mpc.planning.robot.unicycle_step`), through velocity motors of bounded force. Free space
therefore yields the unicycle's motion to integration accuracy, while a wall stops the chassis through a real contact,
which the simulator reports as a collision. The wheel joints are spun at the differential-drive wheel speeds
(v -/+ w*track/2) / wheel_radius so the visual model and any wheel-odometry reader agree with the base motion.

`robot_urdf(robot)` builds that URDF for any `RobotModel`: the chassis collision (and visual) shape is the footprint
extruded over the chassis height: a cylinder for a disc, a box for an axis-aligned rectangle, otherwise a convex prism
mesh (`chassis_obj`, written beside the URDF by `write_robot_urdf`). The shipped `sim/urdf/diff_drive.urdf` is what it
produces for the default robot (tests/test_robot_profiles.py checks it); `urdf_footprint` reads the footprint back.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.footprint import Footprint
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.resources import candidate_dirs, share_dirs

URDF_NAME = "urdf/diff_drive.urdf"
CHASSIS_Z_M = (0.03, 0.21)  # chassis bottom and top above the floor: the lidar plane (0.2 m) lies inside
CHASSIS_MASS_KG = 10.0
MESH_NAME = "chassis.obj"  # the prism mesh of a polygon footprint, beside the URDF


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

    radius_m: float = 0.2  # the circumscribed radius of the footprint
    wheel_radius_m: float = 0.035
    track_m: float = 0.3  # wheel separation
    footprint: tuple[tuple[float, float], ...] = ()  # RobotModel.footprint: empty for a disc of radius_m
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
        self._check_chassis(path, shape)
        for j in (self._jx, self._jy, self._jyaw, *self._wheels):
            p.changeDynamics(
                self.body, j, linearDamping=0.0, angularDamping=0.0, jointDamping=0.0, physicsClientId=client
            )

    def _check_chassis(self, path: Path, shape: list) -> None:
        """The loaded chassis collision shape must be the configured footprint (InputError naming both)."""
        p, c = self._p, self.config
        fp = Footprint(c.footprint) if c.footprint else Footprint.circle(c.radius_m)
        got = shape[0][2:4] if shape else "none"
        if fp.is_circle:
            ok = bool(shape) and shape[0][2] == p.GEOM_CYLINDER and abs(shape[0][3][1] - c.radius_m) <= 1e-6
            want = f"a cylinder of radius {c.radius_m} m (DiffDriveConfig.radius_m)"
        elif _axis_rectangle(fp) is not None:
            length, width, _, _ = _axis_rectangle(fp)
            ok = bool(shape) and shape[0][2] == p.GEOM_BOX and np.allclose(shape[0][3][:2], (length, width), atol=1e-6)
            want = f"a {length} x {width} m box (DiffDriveConfig.footprint)"
        else:
            ok = bool(shape) and shape[0][2] == p.GEOM_MESH
            want = f"the prism mesh of footprint {fp.vertices} (DiffDriveConfig.footprint)"
        if not ok:
            raise InputError(f"robot URDF {path}: chassis collision must be {want}, got {got}")

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


# --- URDF generation ----------------------------------------------------------------------------------------------
def diff_drive_config(robot: RobotModel, **overrides: float) -> DiffDriveConfig:
    """The simulator body for `robot`: its footprint, and wheels 0.75 of the footprint's width apart (0.3 m for the
    default 0.4 m disc), so the visual wheels sit inside the outline; `overrides` set any other field."""
    x0, x1, y0, y1 = robot.shape.bounds
    fields = {"radius_m": robot.radius, "footprint": robot.footprint, "track_m": round(0.75 * (y1 - y0), 6)}
    return DiffDriveConfig(**{**fields, **overrides})


def _axis_rectangle(fp: Footprint) -> tuple[float, float, float, float] | None:
    """(length, width, centre x, centre y) when `fp` is a rectangle with edges along x and y, else None."""
    if fp.is_circle or len(fp.vertices) != 4:
        return None
    pts = fp.points
    edges = np.roll(pts, -1, axis=0) - pts
    if not np.all(np.min(np.abs(edges), axis=1) <= 1e-12):
        return None
    x0, x1, y0, y1 = fp.bounds
    return x1 - x0, y1 - y0, 0.5 * (x0 + x1), 0.5 * (y0 + y1)


def _point_inertial(mass: str, inertia: str) -> str:
    """A URDF <inertial> at the link origin with a diagonal inertia (the slider, wheel and caster links)."""
    diag = f'ixx="{inertia}" ixy="0" ixz="0" iyy="{inertia}" iyz="0" izz="{inertia}"'
    return f'<inertial><origin xyz="0 0 0"/><mass value="{mass}"/><inertia {diag}/></inertial>'


def _num(v: float) -> str:
    return f"{v:.6g}"


def chassis_obj(footprint: Footprint, bottom: float = CHASSIS_Z_M[0], top: float = CHASSIS_Z_M[1]) -> str:
    """Wavefront OBJ of the footprint polygon extruded from `bottom` to `top` (a convex prism, outward faces)."""
    if footprint.is_circle:
        raise InputError("chassis_obj: a circular footprint is a URDF cylinder, not a mesh")
    pts = footprint.points
    m = len(pts)
    lines = [f"# chassis prism: footprint {footprint.vertices} extruded over z in [{bottom}, {top}] m"]
    lines += [f"v {_num(x)} {_num(y)} {_num(bottom)}" for x, y in pts]
    lines += [f"v {_num(x)} {_num(y)} {_num(top)}" for x, y in pts]
    lines.append("f " + " ".join(str(i + 1) for i in reversed(range(m))))  # bottom, facing down
    lines.append("f " + " ".join(str(m + i + 1) for i in range(m)))  # top, facing up (counter-clockwise)
    for i in range(m):
        j = (i + 1) % m
        lines.append(f"f {i + 1} {j + 1} {m + j + 1} {m + i + 1}")  # side quads, facing out
    return "\n".join(lines) + "\n"


def robot_urdf(
    robot: RobotModel | None = None, config: DiffDriveConfig | None = None, mesh_filename: str = MESH_NAME
) -> str:
    """The simulator's URDF for `robot` (default: the default `RobotModel`, giving sim/urdf/diff_drive.urdf).

    Chassis over z in CHASSIS_Z_M: a cylinder for a disc footprint, a box (offset to the rectangle's centre) for an
    axis-aligned rectangle, otherwise the prism mesh `mesh_filename` (`chassis_obj`; PyBullet collides with its
    convex hull, which is the prism itself). The inertia is the solid cylinder's or box's (the bounding box's for a
    mesh): the chassis is driven by velocity motors, so it only has to be plausible. Wheels (`config`, default
    `diff_drive_config(robot)`) and caster are visual only.
    """
    robot = robot or RobotModel()
    c = config or diff_drive_config(robot)
    fp = robot.shape
    bottom, top = CHASSIS_Z_M
    h, zc, mass = top - bottom, 0.5 * (bottom + top), CHASSIS_MASS_KG
    x0, x1, y0, y1 = fp.bounds
    rect = _axis_rectangle(fp)
    if fp.is_circle:
        r = fp.radius
        shape_note = f"a {_num(r)} m radius cylinder base"
        geometry = f'<cylinder radius="{_num(r)}" length="{_num(h)}"/>'
        origin = f'<origin xyz="0 0 {_num(zc)}"/>'
        ixx, izz = mass * (3 * r * r + h * h) / 12, mass * r * r / 2
        inertia_note = f"solid cylinder r={_num(r)}, h={_num(h)}: ixx = m(3r^2+h^2)/12, izz = m r^2 / 2"
        inertia = (ixx, ixx, izz)
    else:
        length, width = x1 - x0, y1 - y0
        cx, cy = 0.5 * (x0 + x1), 0.5 * (y0 + y1)
        if rect is not None:
            shape_note = f"a {_num(length)} x {_num(width)} m box base"
            geometry = f'<box size="{_num(length)} {_num(width)} {_num(h)}"/>'
            origin = f'<origin xyz="{_num(cx)} {_num(cy)} {_num(zc)}"/>'
        else:
            shape_note = f"a prism base over the footprint polygon ({mesh_filename})"
            geometry = f'<mesh filename="{mesh_filename}"/>'
            origin = '<origin xyz="0 0 0"/>'
        inertia = (mass * (width**2 + h * h) / 12, mass * (length**2 + h * h) / 12, mass * (length**2 + width**2) / 12)
        inertia_note = f"solid box {_num(length)} x {_num(width)} x {_num(h)}: ixx = m(w^2+h^2)/12, ..."
    icx, icy = (0.0, 0.0) if fp.is_circle else (0.5 * (x0 + x1), 0.5 * (y0 + y1))
    length_x = x1 - x0
    mark_l, mark_w = min(0.1, 0.4 * length_x), min(0.04, 0.25 * (y1 - y0))
    mark_x = x1 - 0.03 - 0.5 * mark_l
    half_track, wr = 0.5 * c.track_m, c.wheel_radius_m
    caster_x = x0 + 0.05
    ixx, iyy, izz = inertia
    return f"""<?xml version="1.0"?>
<!-- Differential-drive robot for mnemo_mpc.sim: {shape_note}, two wheels and a caster.
     Generated by mnemo_mpc.sim.robot.robot_urdf (the robot profile's footprint and wheels).
     The base rides on a planar joint chain (x, y prismatic, yaw continuous) anchored to the world, so the physics
     engine moves it only in the plane: the simulator commands the unicycle velocities (v cos yaw, v sin yaw, w)
     on these joints (velocity motors with bounded force), and contacts with the walls stop it as a real bumper would.
     Only the chassis collides; wheels and caster are visual. -->
<robot name="mnemo_diff_drive">
  <link name="world_anchor">
    {_point_inertial("0", "0")}
  </link>
  <link name="slider_x">
    {_point_inertial("0.01", "1e-5")}
  </link>
  <link name="slider_y">
    {_point_inertial("0.01", "1e-5")}
  </link>
  <link name="chassis">
    <inertial>
      <origin xyz="{_num(icx)} {_num(icy)} {_num(zc)}"/>
      <mass value="{_num(mass)}"/>
      <!-- {inertia_note} -->
      <inertia ixx="{_num(ixx)}" ixy="0" ixz="0" iyy="{_num(iyy)}" iyz="0" izz="{_num(izz)}"/>
    </inertial>
    <visual>
      {origin}
      <geometry>{geometry}</geometry>
      <material name="grey"><color rgba="0.6 0.6 0.65 1"/></material>
    </visual>
    <visual>
      <!-- heading marker -->
      <origin xyz="{_num(mark_x)} 0 {_num(top + 0.005)}"/>
      <geometry><box size="{_num(mark_l)} {_num(mark_w)} 0.01"/></geometry>
      <material name="red"><color rgba="0.8 0.1 0.1 1"/></material>
    </visual>
    <collision>
      {origin}
      <geometry>{geometry}</geometry>
    </collision>
  </link>
  <link name="left_wheel">
    {_point_inertial("0.2", "1e-4")}
    <visual>
      <origin xyz="0 0 0" rpy="1.5708 0 0"/>
      <geometry><cylinder radius="{_num(wr)}" length="0.02"/></geometry>
      <material name="black"><color rgba="0.1 0.1 0.1 1"/></material>
    </visual>
  </link>
  <link name="right_wheel">
    {_point_inertial("0.2", "1e-4")}
    <visual>
      <origin xyz="0 0 0" rpy="1.5708 0 0"/>
      <geometry><cylinder radius="{_num(wr)}" length="0.02"/></geometry>
      <material name="black"><color rgba="0.1 0.1 0.1 1"/></material>
    </visual>
  </link>
  <link name="caster">
    {_point_inertial("0.05", "1e-5")}
    <visual>
      <geometry><sphere radius="0.02"/></geometry>
      <material name="black"/>
    </visual>
  </link>
  <joint name="joint_x" type="prismatic">
    <parent link="world_anchor"/><child link="slider_x"/>
    <axis xyz="1 0 0"/><limit lower="-1e4" upper="1e4" effort="1e4" velocity="10"/>
  </joint>
  <joint name="joint_y" type="prismatic">
    <parent link="slider_x"/><child link="slider_y"/>
    <axis xyz="0 1 0"/><limit lower="-1e4" upper="1e4" effort="1e4" velocity="10"/>
  </joint>
  <joint name="joint_yaw" type="continuous">
    <parent link="slider_y"/><child link="chassis"/>
    <axis xyz="0 0 1"/>
  </joint>
  <!-- track {_num(c.track_m)} m (wheel separation), wheel radius {_num(wr)} m -->
  <joint name="left_wheel_joint" type="continuous">
    <parent link="chassis"/><child link="left_wheel"/>
    <origin xyz="0 {_num(half_track)} {_num(wr)}"/><axis xyz="0 1 0"/>
  </joint>
  <joint name="right_wheel_joint" type="continuous">
    <parent link="chassis"/><child link="right_wheel"/>
    <origin xyz="0 {_num(-half_track)} {_num(wr)}"/><axis xyz="0 1 0"/>
  </joint>
  <joint name="caster_joint" type="fixed">
    <parent link="chassis"/><child link="caster"/>
    <origin xyz="{_num(caster_x)} 0 0.02"/>
  </joint>
</robot>
"""


def write_robot_urdf(robot: RobotModel, directory: str | Path, config: DiffDriveConfig | None = None) -> Path:
    """Write `robot_urdf(robot, config)` as DIRECTORY/robot.urdf (and the chassis mesh beside it when the footprint
    needs one), atomically; returns the URDF's path, for `DiffDriveRobot(client, config, urdf_path=...)`."""
    from mnemo_mpc.atomic import atomic_write_text

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fp = robot.shape
    if not fp.is_circle and _axis_rectangle(fp) is None:
        atomic_write_text(directory / MESH_NAME, chassis_obj(fp))
    return atomic_write_text(directory / "robot.urdf", robot_urdf(robot, config))


def urdf_footprint(path: str | Path) -> Footprint:
    """The footprint a URDF's chassis collision shape gives (the round trip of `robot_urdf`): a cylinder's circle, a
    box's rectangle at its origin, or a prism mesh's top view. InputError naming the file when there is none."""
    path = Path(path)
    try:
        root = ET.fromstring(path.read_text())
    except (OSError, ET.ParseError) as exc:
        raise InputError(f"robot URDF {path}: cannot read it ({exc})") from exc
    coll = root.find("./link[@name='chassis']/collision")
    geom = coll.find("geometry") if coll is not None else None
    if geom is None or len(geom) != 1:
        raise InputError(f"robot URDF {path}: expected link 'chassis' with one collision geometry")
    shape = geom[0]
    org = coll.find("origin")
    ox, oy = (float(v) for v in (org.get("xyz", "0 0 0").split()[:2] if org is not None else ("0", "0")))
    if org is not None and org.get("rpy", "0 0 0").split() != ["0", "0", "0"]:
        raise InputError(f"robot URDF {path}: a rotated chassis collision origin is not supported")
    if shape.tag == "cylinder":
        if abs(ox) > 1e-12 or abs(oy) > 1e-12:
            raise InputError(f"robot URDF {path}: a cylinder chassis must be centred on the rotation axis")
        return Footprint.circle(float(shape.get("radius")))
    if shape.tag == "box":
        length, width, _ = (float(v) for v in shape.get("size").split())
        hx, hy = 0.5 * length, 0.5 * width
        return Footprint.polygon([(ox - hx, oy - hy), (ox + hx, oy - hy), (ox + hx, oy + hy), (ox - hx, oy + hy)])
    if shape.tag == "mesh":
        mesh = path.parent / shape.get("filename", "")
        try:
            verts = [ln.split()[1:3] for ln in mesh.read_text().splitlines() if ln.startswith("v ")]
        except OSError as exc:
            raise InputError(f"robot URDF {path}: cannot read the chassis mesh {mesh} ({exc})") from exc
        from scipy.spatial import ConvexHull

        xy = np.unique(np.asarray(verts, dtype=float), axis=0) + (ox, oy)
        return Footprint.polygon(xy[ConvexHull(xy).vertices])
    raise InputError(f"robot URDF {path}: chassis collision geometry {shape.tag!r}: expected cylinder, box or mesh")
