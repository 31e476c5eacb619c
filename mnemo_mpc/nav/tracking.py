"""Multi-object tracking of moving obstacles from the local occupancy grids (issue 28: moving obstacles predicted, not
only avoided). Each control step's grid goes in; tracks with a position, a velocity, their uncertainty, an extent
and the grid cells they cover come out, for the MPC to constrain against their predicted positions.

Measurements, from the grids alone (as `nav.moving_obstacles` detects, and on its lattice bookkeeping `FreeRuns`): a
cell is *young* when it is occupied now and was free for at least `free_before_s` in a run that ended at most
`young_s` ago -- something entered space the robot had seen empty; young cells whose run ended within `grace_s` are
the detector's *evidence* (the leading face this step). Young cells are clustered 8-connected
(`scipy.ndimage.label`); a cluster holding evidence of the last `evidence_window_s`, of `min_cells` cells or more and
no wider than `max_radius_m` (a person or a cart, not a stretch of wall) is one measurement: its centroid and its
extent (farthest cell centre plus half a cell's diagonal). Only young cells, not every occupied cell joined to the
evidence: a person passing a wall would otherwise take the wall into its centroid, and a rolling window's edge would
move that centroid as the robot drives.

Tracks: one Kalman filter (Kalman 1960, "A new approach to linear filtering and prediction problems") per track on
the constant-velocity model -- state (x, y, vx, vy) in the grid's frame, process noise the discretised continuous
white-noise acceleration of spectral density `accel_std_m_s2`^2 (Bar-Shalom, Li & Kirubarajan 2001, "Estimation with
Applications to Tracking and Navigation", §6.2.2) -- measuring the centroid with noise `meas_std_m`. Each update
predicts every track to the grid's time, gates measurement-track pairs by the squared Mahalanobis distance of the
innovation (`gate_chi2`, a chi-square quantile for 2 degrees of freedom) and by distance (`gate_m`), and assigns them
one-to-one at least total squared distance (the Hungarian method, Kuhn 1955 / Munkres 1957:
`scipy.optimize.linear_sum_assignment`). An unassigned measurement starts a tentative track (or, beside a track it
split from, joins its cells); a track without a measurement coasts and is deleted after `delete_after_s`
(`tentative_delete_s` while tentative).

Ego-motion: a surface the robot's own motion reveals is not moving. Cells first seen as the window moves were
UNKNOWN before (no free run: never young), a face seen from a new angle or shifted by odometry drift turns a patch
or a strip young in one step and then stays where it is, and a wall's newly hit stretch is long. So a track is
*confirmed* -- returned by `update` -- only after `confirm_hits` measurements with its estimated speed at least
`min_speed_m_s` at each of the last `confirm_hits - 1` and a net displacement since its first measurement of at least
`min_travel_fraction` of what `min_speed_m_s` would cover: a patch that appears and stays has velocity ~0; a strip
revealed along a wall at the robot's speed is too wide to be a measurement.

Frames and lattices: positions are in the grid's frame (map, or odom where the robot's pose is odometry); cells are
followed on the first grid's lattice (`FreeRuns`): a grid off it restarts the tracker, a rotated window returns no
tracks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import ndimage
from scipy.optimize import linear_sum_assignment

from mnemo_mpc.errors import InputError, check_integers, is_real
from mnemo_mpc.nav.moving_obstacles import FreeRuns
from mnemo_mpc.planning.grid import OccupancyGrid

_EPS = 1e-9
_NO_PAIR = 1e9  # cost of a gated-out pair in the assignment


@dataclass(frozen=True)
class TrackerConfig:
    """Tracker settings (module docstring); lengths in metres, times in seconds."""

    # Measurements (the "free" test and the free run as `MovingObstacleConfig`'s)
    free_value: int = 5  # an occupancy value (0-100) at most this reads free
    free_before_s: float = 0.5  # a cell free this long, then occupied, was entered by something
    grace_s: float = 0.3  # ... when its free run ended this recently: evidence (the face entering it now)
    young_s: float = 1.0  # ... or this recently: a young cell, part of the body that entered
    evidence_window_s: float = 0.3  # a cluster with evidence this recent is a measurement
    min_cells: int = 3
    max_radius_m: float = 0.8  # wider clusters are structure (a wall's newly seen stretch), not a person or a cart
    # ... and so are clusters with more than this share of cells beside an older occupied cell: a wall's face creeping
    # out by a cell along its length (Jackal, static worlds: a strip of 6-7 cells "moving" at 0.3-0.9 m/s along the
    # outer wall as the robot drove past)
    max_attached: float = 0.5
    # Filter
    meas_std_m: float = 0.08  # centroid noise: the visible part of a body changes from scan to scan
    accel_std_m_s2: float = 2.0  # white-noise acceleration of the CV model (people start and stop within ~0.5 s)
    init_speed_std_m_s: float = 1.0  # a new track's velocity: 0 with this spread (people walk at up to ~1.4 m/s)
    gate_chi2: float = 13.8  # squared Mahalanobis distance: the 0.999 quantile of chi-square with 2 dof
    gate_m: float = 0.8  # and at most this far from the prediction
    # Lifetime
    confirm_hits: int = 5
    min_speed_m_s: float = 0.2  # a confirmed track moved at least this fast (the generated boxes go 0.2-0.5 m/s)
    min_travel_fraction: float = 0.5
    tentative_delete_s: float = 0.25
    delete_after_s: float = 0.6

    def __post_init__(self) -> None:
        positive = (
            "free_before_s",
            "grace_s",
            "young_s",
            "evidence_window_s",
            "max_radius_m",
            "meas_std_m",
            "accel_std_m_s2",
            "init_speed_std_m_s",
            "gate_chi2",
            "gate_m",
            "min_speed_m_s",
            "tentative_delete_s",
            "delete_after_s",
        )
        for name in positive:
            value = getattr(self, name)
            if not (is_real(value) and value > 0):
                raise InputError(f"TrackerConfig.{name}: expected a finite number > 0, got {value!r}")
        for name in ("min_travel_fraction", "max_attached"):
            value = getattr(self, name)
            if not (is_real(value) and 0 <= value <= 1):
                raise InputError(f"TrackerConfig.{name}: expected a number in [0, 1], got {value!r}")
        check_integers(self, (("free_value", 0, 100), ("min_cells", 1, None), ("confirm_hits", 2, None)))
        if self.grace_s > self.young_s:
            raise InputError(
                f"TrackerConfig.grace_s: expected <= young_s ({self.young_s}) (evidence is young), got {self.grace_s}"
            )


def cv_model(dt_s: float, accel_std_m_s2: float) -> tuple[np.ndarray, np.ndarray]:
    """Transition F and process noise Q of the constant-velocity model over `dt_s` for state (x, y, vx, vy): the
    discretised continuous white-noise acceleration model (Bar-Shalom et al. 2001, §6.2.2), per axis
    Q = q [[dt^3/3, dt^2/2], [dt^2/2, dt]] with q = accel_std^2."""
    dt = float(dt_s)
    f = np.eye(4)
    f[0, 2] = f[1, 3] = dt
    q = float(accel_std_m_s2) ** 2
    axis = q * np.array([[dt**3 / 3.0, dt**2 / 2.0], [dt**2 / 2.0, dt]])
    return f, np.kron(axis, np.eye(2))  # (x, y, vx, vy) ordering: position block, then velocity block


_H = np.hstack([np.eye(2), np.zeros((2, 2))])  # the centroid measures the position


@dataclass
class Track:
    """One tracked obstacle, as of the last `Tracker.update` (a snapshot: the tracker keeps its own copy)."""

    id: int
    position: np.ndarray  # (2,) grid frame, m
    velocity: np.ndarray  # (2,) m/s
    covariance: np.ndarray  # (4, 4) of (x, y, vx, vy)
    radius_m: float  # extent of its last measurement: centroid to the farthest cell, plus half a cell's diagonal
    age_s: float  # since its first measurement
    confirmed: bool
    cells: np.ndarray  # (n, 2) (row, col) of the grid passed to the last update that belong to this obstacle now
    hits: int = 0  # measurements assigned to it
    last_hit_s: float = math.nan  # time of the last one
    accel_std_m_s2: float = TrackerConfig.accel_std_m_s2  # the CV model's process noise, for `predict`

    @property
    def speed_m_s(self) -> float:
        return float(np.hypot(*self.velocity))

    def predict(self, dt_s: float) -> tuple[np.ndarray, float]:
        """Centre (2,) `dt_s` seconds after the last update on the constant-velocity model, and the 1-sigma radius
        (m) of its position: the square root of the largest eigenvalue of the predicted position covariance."""
        if not (is_real(dt_s) and dt_s >= 0):
            raise InputError(f"Track.predict dt_s: expected seconds >= 0, got {dt_s!r}")
        f, q = cv_model(dt_s, self.accel_std_m_s2)
        p = f @ self.covariance @ f.T + q
        centre = self.position + float(dt_s) * self.velocity
        return centre, float(math.sqrt(max(float(np.linalg.eigvalsh(p[:2, :2])[-1]), 0.0)))


@dataclass
class _State:
    """A track's filter and bookkeeping inside the tracker."""

    id: int
    x: np.ndarray  # (4,)
    p: np.ndarray  # (4, 4)
    time_s: float  # of x, p
    born_s: float
    first_position: np.ndarray
    radius_m: float
    hits: int = 1
    last_hit_s: float = 0.0
    confirmed: bool = False
    speeds: list[float] = field(default_factory=list)  # estimated speed after each hit but the first
    cells: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))  # lattice (row, col)


class Tracker:
    """Constant-velocity Kalman multi-object tracker on the local grids (module docstring). `update(grid, now_s)`
    each control step returns the confirmed tracks."""

    def __init__(self, config: TrackerConfig | None = None) -> None:
        if config is not None and not isinstance(config, TrackerConfig):
            raise InputError(f"Tracker config: expected a TrackerConfig or None, got {type(config).__name__}")
        self.config = config or TrackerConfig()
        self._runs = FreeRuns(self.config.free_value)
        self.reset()

    def reset(self) -> None:
        """Forget every track and the grid history (a new episode, a relocalised robot)."""
        self._runs.reset()
        self._tracks: list[_State] = []
        self._evidence: list[tuple[float, np.ndarray]] = []  # (time, lattice (row, col) cells)
        self._next_id = 1
        self._now = -math.inf
        self.last_measurements = 0  # clusters measured in the last update (diagnostics)
        self.last_tentative = 0  # tracks not (yet) confirmed after the last update

    @property
    def tracks(self) -> list[Track]:
        """Every live track, tentative ones included, as of the last update (the grid's cells not attached)."""
        return [self._snapshot(s, None, None) for s in self._tracks]

    def update(self, grid: OccupancyGrid, now_s: float) -> list[Track]:
        """Take the grid of time `now_s` (s, increasing from call to call; `reset` for a new episode) and return the
        confirmed tracks, their `cells` in this grid's (row, col)."""
        if not isinstance(grid, OccupancyGrid):
            raise InputError(f"Tracker.update grid: expected an OccupancyGrid, got {type(grid).__name__}")
        if not is_real(now_s):
            raise InputError(f"Tracker.update now_s: expected a finite time in seconds, got {now_s!r}")
        now = float(now_s)
        if now <= self._now:
            raise InputError(
                f"Tracker.update now_s: expected a time after the last update's ({self._now}), got {now}; "
                "call reset() for a new episode"
            )
        cfg = self.config
        runs = self._runs.update(grid, now)
        if runs is None or self._runs.restarted:  # a new lattice: cells seen on the old one cannot be followed
            self._tracks, self._evidence = [], []
        self._now = now
        if runs is None:
            self.last_measurements = self.last_tentative = 0
            return []
        start, end, corner = runs
        corner_a = np.asarray(corner, dtype=np.int64)
        occupied = grid.occupied_mask()
        young = occupied & (end - start >= cfg.free_before_s - _EPS) & (now - end <= cfg.young_s + _EPS)
        evidence = young & (now - end <= cfg.grace_s + _EPS)
        if np.any(evidence):
            self._evidence.append((now, np.argwhere(evidence) + corner_a))
        self._evidence = [(t, c) for t, c in self._evidence if now - t <= cfg.evidence_window_s + _EPS]
        measurements = self._measure(grid, young, corner_a)
        self.last_measurements = len(measurements)
        for s in self._tracks:
            self._predict(s, now)
        pairs = self._associate(measurements)
        matched_m = {m for _, m in pairs}
        for t, m in pairs:
            self._correct(self._tracks[t], measurements[m], now)
        matched = [self._tracks[t] for t, _ in pairs]
        for m, (centre, radius, cells) in enumerate(measurements):
            if m in matched_m:
                continue
            # A fragment of a body already tracked (its visible face split by an occlusion): its cells, no new track
            host = next((s for s in matched if np.hypot(*(centre - s.x[:2])) <= s.radius_m + cfg.meas_std_m), None)
            if host is not None:
                host.cells = np.unique(np.concatenate([host.cells, cells]), axis=0)
                continue
            self._tracks.append(self._birth(centre, radius, cells, now))
        self._tracks = [s for s in self._tracks if now - s.last_hit_s <= self._lifetime(s) + _EPS]
        for s in self._tracks:
            s.cells = self._own_cells(s, grid, occupied, corner_a)
            if not s.confirmed and self._moves(s, now):
                s.confirmed = True
        self.last_tentative = sum(not s.confirmed for s in self._tracks)
        return [self._snapshot(s, grid, corner_a) for s in self._tracks if s.confirmed]

    # -- measurements ----------------------------------------------------------------------------------------------
    def _measure(
        self, grid: OccupancyGrid, young: np.ndarray, corner: np.ndarray
    ) -> list[tuple[np.ndarray, float, np.ndarray]]:
        """(centroid (2,), radius, lattice cells (n, 2)) of each young cluster holding recent evidence."""
        cfg = self.config
        if not self._evidence or not young.any():
            return []
        recent = np.concatenate([c for _, c in self._evidence]) - corner
        recent = recent[grid.in_bounds(recent)]
        labels, _ = ndimage.label(young, structure=np.ones((3, 3), bool))
        # Cells beside older occupied ones: a cluster made of them is structure growing by a cell, not a body
        beside_old = ndimage.binary_dilation(grid.occupied_mask() & ~young, structure=np.ones((3, 3), bool))
        ids = np.unique(labels[recent[:, 0], recent[:, 1]]) if len(recent) else np.zeros(0, int)
        res = grid.resolution
        out = []
        for k in ids[ids > 0]:
            cells = np.argwhere(labels == k)
            if len(cells) < cfg.min_cells or beside_old[cells[:, 0], cells[:, 1]].mean() > cfg.max_attached:
                continue
            xy = grid.grid_to_world(cells[:, ::-1] + 0.5)
            centre = xy.mean(axis=0)
            radius = float(np.max(np.hypot(*(xy - centre).T))) + res * math.sqrt(0.5)
            if radius > cfg.max_radius_m:
                continue
            out.append((centre, radius, cells + corner))
        return out

    # -- filter ----------------------------------------------------------------------------------------------------
    def _predict(self, s: _State, now: float) -> None:
        f, q = cv_model(now - s.time_s, self.config.accel_std_m_s2)
        s.x, s.p, s.time_s = f @ s.x, f @ s.p @ f.T + q, now

    def _innovation(self, s: _State, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = z - s.x[:2]
        cov = s.p[:2, :2] + self.config.meas_std_m**2 * np.eye(2)
        return y, cov

    def _associate(self, measurements: list[tuple[np.ndarray, float, np.ndarray]]) -> list[tuple[int, int]]:
        """Gated one-to-one pairs (track index, measurement index) at least total squared Mahalanobis distance
        (Hungarian method: `linear_sum_assignment`)."""
        cfg = self.config
        if not self._tracks or not measurements:
            return []
        cost = np.full((len(self._tracks), len(measurements)), _NO_PAIR)
        for i, s in enumerate(self._tracks):
            for j, (z, _, _) in enumerate(measurements):
                y, cov = self._innovation(s, z)
                d2 = float(y @ np.linalg.solve(cov, y))
                if d2 <= cfg.gate_chi2 and float(np.hypot(*y)) <= cfg.gate_m:
                    cost[i, j] = d2
        rows, cols = linear_sum_assignment(cost)
        return [(int(i), int(j)) for i, j in zip(rows, cols, strict=True) if cost[i, j] < _NO_PAIR]

    def _correct(self, s: _State, measurement: tuple[np.ndarray, float, np.ndarray], now: float) -> None:
        """The Kalman update with the measured centroid (Joseph form: the covariance stays symmetric positive)."""
        z, radius, cells = measurement
        y, cov = self._innovation(s, z)
        gain = s.p @ _H.T @ np.linalg.inv(cov)
        s.x = s.x + gain @ y
        a = np.eye(4) - gain @ _H
        s.p = a @ s.p @ a.T + self.config.meas_std_m**2 * gain @ gain.T
        s.radius_m, s.hits, s.last_hit_s = radius, s.hits + 1, now
        s.speeds.append(float(np.hypot(*s.x[2:])))
        s.cells = np.unique(np.concatenate([s.cells, cells]), axis=0)

    def _birth(self, centre: np.ndarray, radius: float, cells: np.ndarray, now: float) -> _State:
        cfg = self.config
        p = np.diag([cfg.meas_std_m**2] * 2 + [cfg.init_speed_std_m_s**2] * 2)
        s = _State(self._next_id, np.r_[centre, 0.0, 0.0], p, now, now, centre.copy(), radius, last_hit_s=now)
        s.cells = cells
        self._next_id += 1
        return s

    # -- lifetime --------------------------------------------------------------------------------------------------
    def _lifetime(self, s: _State) -> float:
        return self.config.delete_after_s if s.confirmed else self.config.tentative_delete_s

    def _moves(self, s: _State, now: float) -> bool:
        """Confirmation: enough hits, fast enough at each of the last ones, and as far from where it was first seen
        as that speed would take it (module docstring: a revealed static surface has velocity ~0)."""
        cfg = self.config
        recent = s.speeds[-(cfg.confirm_hits - 1) :]
        if s.hits < cfg.confirm_hits or min(recent) < cfg.min_speed_m_s:
            return False
        travel = float(np.hypot(*(s.x[:2] - s.first_position)))
        return travel >= cfg.min_travel_fraction * cfg.min_speed_m_s * (now - s.born_s)

    def _own_cells(self, s: _State, grid: OccupancyGrid, occupied: np.ndarray, corner: np.ndarray) -> np.ndarray:
        """The lattice cells of the body now: those it was measured in that are in this window, still occupied and
        within its extent of its position (a cell it left reads free once the lidar sees it again; one occluded
        behind it stays occupied, and is still its)."""
        if not len(s.cells):
            return s.cells
        local = s.cells - corner
        inside = grid.in_bounds(local)
        keep = np.zeros(len(local), bool)
        keep[inside] = occupied[local[inside, 0], local[inside, 1]]
        xy = grid.grid_to_world(local[:, ::-1] + 0.5)
        keep &= np.hypot(*(xy - s.x[:2]).T) <= s.radius_m + 2.0 * max(grid.resolution, self.config.meas_std_m)
        return s.cells[keep]

    def _snapshot(self, s: _State, grid: OccupancyGrid | None, corner: np.ndarray | None) -> Track:
        cells = np.zeros((0, 2), np.int64) if corner is None else s.cells - corner
        return Track(
            id=s.id,
            position=s.x[:2].copy(),
            velocity=s.x[2:].copy(),
            covariance=s.p.copy(),
            radius_m=float(s.radius_m),
            age_s=float(self._now - s.born_s),
            confirmed=s.confirmed,
            cells=cells,
            hits=s.hits,
            last_hit_s=float(s.last_hit_s),
            accel_std_m_s2=self.config.accel_std_m_s2,
        )


__all__ = ["Track", "Tracker", "TrackerConfig", "cv_model"]
