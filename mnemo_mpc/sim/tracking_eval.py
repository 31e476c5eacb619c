"""How well the tracker (`nav.tracking.Tracker`) tracks in the closed loop (issue 28: "false tracks on the 100 static
worlds (Jackal): <= 1 per 1,000 steps"): a `StepObserver` scores each step's confirmed tracks -- the controller's own
(`ControlOutput.tracks`, `ControllerConfig.tracking`), or those of a Tracker it feeds the step's local grid to -- and
`mnemo-mpc eval --moving-prediction track` writes the summary as its `tracking` field:

    mnemo-mpc eval --params config/robots/jackal.yaml --worlds 100 --seed 1000 \\
        --world-kinds rooms,corridor,doors,clutter,open,mixed,dense --moving-prediction track --out out/static.json

Scored against the world's ground truth, in the grid's frame (odometry for a realistic robot: the truth goes through
the localiser's transform, `Simulator.to_odom`):
* a confirmed track is *true* when a moving obstacle's centre lies within its bounding radius + `MATCH_M` of the
  track's position, else *false*; false tracks per 1,000 steps is the issue's figure (every track on a static world
  is false);
* a moving obstacle is *in view* at a step when the local grid reads occupied within its bounding radius + a cell of
  its true centre (the lidar has it in the window); per obstacle-step in view, whether a confirmed track is matched
  to it; per obstacle seen for `MIN_VIEW_S` or more, whether it ever got one; for matched pairs the velocity error
  |v_track - v_true| (its speed's share too).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from mnemo_mpc.nav.tracking import Tracker

MATCH_M = 0.5  # a track within an obstacle's bounding radius + this of its centre is that obstacle's
MIN_VIEW_S = 1.0  # an obstacle in view this long (in total) should get a track


class TrackerObserver:
    """`StepObserver` (mnemo_mpc.sim.episode) scoring each step's tracks: the controller's own with `tracker` None,
    else those of `tracker`, fed each step's local grid (its update time is then measured too)."""

    def __init__(self, tracker: Tracker | None, sim: Any, world: Any) -> None:
        self.tracker, self.sim, self.world = tracker, sim, world
        if tracker is not None:
            tracker.reset()
        self.steps = 0
        self.false_tracks = 0  # confirmed track-steps matched to no moving obstacle
        self.false_ids: set[int] = set()
        self.true_track_steps = 0
        self.view_steps = 0  # obstacle-steps in view
        self.covered_steps = 0  # ... with a confirmed track on it
        self.view_s = np.zeros(len(world.moving))
        self.tracked = np.zeros(len(world.moving), bool)
        self.speed_err: list[float] = []
        self.rel_err: list[float] = []
        self.update_ms: list[float] = []
        self.false_examples: list[dict[str, Any]] = []

    def step(self, k: int, obs: Any, goal: np.ndarray, out: Any, controller: Any) -> dict[str, Any]:
        if self.tracker is None:
            tracks = list(out.tracks)
        else:
            t0 = time.perf_counter()
            tracks = self.tracker.update(obs.local_grid, obs.time_s)
            self.update_ms.append((time.perf_counter() - t0) * 1e3)
        self.steps += 1
        grid = obs.local_grid
        centres, vels, radii = self._truth(obs)
        if len(centres):
            occ = grid.occupied_mask()
            xs, ys = grid.cell_centers()
            for i, (c, r) in enumerate(zip(centres, radii, strict=True)):
                near = np.hypot(xs - c[0], ys - c[1]) <= r + grid.resolution
                if near.shape == occ.shape and np.any(occ & near):
                    self.view_steps += 1
                    self.view_s[i] += float(getattr(self.sim.config, "control_dt", 0.1))
                    if any(np.hypot(*(t.position - c)) <= r + MATCH_M for t in tracks):
                        self.covered_steps += 1
                        self.tracked[i] = True
        for t in tracks:
            d = np.hypot(*(centres - t.position).T) - radii if len(centres) else np.zeros(0)
            if not len(d) or d.min() > MATCH_M:
                self.false_tracks += 1
                if t.id not in self.false_ids and len(self.false_examples) < 20:
                    self.false_examples.append(
                        {
                            "world": self.world.name,
                            "t": round(float(obs.time_s), 3),
                            "position": np.round(t.position, 3).tolist(),
                            "velocity": np.round(t.velocity, 3).tolist(),
                            "radius_m": round(t.radius_m, 3),
                            "cells": len(t.cells),
                            "robot_v": np.round(obs.velocity, 3).tolist(),
                        }
                    )
                self.false_ids.add(t.id)
                continue
            self.true_track_steps += 1
            j = int(np.argmin(d))
            err = float(np.hypot(*(t.velocity - vels[j])))
            self.speed_err.append(err)
            speed = float(np.hypot(*vels[j]))
            if speed > 0.1:
                self.rel_err.append(err / speed)
        return {"tracks": len(tracks)}

    def _truth(self, obs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Centres (n, 2), velocities (n, 2) and bounding radii of the moving obstacles in the grid's frame."""
        moving = self.world.moving
        if not moving:
            return np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0)
        t = float(obs.time_s)
        centres = np.array([ob.position(t) for ob in moving])
        vels = np.array([ob.velocity(t) for ob in moving])
        fix = getattr(obs, "map_from_odom", None)
        if fix is not None:
            centres = np.asarray(self.sim.to_odom(centres))[:, :2]
            c, s = math.cos(-float(fix[2])), math.sin(-float(fix[2]))
            vels = vels @ np.array([[c, s], [-s, c]])  # rotate map -> odom: R(-yaw) v, as rows
        return centres, vels, np.array([ob.bounding_radius_m for ob in moving])

    def finish(self, grid_shape: tuple[int, int], n: int) -> dict[str, Any]:
        seen = self.view_s >= MIN_VIEW_S
        return {
            "steps": self.steps,
            "false_track_steps": self.false_tracks,
            "false_tracks": len(self.false_ids),
            "true_track_steps": self.true_track_steps,
            "view_steps": self.view_steps,
            "covered_steps": self.covered_steps,
            "obstacles_seen": int(seen.sum()),
            "obstacles_tracked": int((self.tracked & seen).sum()),
            "speed_err": self.speed_err,
            "rel_err": self.rel_err,
            "update_ms": self.update_ms,
            "false_examples": self.false_examples,
        }


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 4) if values else None


def summarise(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures over many episodes' `TrackerObserver.finish` records."""
    steps = sum(r["steps"] for r in records)
    false_ids = sum(r["false_tracks"] for r in records)
    view = sum(r["view_steps"] for r in records)
    seen = sum(r["obstacles_seen"] for r in records)
    speed = [e for r in records for e in r["speed_err"]]
    rel = [e for r in records for e in r["rel_err"]]
    ms = [e for r in records for e in r["update_ms"]]
    return {
        "steps": steps,
        "false_tracks": false_ids,
        "false_tracks_per_1000_steps": round(1000.0 * false_ids / steps, 3) if steps else None,
        "false_track_steps_per_1000_steps": round(1000.0 * sum(r["false_track_steps"] for r in records) / steps, 3)
        if steps
        else None,
        "obstacles_seen": seen,
        "obstacles_tracked_fraction": round(sum(r["obstacles_tracked"] for r in records) / seen, 4) if seen else None,
        "in_view_steps_covered_fraction": round(sum(r["covered_steps"] for r in records) / view, 4) if view else None,
        "velocity_error_m_s": {"p50": _pct(speed, 50), "p90": _pct(speed, 90)},
        "velocity_error_relative": {"p50": _pct(rel, 50), "p90": _pct(rel, 90)},
        "update_ms": {"p50": _pct(ms, 50), "p99": _pct(ms, 99), "max": round(max(ms), 3) if ms else None},
        "false_examples": [e for r in records for e in r["false_examples"]][:30],
    }
