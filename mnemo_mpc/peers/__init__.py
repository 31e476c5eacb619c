"""Peers of the MPC in the same run (issue 30): MPPI and the dynamic window approach behind the Controller's interface.

`CONTROLLERS` names every local planner a closed-loop command can drive; `make_controller` builds a peer from the
robot, MPC and controller settings the MPC's own controller is built from (`mnemo_mpc.profile.build`), so that all
planners meet the same robot, limits, horizon, route and safety layer (`peers.base`). "mpc" itself is built by the
profile (`Profile.controller`), with its warm start.

    mppi.py       pytorch-mppi's sampler with Nav2 MPPI's critics (critics.py)
    dwa.py        Fox et al. 1997's dynamic window
    base.py       the Controller stage a peer replaces, and the shared safety check
    local_path.py the reference as the path a peer follows
"""

from __future__ import annotations

from typing import Any

from mnemo_mpc.errors import InputError

CONTROLLERS = ("mpc", "mppi", "dwa")
PEERS = ("mppi", "dwa")


def make_controller(name: str, robot: Any, mpc_config: Any, config: Any, **settings: Any) -> Any:
    """The peer `name` ("mppi" or "dwa") on `robot` (RobotModel), `mpc_config` (MPCConfig: its horizon, step and
    start tolerance) and `config` (ControllerConfig); `settings`: the peer's own config (`mppi_config=` /
    `dwa_config=`). MPPI needs the [peers] extra (torch, pytorch-mppi)."""
    if name == "mppi":
        try:
            import pytorch_mppi  # noqa: F401
        except ImportError as exc:
            raise InputError(
                f"--controller mppi: needs pytorch-mppi ({exc}); pip install -c constraints.txt 'mnemo_mpc[peers]'"
            ) from exc
        from mnemo_mpc.peers.mppi import MPPIController

        return MPPIController(robot, mpc_config, config, **settings)
    if name == "dwa":
        from mnemo_mpc.peers.dwa import DWAController

        return DWAController(robot, mpc_config, config, **settings)
    raise InputError(f"controller: expected one of {PEERS} (or 'mpc', built by the profile), got {name!r}")
