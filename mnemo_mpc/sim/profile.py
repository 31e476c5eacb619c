"""The closed loop one robot profile drives (issue 10 item 1, issue 24 item 4): the robot, its MPC and controller
(`mnemo_mpc.profile.build`, the node's own builder), the simulator's body, control period, lidar and realism, and the
world generator's inflation -- so `demo`, `eval`, `collect` and `bench --params FILE` simulate, plan for and score
the same robot the node drives.

    setup = closed_loop_setup(NavParams.from_yaml("config/robots/jackal.yaml"), real_time=True, realism="profile")
    setup.robot, setup.mpc, setup.sim, setup.world, setup.controller()

The simulator's control period is the MPC's step dt (the loop runs once per step); its planning window is the
profile's `grid_window_m` at `grid_resolution`; its lidar range is `sensor_range_m` and the rest of the sensor and the
drive follow `--realism` (`mnemo_mpc.sim.realism`); with `ideal` the controller is told the drive is
ideal too. A bare `RobotModel` (tests, library users) becomes a profile with the built-in defaults and the dt
`mnemo_mpc.planning.sizing.size_horizon` gives it (`NavParams.for_robot`).

`costmap="inflated"` (`eval --costmap inflated`, issue 29) has the simulator publish its local window as a Nav2 local
costmap (`sim.local_grid`: LETHAL, Nav2's inflation layer around it with the robot's inscribed radius, translated to
100 / 99 / 1..98 / 0 / -1) and the profile read it so (`costmap_semantics`: the profile's Nav2 semantics, else
`nav2_costmap`; its `costmap_cost_weight` enters the MPC); `"raw"` keeps the fused occupancy and the `occupancy`
semantics.

`real_time=True` (demo, eval: a robot's loop) bounds every solve by the control period, as the node does
(`NavParams.mpc_config`); `collect` keeps the iteration cap alone, so the dataset does not depend on how busy the
machine was.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from mnemo_mpc.errors import InputError
from mnemo_mpc.planning.costmap import NAV2, OCCUPANCY
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.profile import SOLVE_BUDGET, NavParams, Profile, build
from mnemo_mpc.sim.local_grid import COSTMAPS, LocalGridConfig
from mnemo_mpc.sim.realism import Realism, realism_for
from mnemo_mpc.sim.simulator import SimConfig
from mnemo_mpc.sim.worlds import WorldConfig

__all__ = ["SOLVE_BUDGET", "ClosedLoopSetup", "closed_loop_setup"]


@dataclass(frozen=True)
class ClosedLoopSetup:
    """What a closed-loop run needs from one robot profile."""

    profile: Profile
    sim: SimConfig
    world: WorldConfig

    @property
    def robot(self) -> RobotModel:
        return self.profile.robot

    @property
    def mpc(self) -> MPCConfig:
        return self.profile.mpc

    @property
    def realism(self) -> Realism:
        return self.sim.realism

    def goal_tolerance(self, judged_m: float) -> float:
        """The goal tolerance the robot checks itself against when an episode is judged at `judged_m` on the true
        pose: the same for the ideal robot, which knows its pose; else no more than the profile's own
        `goal_tolerance_m` (the node's; 0.2 m by default), so what the odometry and the localiser get wrong (a few
        cm) does not leave a robot that believes it arrived standing just outside the judged circle."""
        if self.realism.is_ideal or self.realism.localization_period_s <= 0:
            return judged_m
        return min(judged_m, self.profile.params.goal_tolerance_m)

    def controller(
        self, warmstart: str | None = None, model: str | None = None, planner: str | None = None, **overrides: Any
    ) -> Any:
        """The profile's controller (`Profile.controller`)."""
        return self.profile.controller(warmstart, model, planner, **overrides)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the config a run writes next to its results."""
        return {
            **self.profile.to_dict(),
            "sim": dataclasses.asdict(self.sim),
            "realism": self.sim.realism.to_dict(),
            "world": dataclasses.asdict(self.world),
        }


def closed_loop_setup(
    profile: NavParams | RobotModel | None = None,
    *,
    sensor_range_m: float | None = None,
    mpc: MPCConfig | None = None,
    real_time: bool = False,
    realism: str = "ideal",
    costmap: str = "raw",
    **world_overrides: Any,
) -> ClosedLoopSetup:
    """The closed loop for `profile` (a `NavParams`, a bare `RobotModel`, or None: the built-in robot): module
    docstring. `sensor_range_m` overrides the profile's lidar range, `mpc` its MPC configuration; `realism` is a
    `mnemo_mpc.sim.realism.LEVELS` name; `costmap` one of `sim.local_grid.COSTMAPS` (module docstring);
    `world_overrides` set any WorldConfig field."""
    params = NavParams.for_robot(profile) if isinstance(profile, RobotModel) else profile or NavParams()
    if costmap not in COSTMAPS:
        raise InputError(f"closed_loop_setup.costmap: expected one of {COSTMAPS}, got {costmap!r}")
    semantics = params.costmap_semantics
    if costmap == "raw":
        semantics = OCCUPANCY
    elif semantics == OCCUPANCY:
        semantics = NAV2
    if semantics != params.costmap_semantics:
        params = dataclasses.replace(params, costmap_semantics=semantics)
    built = build(params, real_time=real_time)
    if mpc is not None:
        built = dataclasses.replace(built, mpc=mpc)
    if realism == "ideal":
        # The ideal robot acts on a command at once: a controller told of a latency and lags it does not have would
        # over-drive it. (`harsh` keeps the profile's model: the controller then meets a robot it does not know.)
        built = dataclasses.replace(
            built, controller_config=dataclasses.replace(built.controller_config, actuation=None)
        )
    robot = built.robot
    world = WorldConfig.for_robot(robot, **world_overrides)
    real = realism_for(params, realism)
    sim = SimConfig.for_robot(
        robot,
        control_dt=built.mpc.dt,
        sensor_range_m=sensor_range_m if sensor_range_m is not None else params.sensor_range_m,
        realism=real,
    )
    # the grid the robot fuses its scans into, tuned to its lidar's noise
    noise = real.lidar(sim.lidar).noise_std_m
    grid = LocalGridConfig.for_sensor(params.grid_window_m, params.grid_resolution, noise)
    if costmap == "inflated":
        grid = dataclasses.replace(
            grid, costmap=costmap, inscribed_radius_m=robot.shape.inscribed_radius, costmap_semantics=semantics
        )
    sim = dataclasses.replace(sim, local_grid=grid)
    return ClosedLoopSetup(built, sim, world)
