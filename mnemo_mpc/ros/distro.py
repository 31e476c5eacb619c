"""Which ROS 2 distribution's message definitions a bag tool uses by default: the installed one.

In order: `$ROS_DISTRO` (a sourced ROS install sets it: `jazzy`, `humble`, ...); the distribution named by installed
ROS wheels (`ros-<distro>-rclpy`, as the `.[ros]` extra installs: `ros-jazzy-rclpy`); else Jazzy, the distribution
the `.[ros]` extra pins. Returned as a `rosbags.typesys.Stores` name (`ROS2_JAZZY`). Standard library only.
"""

from __future__ import annotations

import os

FALLBACK = "ROS2_JAZZY"
# Distributions rosbags has definitions for (rosbags.typesys.Stores, ROS 2 only), newest last.
KNOWN = ("dashing", "eloquent", "foxy", "galactic", "humble", "iron", "jazzy", "kilted", "lyrical")


def _store(name: str) -> str | None:
    name = name.strip().lower()
    return f"ROS2_{name.upper()}" if name in KNOWN else None


def installed_distro() -> tuple[str, str]:
    """(Stores name, where it came from): `ROS_DISTRO`, the newest `ros-<distro>-rclpy` wheel, or the fallback."""
    from importlib import metadata

    env = os.environ.get("ROS_DISTRO", "")
    if _store(env):
        return _store(env), f"ROS_DISTRO={env}"
    for name in reversed(KNOWN):
        try:
            metadata.version(f"ros-{name}-rclpy")
        except metadata.PackageNotFoundError:
            continue
        return _store(name), f"installed wheel ros-{name}-rclpy"
    return FALLBACK, "no ROS found: the .[ros] extra's Jazzy"


def default_distro() -> str:
    """The Stores name of `installed_distro`."""
    return installed_distro()[0]


class InstalledDistro:
    """An argparse default that looks the distribution up only when printed (`--help`: "ROS2_JAZZY (installed wheel
    ros-jazzy-rclpy)"), so registering a command stays import-light; `resolve` turns it into the name."""

    def __str__(self) -> str:
        name, source = installed_distro()
        return f"{name}, from {source}"

    @staticmethod
    def resolve(value: object) -> str:
        """`value` when the user gave one, else the installed distribution's Stores name."""
        return value if isinstance(value, str) else default_distro()


__all__ = ["FALLBACK", "InstalledDistro", "default_distro", "installed_distro"]
