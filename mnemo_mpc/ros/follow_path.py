"""Nav2's `FollowPath` action (nav2_msgs/action/FollowPath) on the planner: what a goal means and when it ends.

No rclpy here: the node (`node.py: PlannerInterface`) serves the action and hands each control tick's result to a
`PathFollowing`, which says what to send back. Semantics, as Nav2's controller server:

* The goal is the path's last pose (position and heading); the path is the global path the MPC follows. A path that
  is empty, non-finite, or in a frame without a name is refused (`INVALID_PATH`); one in another frame (map) is
  followed through /tf (`NavAdapter._resolve_frames`), and aborted with `TF_ERROR` when no transform comes within
  `failure_tolerance_s`.
* A new goal while one runs **preempts** it: the old goal is aborted, the new path taken over without a stop; when
  it ends where the old one did (`same_goal`, as bt_navigator re-sends each re-planned path), the plan goes on.
* Feedback each tick: `distance_to_goal` along the path from its vertex nearest the robot (Nav2:
  `calculate_path_length` from the closest pose), `speed` the odometry's linear speed.
* Succeeded once the planner reports the goal reached and the command has ramped to zero.
* Aborted with `FAILED_TO_MAKE_PROGRESS` when the planner has failed (the progress checker's recoveries exhausted,
  Nav2's progress checker failing), with `NO_VALID_CONTROL` when it stays in a stop (stale input, fallback stops, a
  goal heading it cannot turn to) for longer than `failure_tolerance_s`; `UNKNOWN` after a tick that raised.
* Cancelled: the command ramps to zero within the limits (`NavAdapter.stop`), then the goal ends as canceled.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# nav2_msgs/action/FollowPath result codes (Jazzy)
NONE = 0
UNKNOWN = 100
INVALID_CONTROLLER = 101
TF_ERROR = 102
INVALID_PATH = 103
PATIENCE_EXCEEDED = 104
FAILED_TO_MAKE_PROGRESS = 105
NO_VALID_CONTROL = 106

NO_TRANSFORM = "no transform "  # how the adapter's stale-input reason for a missing or stale /tf begins

# Statuses in which the planner publishes a stop rather than its plan: tolerated up to `failure_tolerance_s`.
STOPPED_STATUSES = ("stale_input", "fallback_stop", "fallback_stop_blocked", "goal_yaw_blocked")


@dataclass(frozen=True)
class Outcome:
    """How a goal ended: `state` "succeeded" | "aborted" | "canceled", Nav2's error code and why."""

    state: str
    error_code: int = NONE
    message: str = ""


def path_length_to_go(path: np.ndarray, position: np.ndarray) -> float:
    """Length of `path` (K, >=2) from its vertex nearest `position` to its end, plus the way to that vertex."""
    xy = np.asarray(path, dtype=float)[:, :2]
    nearest = int(np.argmin(np.hypot(*(xy - np.asarray(position, dtype=float)[:2]).T)))
    rest = float(np.sum(np.hypot(*np.diff(xy[nearest:], axis=0).T))) if nearest < len(xy) - 1 else 0.0
    return rest + float(np.hypot(*(xy[nearest] - np.asarray(position, dtype=float)[:2])))


class PathFollowing:
    """One FollowPath goal, fed the planner's tick results until it ends."""

    def __init__(self, path: np.ndarray, failure_tolerance_s: float) -> None:
        self.path = np.asarray(path, dtype=float)
        self.failure_tolerance_s = float(failure_tolerance_s)
        self._stopped_since: float | None = None
        self.outcome: Outcome | None = None

    def feedback(self, pose: np.ndarray, velocity: np.ndarray) -> tuple[float, float]:
        """(distance_to_goal, speed) for the action's feedback."""
        return path_length_to_go(self.path, pose), float(abs(velocity[0]))

    def update(self, status: str, reason: str, at_rest: bool, now_s: float) -> Outcome | None:
        """The outcome after a tick with this `status` (a `TickResult.status`), or None while the goal runs."""
        if self.outcome is not None:
            return self.outcome
        if status in STOPPED_STATUSES:
            self._stopped_since = now_s if self._stopped_since is None else self._stopped_since
            if 0 <= self.failure_tolerance_s < now_s - self._stopped_since:  # -1: never
                why = f"{status} for over {self.failure_tolerance_s} s: {reason}"
                # the adapter's reason for a goal in a frame /tf does not connect (`NavAdapter._resolve_frames`)
                code = TF_ERROR if reason.startswith(NO_TRANSFORM) else NO_VALID_CONTROL
                self.outcome = Outcome("aborted", code, why)
        else:
            self._stopped_since = None
        if status == "failed":
            self.outcome = Outcome("aborted", FAILED_TO_MAKE_PROGRESS, f"the planner failed: {reason}")
        elif status == "error":
            self.outcome = Outcome("aborted", UNKNOWN, f"a control tick raised: {reason}")
        elif status == "goal_reached" and at_rest:  # the tick whose command reached zero (the adapter then idles)
            self.outcome = Outcome("succeeded")
        return self.outcome


__all__ = [
    "FAILED_TO_MAKE_PROGRESS",
    "INVALID_PATH",
    "NO_VALID_CONTROL",
    "Outcome",
    "PathFollowing",
    "TF_ERROR",
    "UNKNOWN",
    "path_length_to_go",
]
