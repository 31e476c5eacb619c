"""Exceptions a user can act on. The CLI prints them as one line and exits non-zero."""

import math

import numpy as np

# Positions beyond this are corrupted input, not a place (1000 km: grid indices would overflow long before). One bound
# for every entry: the controller's inputs, lidar returns, the ROS conversions and the command line.
MAX_COORDINATE_M = 1e6


def is_real(value: object) -> bool:
    """A finite real number (not a bool, a string or a NaN): what every numeric setting must be."""
    return (
        isinstance(value, (int, float, np.integer, np.floating))
        and not isinstance(value, bool)
        and math.isfinite(value)
    )


def check_integers(owner: object, bounds: tuple[tuple[str, int, int | None], ...]) -> None:
    """Each (field, low, high) of `owner` an integer (not a bool) in [low, high] (high None: no upper bound), else an
    InputError naming `Class.field` and the range."""
    for name, low, high in bounds:
        value = getattr(owner, name)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, np.integer))
            or value < low
            or (high is not None and value > high)
        ):
            raise InputError(
                f"{type(owner).__name__}.{name}: expected an integer in [{low}, {high or 'inf'}], got {value!r}"
            )


class MnemoError(Exception):
    """Base class: every message names the field or file and what was expected."""


class InputError(MnemoError, ValueError):
    """A value handed to the library is malformed (NaN pose, negative resolution, wrong shape...)."""


class MapFormatError(InputError):
    """A map file (YAML/PGM/...) is unreadable or inconsistent."""


class InfeasibleProblemError(InputError):
    """The planning problem itself is invalid: start in collision, goal in an obstacle or unknown space."""


class StartInCollisionError(InfeasibleProblemError):
    """The robot's start pose is in collision on the grid it plans on (the controller then recovers)."""


class DatasetError(MnemoError):
    """An on-disk dataset store is unreadable, inconsistent, or of the wrong schema version."""
