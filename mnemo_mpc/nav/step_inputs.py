"""Bounds on what `Controller.step` is handed (issue 26): finite and within what a planar robot can use.

Finite is not enough: a 1e308 pose overflows the first subtraction (OverflowError, or inf then NaN further on), and a
+-1e308 global path was stored and failed every later step. Positions beyond `MAX_COORDINATE_M` (1000 km, the bound
the ROS conversions and the command line apply) are corrupted input, not a place; speeds beyond `MAX_SPEED` likewise
(the controller clips a measured velocity to the robot's limits, so any finite value within it is harmless).
Kept apart from the controller so that the one call at the entry of `step` is all it adds there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mnemo_mpc.errors import MAX_COORDINATE_M, InputError

MAX_SPEED = 1e6  # m/s and rad/s: the fuzz's "absurd odometry velocity" (1e6) is clipped, not refused
MAX_ANGLE_RAD = 1e6  # a yaw this large has lost all precision (float spacing ~1e-10 rad at 1e6)


def _bounded(value: Any, size: int | None, bound: float, name: str, what: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"Controller.{name}: expected {what}, got {type(value).__name__}") from None
    if size is not None:
        arr = arr.reshape(-1)
        if arr.size != size:
            raise InputError(f"Controller.{name}: expected {what}, got {arr.size} numbers")
    if not np.all(np.isfinite(arr)) or (arr.size and float(np.max(np.abs(arr))) > bound):
        raise InputError(f"Controller.{name}: expected {what}, got values beyond it (non-finite or over {bound:g})")
    return arr


def check_step_inputs(pose: Any, velocity: Any, goal: Any, global_path: Any = None) -> None:
    """InputError naming the argument when a pose, velocity, goal or global path is non-finite or out of bounds."""
    for name, value in (("pose", pose), ("goal", goal)):
        arr = _bounded(value, 3, np.inf, name, f"x, y, yaw within +-{MAX_COORDINATE_M:g} m / rad")
        if np.any(np.abs(arr[:2]) > MAX_COORDINATE_M) or abs(arr[2]) > MAX_ANGLE_RAD:
            raise InputError(
                f"Controller.{name}: expected x, y within +-{MAX_COORDINATE_M:g} m and yaw within +-{MAX_ANGLE_RAD:g} "
                f"rad, got {np.array2string(arr, precision=3)}"
            )
    _bounded(velocity, 2, MAX_SPEED, "velocity", f"v, w within +-{MAX_SPEED:g}")
    if global_path is not None and not isinstance(global_path, (str, bytes, dict)):
        # strings and mappings are refused with their own message by Controller.set_global_path
        _bounded(
            global_path, None, MAX_COORDINATE_M, "global_path", f"map-frame points within +-{MAX_COORDINATE_M:g} m"
        )
