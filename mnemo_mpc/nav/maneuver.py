"""A footprint-aware manoeuvre onto the path: the recovery for a robot stuck at a passage it reached misaligned.

The SQP is a local method. A long robot that reaches a passage a few centimetres wider than itself (the dense
worlds: lanes 1.1-1.5x the Jackal's width) off the centreline or at an angle stops there for good: every motion
into the passage violates the clearance constraint, and the sideways shift it needs first raises the cost before it
lowers it (a local minimum the MPC, warm-started from its own last plan, never leaves; rotating in place and backing
off straight, Nav2's recoveries, bring it back to the same spot). What it needs is a short motion the MPC cannot find
by descent: turn, drive, turn, drive -- a differential drive can turn in place.

`plan_maneuver` finds it by graph search on a state lattice, as Nav2's Smac state-lattice planner does: states
(x, y, heading) on a window of the grid's cells around the robot and 16 headings (the 8 grid directions and the 8
knight moves, so every straight step ends on a cell centre); edges turn in place to a neighbouring heading or step
one lattice move forward (or backward, only when the robot may reverse, at a cost); every state and every turn's
intermediate headings keep the footprint's covering discs `margin` from obstacles on the controller's distance field.
Dijkstra (`scipy.sparse.csgraph`) from the robot's state; the goal is the state farthest along the path, within the
window, that the robot can reach aligned with the path. `Maneuver` then drives that plan as turn / straight segments
with feedback on the measured pose, each command checked against the field before it is sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import dijkstra

from mnemo_mpc.nav import recovery
from mnemo_mpc.planning.esdf import DistanceField
from mnemo_mpc.planning.mpc import SQPMPC

STATUS = recovery.MANEUVER

# The 16 lattice headings as (dx, dy) cell moves: a straight step in heading h moves by MOVES[h] cells exactly.
MOVES = np.array(
    [(1, 0), (2, 1), (1, 1), (1, 2), (0, 1), (-1, 2), (-1, 1), (-2, 1)]
    + [(-1, 0), (-2, -1), (-1, -1), (-1, -2), (0, -1), (1, -2), (1, -1), (2, -1)]
)
HEADINGS = np.arctan2(MOVES[:, 1], MOVES[:, 0])

# The executor drives the plan within a few centimetres of its lattice states: its straights keep the plan's margin
# less this (`Maneuver.floor`).
TRACKING_SLACK_M = 0.02
# ... but a turn in place moves no point of the body off its plan, only the corners round: one that starts inside the
# plan's margin less TRACKING_SLACK_M gets no closer than it stood, less this (the joins' own allowance, `_joins`).
# With the straights' allowance instead (1.5 cm below the start), a manoeuvre's turn touched a block at 0.2 mm depth
# on the drifting Jackal (dense-1027), where the grid's error near walls reached -2.8 cm (docs/realism.md).
TURN_SLACK_M = 0.005
# A turn in place starts once the body has stopped rolling (m/s): a realistic Jackal (50 ms latency, 0.2 s lag) ended
# a straight at 0.25 m/s, 2 cm from its end, and turned while it rolled on: a corner met the wall (dense-1041).
STOPPED_V = 0.03


@dataclass(frozen=True)
class ManeuverConfig:
    """The lattice and how its plan is driven. Times are the search's costs; speeds the executor's."""

    window_m: float = 2.0  # side of the square searched around the robot (its cells x 16 headings are the states)
    speed: float = 0.25  # m/s along straight segments (capped by v_max)
    turn_speed: float = 1.0  # rad/s turning in place (capped by w_max)
    turn_penalty_s: float = 0.2  # per turn edge, so that the plan turns rarely and drives straight between turns
    reverse_factor: float = 3.0  # a backward step costs this many forward ones (reversing drives into what it saw)
    join_forward_m: float = 0.2  # how far the robot may first drive straight on along its own heading to a turn
    join_backward_m: float = 0.4  # ... or back (robots that may reverse)
    min_advance_m: float = 0.3  # a plan must end at least this far along the path, else there is nothing to gain
    heading_tolerance: float = 0.04  # rad: a turn is over within this of its heading
    position_tolerance_m: float = 0.02  # a straight segment is over within this of its end


def plan_maneuver(
    mpc: SQPMPC,
    field_: DistanceField,
    pose: np.ndarray,
    path: np.ndarray,
    margin: float,
    config: ManeuverConfig | None = None,
) -> np.ndarray | None:
    """Waypoints (M, 4): x, y, heading, direction (+1 forward, -1 backward, 0 turn in place) of the cheapest lattice
    motion from `pose` to the reachable path pose farthest along `path` (heading along the path) within the window;
    None when no such pose lies `min_advance_m` past the robot's projection on the path or none is reachable.

    The lattice is laid along the path's direction at the far side of the window, so the pose it must end in (in a
    passage, within a few degrees of the passage's axis) is one of its states. The robot's own pose is off the
    lattice: it joins it by an optional straight run along its heading (backwards only when it may reverse) and a turn
    in place onto a lattice heading, both checked finely, with the margin it has now where that is less than `margin`
    (a robot pinned at a passage's mouth must be able to leave). Every lattice state and turn keeps `margin`."""
    cfg = config or ManeuverConfig()
    robot = mpc.robot
    res = float(field_.grid.resolution)
    half = int(math.ceil(0.5 * cfg.window_m / res))
    side = 2 * half + 1
    ahead = _path_ahead(path, pose, cfg, res, half * res)
    if ahead is None:
        return None
    px, py, tangent, advance = ahead
    phi = float(tangent[-1])  # the lattice's frame: heading 0 along the path where the manoeuvre ends
    cphi, sphi = math.cos(phi), math.sin(phi)
    # ... and one of its rows on the path there: a passage may leave the body less slack than one cell.
    lateral = -(px[-1] - pose[0]) * sphi + (py[-1] - pose[1]) * cphi
    shift = lateral - res * round(lateral / res)
    origin = np.array([pose[0] - shift * sphi, pose[1] + shift * cphi], dtype=float)
    jj, ii = np.meshgrid(np.arange(side) - half, np.arange(side) - half)
    xs = origin[0] + res * (cphi * jj - sphi * ii)
    ys = origin[1] + res * (sphi * jj + cphi * ii)
    headings = HEADINGS + phi
    nh = len(HEADINGS)
    free = _FreeCheck(mpc, field_, margin)

    yaw_grid = headings[:, None, None]
    valid = free(xs[None], ys[None], yaw_grid)  # (nh, side, side)
    # Knight moves cross between cell centres: their midpoints are checked too.
    knight = np.abs(MOVES).sum(axis=1) == 3
    step_xy = res * np.column_stack([cphi * MOVES[:, 0] - sphi * MOVES[:, 1], sphi * MOVES[:, 0] + cphi * MOVES[:, 1]])
    mid_ok = np.ones_like(valid)
    mid_ok[knight] = free(
        xs[None] + 0.5 * step_xy[knight, 0, None, None],
        ys[None] + 0.5 * step_xy[knight, 1, None, None],
        yaw_grid[knight],
        where=valid[knight],
    )
    # A turn between neighbouring headings (up to 26.6 degrees) sweeps the corners through the headings between:
    # checked at its quarters, so that a corner 0.33 m out misses no more than ~2 cm between checks -- what the
    # executor's finer check (every 0.05 rad, `Maneuver.floor`: the margin less 2 cm) allows.
    gap = recovery.wrap_angle(np.roll(HEADINGS, -1) - HEADINGS)
    turn_ok = valid & np.roll(valid, -1, axis=0)  # (nh, ...): the turn between h and h + 1
    for f in (0.25, 0.5, 0.75):
        turn_ok &= free(xs[None], ys[None], (headings + f * gap)[:, None, None], where=turn_ok)

    ids = np.arange(nh * side * side).reshape(nh, side, side)
    src, dst, cost = [], [], []
    step_s = res / min(cfg.speed, robot.v_max)
    directions = (1, -1) if robot.v_min < 0 else (1,)
    for h, (dx, dy) in enumerate(MOVES):
        for direction in directions:
            sx, sy = direction * dx, direction * dy
            i0, i1 = max(0, -sy), side - max(0, sy)
            j0, j1 = max(0, -sx), side - max(0, sx)
            ok = valid[h, i0:i1, j0:j1] & valid[h, i0 + sy : i1 + sy, j0 + sx : j1 + sx]
            if knight[h]:  # the midpoint of a knight move, seen from whichever end starts it
                mi0, mj0 = (i0, j0) if direction > 0 else (i0 + sy, j0 + sx)
                ok &= mid_ok[h, mi0 : mi0 + (i1 - i0), mj0 : mj0 + (j1 - j0)]
            src.append(ids[h, i0:i1, j0:j1][ok])
            dst.append(ids[h, i0 + sy : i1 + sy, j0 + sx : j1 + sx][ok])
            factor = 1.0 if direction > 0 else cfg.reverse_factor
            cost.append(np.full(int(ok.sum()), math.hypot(dx, dy) * step_s * factor))
    turn_speed = min(cfg.turn_speed, robot.w_max)
    for h in range(nh):
        g = (h + 1) % nh
        delta = abs(float(recovery.wrap_angle(HEADINGS[g] - HEADINGS[h])))
        ok = valid[h] & valid[g] & turn_ok[h]
        for a, b in ((h, g), (g, h)):
            src.append(ids[a][ok])
            dst.append(ids[b][ok])
            cost.append(np.full(int(ok.sum()), delta / turn_speed + cfg.turn_penalty_s))

    n = nh * side * side
    joins = _joins(mpc, field_, pose, margin, cfg, res, directions, headings, valid, origin, half, phi, step_s)
    start = n  # the robot's own pose, joined to the lattice by `joins`
    for node, (c, *_rest) in joins.items():
        src.append(np.array([start]))
        dst.append(np.array([node]))
        cost.append(np.array([c]))
    graph = sparse.csr_matrix((np.concatenate(cost), (np.concatenate(src), np.concatenate(dst))), shape=(n + 1, n + 1))
    dist, pred = dijkstra(graph, indices=start, return_predecessors=True)

    # The goal: a reachable state on the lattice heading nearest the path's there, on the path's cell or one beside
    # it, scored by its advance along the path less 0.1 m per second the motion takes (farther, but not by a detour
    # or a wiggle onto the path's exact cell).
    j = np.rint(((px - origin[0]) * cphi + (py - origin[1]) * sphi) / res).astype(int) + half
    i = np.rint((-(px - origin[0]) * sphi + (py - origin[1]) * cphi) / res).astype(int) + half
    h = np.argmin(np.abs(recovery.wrap_angle(headings[None, :] - tangent[:, None])), axis=1)
    cand, gain = [], []
    for off in (0, -1, 1):
        io = i + off
        inside = (io >= 0) & (io < side) & (j >= 0) & (j < side) & (advance >= cfg.min_advance_m)
        cand.append(ids[h[inside], io[inside], j[inside]])
        gain.append(advance[inside])
    cand_all, gain_all = np.concatenate(cand), np.concatenate(gain)
    score = gain_all - 0.1 * dist[cand_all]
    if cand_all.size == 0 or not np.isfinite(score).any():
        return None
    goal = int(cand_all[int(np.nanargmax(np.where(np.isfinite(score), score, -np.inf)))])
    states = [goal]
    while pred[states[-1]] != start:
        states.append(int(pred[states[-1]]))
    states.reverse()
    _c, direction0, along0, q = joins[states[0]]
    waypoints = []
    if along0 > 0:
        waypoints.append((q[0], q[1], float(pose[2]), direction0))
    h_idx, i_idx, j_idx = np.unravel_index(np.array(states), (nh, side, side))
    x, y, yaw = xs[i_idx, j_idx], ys[i_idx, j_idx], headings[h_idx]
    waypoints.append((q[0], q[1], yaw[0], 0))
    # One waypoint per change of motion: runs of straight steps (same heading and direction) and of turns merge.
    moves = np.sign(np.round((x[1:] - x[:-1]) * np.cos(yaw[1:]) + (y[1:] - y[:-1]) * np.sin(yaw[1:]), 9))
    for k, move in enumerate(moves.astype(int)):
        last = waypoints[-1]
        if last[3] == move and (move == 0 or h_idx[k + 1] == h_idx[k]):
            waypoints[-1] = (x[k + 1], y[k + 1], yaw[k + 1], move)
        else:
            waypoints.append((x[k + 1], y[k + 1], yaw[k + 1], move))
    return np.array(waypoints, dtype=float).reshape(-1, 4)


class _FreeCheck:
    """Footprint `margin` from obstacles at poses (x, y, yaw), broadcast together. The footprint's inscribed disc
    bounds a pose's clearance from below and its covering discs' reach from above: only poses whose centre lies
    between the two need the discs' distances (in a passage, a strip of a few cells)."""

    def __init__(self, mpc: SQPMPC, field_: DistanceField, margin: float) -> None:
        self.mpc, self.field, self.margin = mpc, field_, float(margin)
        self.inner = mpc.robot.shape.inscribed_radius
        self.outer = float(np.max(np.hypot(mpc.discs[:, 0], mpc.discs[:, 1]) + mpc.discs[:, 2]))

    def __call__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        yaw: np.ndarray,
        margin: float | None = None,
        where: np.ndarray | None = None,
    ) -> np.ndarray:
        """Free at each pose; False, unchecked, outside `where` (a mask broadcast with the poses)."""
        m = self.margin if margin is None else margin
        d0 = np.asarray(self.field.distance(np.stack(np.broadcast_arrays(x, y), axis=-1)))  # before the headings
        x, y, yaw, d0 = np.broadcast_arrays(x, y, yaw, d0)
        out = d0 >= self.outer + m
        band = (d0 >= self.inner + m) & ~out
        if where is not None:
            out = out & where
            band &= where
        if np.any(band):
            poses = np.stack([x[band], y[band], yaw[band]], axis=-1)
            out[band] = recovery.pose_margins(self.mpc, self.field, poses) >= m
        return out


def _joins(
    mpc: SQPMPC,
    field_: DistanceField,
    pose: np.ndarray,
    margin: float,
    cfg: ManeuverConfig,
    res: float,
    directions: tuple[int, ...],
    headings: np.ndarray,
    valid: np.ndarray,
    origin: np.ndarray,
    half: int,
    phi: float,
    step_s: float,
) -> dict[int, tuple[float, int, float, np.ndarray]]:
    """Lattice state -> (cost, direction, distance, point) of the cheapest way the robot joins it: straight along its
    heading by `distance` to `point` (0: where it stands), then a turn in place onto the state's heading there (the
    state is the lattice cell nearest `point`, the lattice's cell (half, half) at `origin`). Checked every 2.5 cm /
    0.05 rad with the lesser of `margin` and the margin the robot has now (less 5 mm)."""
    free = _FreeCheck(mpc, field_, margin)
    now = float(recovery.pose_margins(mpc, field_, np.asarray(pose, dtype=float)))
    # Never below 0, unless the robot is already there (its discs overlap a wall that its drifting odometry moved
    # nearer): then no deeper than it is, so that it can leave (dense-1083, realistic).
    relaxed = max(min(margin, now - TURN_SLACK_M), min(now, 0.0))
    yaw0 = float(pose[2])
    u = np.array([math.cos(yaw0), math.sin(yaw0)])
    turn_speed = min(cfg.turn_speed, mpc.robot.w_max)
    side = valid.shape[1]
    cphi, sphi = math.cos(phi), math.sin(phi)
    best: dict[int, tuple[float, int, float, np.ndarray]] = {}
    reach = {1: cfg.join_forward_m, -1: cfg.join_backward_m}
    for direction in directions:
        samples = np.arange(0.0, reach[direction] + 1e-9, 0.5 * res)
        pts = pose[:2] + direction * samples[:, None] * u
        ok = free(pts[:, 0], pts[:, 1], np.full(len(samples), yaw0), relaxed)
        last = int(np.argmin(ok)) if not ok.all() else len(ok)  # straight runs stop at the first blocked sample
        for k in range(0, last, 2):  # every cell's length
            q = pts[k]
            sweep = recovery.wrap_angle(headings - yaw0)  # the shorter turn onto each heading
            steps = np.maximum(np.ceil(np.abs(sweep) / 0.05).astype(int), 1)
            fr = np.linspace(0.0, 1.0, int(steps.max()) + 1)
            yaws = yaw0 + sweep[:, None] * fr[None, :]
            turn_free = free(np.full_like(yaws, q[0]), np.full_like(yaws, q[1]), yaws, relaxed).all(axis=1)
            d = q - origin
            jc = int(round((d[0] * cphi + d[1] * sphi) / res)) + half
            ic = int(round((-d[0] * sphi + d[1] * cphi) / res)) + half
            if not (0 <= ic < side and 0 <= jc < side):
                continue
            factor = 1.0 if direction > 0 else cfg.reverse_factor
            run = samples[k] / res * step_s * factor
            for h in np.flatnonzero(turn_free & valid[:, ic, jc]):
                c = run + abs(float(sweep[h])) / turn_speed + cfg.turn_penalty_s
                node = int((h * side + ic) * side + jc)
                if node not in best or c < best[node][0]:
                    best[node] = (c, direction, float(samples[k]), q.copy())
    return best


def _path_ahead(
    path: np.ndarray, pose: np.ndarray, cfg: ManeuverConfig, res: float, reach_m: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """(x, y, tangent, advance) of the path every half cell from the robot's projection on it to where it leaves the
    `reach_m` square around the robot (advance: arc length past the projection); None without a path ahead."""
    pts = np.asarray(path, dtype=float)[:, :2]
    seg = np.hypot(*np.diff(pts, axis=0).T)
    keep = np.concatenate([[True], seg > 1e-9])
    pts = pts[keep]
    if len(pts) < 2:
        return None
    s = np.concatenate([[0.0], np.cumsum(np.hypot(*np.diff(pts, axis=0).T))])
    dense = np.arange(0.0, s[-1] + 1e-9, 0.5 * res)
    px, py = np.interp(dense, s, pts[:, 0]), np.interp(dense, s, pts[:, 1])
    k0 = int(np.argmin(np.hypot(px - pose[0], py - pose[1])))
    inside = (np.abs(px - pose[0]) <= reach_m) & (np.abs(py - pose[1]) <= reach_m)
    inside[:k0] = False
    out = np.flatnonzero(~inside[k0:])
    k1 = k0 + (int(out[0]) if out.size else len(px) - k0)
    if k1 - k0 < 2:
        return None
    tangent = np.arctan2(np.gradient(py), np.gradient(px))
    return px[k0:k1], py[k0:k1], tangent[k0:k1], dense[k0:k1] - dense[k0]


class Maneuver:
    """Drives a `plan_maneuver` plan: turn in place to each segment's heading, then drive to its end with a heading
    correction towards it; over (None, with `reason`) at the plan's end, when out of time, or when the next motion
    would bring the footprint closer to an obstacle than `floor` (`Maneuver.floor`) -- or, for a turn given the plan's
    `margin`, closer than the lesser of that margin less TRACKING_SLACK_M and the clearance the turn started at less
    TURN_SLACK_M (`turn_floor`)."""

    name = STATUS

    def __init__(
        self,
        waypoints: np.ndarray,
        floor: float,
        now_s: float,
        time_allowance_s: float,
        config: ManeuverConfig | None = None,
        margin: float | None = None,
    ) -> None:
        self.waypoints = np.asarray(waypoints, dtype=float)
        self.floor = float(floor)
        # Turns: None keeps them at `floor`; else at most this, and no closer than they start (`turn_floor`)
        self.turn_cap = None if margin is None else float(margin) - TRACKING_SLACK_M
        self._turn_state: tuple[tuple[int, bool], float] | None = None  # (which turn, its floor) once it has started
        self.started_s = float(now_s)
        self.time_allowance_s = float(time_allowance_s)
        self.config = config or ManeuverConfig()
        self.index = 0
        self.turning = True
        self.reason = ""

    def target(
        self, mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, velocity: np.ndarray, now_s: float
    ) -> np.ndarray | None:
        """The target command this period, or None when the manoeuvre is over."""
        robot, cfg = mpc.robot, self.config
        if now_s - self.started_s >= self.time_allowance_s - 1e-9:
            return self._over("out of time")
        while self.index < len(self.waypoints):
            x, y, heading, direction = self.waypoints[self.index]
            to_end = np.array([x - pose[0], y - pose[1]])
            if direction == 0:  # a turn in place to `heading`
                err = recovery.wrap_angle(heading - float(pose[2]))
                if abs(err) <= cfg.heading_tolerance:
                    self.index += 1
                    continue
                if abs(float(velocity[0])) > STOPPED_V:
                    return np.zeros(2)  # at rest first: a corner swung by a body still rolling left the plan
                return self._turn(mpc, field_, pose, err)
            along = float(to_end @ np.array([math.cos(heading), math.sin(heading)])) * direction
            if along <= cfg.position_tolerance_m:
                self.index, self.turning = self.index + 1, True
                continue
            # Body heading for the straight: towards the end point (backwards: away from it) from where the robot is;
            # the segment's own heading over its last 10 cm.
            body = heading
            if along > 0.1:
                bearing = math.atan2(to_end[1], to_end[0])
                body = bearing if direction > 0 else recovery.wrap_angle(bearing + math.pi)
            err = recovery.wrap_angle(body - float(pose[2]))
            if self.turning and abs(err) > cfg.heading_tolerance:
                return self._turn(mpc, field_, pose, err)
            self.turning = False
            s = np.linspace(0.0, min(along, 0.15), 4)[:, None] * direction
            c, si = math.cos(float(pose[2])), math.sin(float(pose[2]))
            poses = np.column_stack([pose[0] + s * c, pose[1] + s * si, np.full((4, 1), pose[2])])
            if not self._free(mpc, field_, pose, poses):
                return self._over(f"segment {self.index + 1}/{len(self.waypoints)} blocked")
            # Braking at half the drive's deceleration, so that a lagging drive (its commands late, its velocity loop
            # slow) nears the end slowly; a turn after it waits until the body has stopped rolling (STOPPED_V).
            v = min(cfg.speed, math.sqrt(robot.a_max * along), robot.v_max if direction > 0 else -robot.v_min)
            w = float(np.clip(2.0 * err, -robot.w_max, robot.w_max))
            return np.array([direction * v, w])
        return self._over("done")

    def turn_floor(self, mpc: SQPMPC, field_: DistanceField, pose: np.ndarray) -> float:
        """The least clearance the turn under way keeps: `floor`, or with the plan's margin known, the lesser of that
        margin less TRACKING_SLACK_M and the exact clearance where this turn began less TURN_SLACK_M (never below
        `floor`). Fixed when the turn begins, so that its steps cannot each give up another TURN_SLACK_M."""
        if self.turn_cap is None:
            return self.floor
        key = (self.index, bool(self.waypoints[self.index, 3] == 0))
        if self._turn_state is None or self._turn_state[0] != key:
            start = float(recovery.pose_margins(mpc, field_, np.asarray(pose, dtype=float), exact=True))
            self._turn_state = key, max(self.floor, min(self.turn_cap, start - TURN_SLACK_M))
        return self._turn_state[1]

    def _turn(self, mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, err: float) -> np.ndarray | None:
        robot = mpc.robot
        sweep = float(np.clip(err, -0.3, 0.3))
        yaws = float(pose[2]) + np.linspace(0.0, sweep, max(int(math.ceil(abs(sweep) / 0.05)), 1) + 1)
        poses = np.column_stack([np.full_like(yaws, pose[0]), np.full_like(yaws, pose[1]), yaws])
        if not self._free(mpc, field_, pose, poses, self.turn_floor(mpc, field_, pose)):
            return self._over(f"turn {self.index + 1}/{len(self.waypoints)} blocked")
        w = min(self.config.turn_speed, robot.w_max, math.sqrt(2.0 * robot.alpha_max * abs(err)), 2.0 * abs(err))
        return np.array([0.0, math.copysign(w, err)])

    @staticmethod
    def floor(mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, margin: float) -> float:
        """The least footprint clearance a plan at `margin` from `pose` is driven with: `margin` less
        TRACKING_SLACK_M (the robot drives the plan within a few centimetres of its lattice states), or for a robot
        already closer than the plan lets it join at (`plan_maneuver`), 1.5 cm less than that; never below 0, or below
        where it stands when it stands there (it may leave, no deeper). Turns keep more when the executor is given the
        margin (`turn_floor`)."""
        now = float(recovery.pose_margins(mpc, field_, np.asarray(pose, dtype=float), exact=True))
        return max(min(margin - TRACKING_SLACK_M, now - 0.015), min(now, 0.0))

    def _free(
        self, mpc: SQPMPC, field_: DistanceField, pose: np.ndarray, poses: np.ndarray, floor: float | None = None
    ) -> bool:
        """Every pose's exact margin (`recovery.pose_margins`) at least `floor` (the straights' `self.floor`)."""
        least = self.floor if floor is None else floor
        return bool(np.min(recovery.pose_margins(mpc, field_, poses, exact=True)) >= least)

    def _over(self, reason: str) -> None:
        self.reason = reason
        return None
