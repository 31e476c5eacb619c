"""What the values of an incoming nav_msgs/OccupancyGrid mean (issue 29): the one place that says it.

Three semantics (`SEMANTICS`), chosen per grid (`OccupancyGrid.semantics`; the node's `costmap_semantics` parameter):

* `"occupancy"` -- a map_server-style occupancy probability 0..100 (and -1 unknown): OCCUPIED at or above
  `occupied_thresh` (65), FREE at or below `free_thresh` (25), UNKNOWN in between and at -1 (`planning.grid`). No
  soft cost.
* `"nav2_costmap"` -- a Nav2 costmap_2d published as an OccupancyGrid. costmap_2d stores a cost per cell
  (nav2_costmap_2d/cost_values.hpp: FREE_SPACE 0, 1..252 inflated, INSCRIBED_INFLATED_OBSTACLE 253, LETHAL_OBSTACLE
  254, NO_INFORMATION 255), and its publisher translates it (Costmap2DPublisher's cost translation table): 0 -> 0,
  i -> 1 + 97 (i - 1) / 251 for i in 1..252 (so 1..98), 253 -> 99, 254 -> 100, 255 -> -1. Here:

    value   Nav2 meaning                         collision class              soft cost (`cost_field`)
    100     LETHAL: an obstacle in the cell      OCCUPIED (hard constraint)   1
    99      INSCRIBED: the robot's centre here    FREE -- see below            1
            puts an obstacle inside its
            inscribed circle
    1..98   inflation, decaying with distance    FREE                         value / 98 (0..1)
    0       free                                 FREE                         0
    -1      unknown                              UNKNOWN (`unknown_policy`)   1 if unknown counts as occupied
                                                                              (the obstacle's side), else 0

  Why 99 is not an obstacle here: INSCRIBED marks where the robot's *centre* must not be, i.e. the obstacles already
  grown by the inscribed radius -- what a point-robot planner needs. Our MPC does its own footprint check (its covering
  discs must keep radius + safety margin from OCCUPIED cells, `planning.mpc`), so taking 99 as an obstacle too counts
  the robot's radius twice: a passage then needs 2 (radius + inscribed radius + margin) instead of 2 (radius + margin),
  0.9 m instead of 0.5 m for the generic 0.2 m disc. Measured (docs/costmap.md, `eval --costmap inflated`, 30 worlds of
  the seven families): success 1.00 with 99 free and costed, 0.87 with 99 an obstacle (every dense world timed out).
  The soft cost at 1 keeps the robot away from it instead.
* `"nav2_costmap_inscribed"` (`NAV2_INSCRIBED_AS_OBSTACLE`) -- the same, with 99 an obstacle too: the strict reading
  ("lethal/inscribed as obstacles"), for a costmap inflated with a radius that is not this robot's footprint.

`thresholds(semantics)` gives the (occupied_thresh, free_thresh) a semantics amounts to, so every piece of the
planner that classifies cells by `OccupancyGrid.occupied_mask` / `free_mask` / `unknown_mask` (the distance field,
the goal check, the own path's memory, the recoveries) reads a costmap right without knowing about it.
`inflate(obstacles, ...)` is Nav2's inflation layer on a boolean obstacle mask, for the simulator and the tests.
"""

from __future__ import annotations

import numpy as np

from mnemo_mpc.errors import InputError, is_real

OCCUPANCY = "occupancy"
NAV2 = "nav2_costmap"
NAV2_INSCRIBED_AS_OBSTACLE = "nav2_costmap_inscribed"
SEMANTICS = (OCCUPANCY, NAV2, NAV2_INSCRIBED_AS_OBSTACLE)

# nav2_costmap_2d/cost_values.hpp
COST_FREE = 0
COST_INSCRIBED = 253
COST_LETHAL = 254
COST_UNKNOWN = 255
# ... as Costmap2DPublisher's translation table writes them into an OccupancyGrid
LETHAL = 100
INSCRIBED = 99
MAX_INFLATION = 98  # the translated 252, the highest cost of a cell that is not an obstacle
FREE = 0
UNKNOWN = -1

# The MPC's costmap term's weight is at most this (`MPCConfig.costmap_cost_weight`): at w_c = 100 one knot at full cost
# outweighs the goal term 100 times over and the QP's Hessian spans ~1e6 (its smallest curvature is w_v = 0.01);
# beyond it the soft cost is a hard one in all but name, which the clearance constraints already are.
MAX_COSTMAP_COST_WEIGHT = 100.0

# Nav2's inflation layer defaults (docs.nav2.org, Inflation Layer Parameters)
NAV2_INFLATION_RADIUS_M = 0.55
NAV2_COST_SCALING_FACTOR = 10.0


def check_semantics(semantics: str, name: str = "semantics") -> str:
    """`semantics` if it names one of `SEMANTICS`, else an InputError naming `name`."""
    if semantics not in SEMANTICS:
        raise InputError(f"{name}: expected one of {SEMANTICS}, got {semantics!r}")
    return semantics


def thresholds(semantics: str) -> tuple[int, int] | None:
    """(occupied_thresh, free_thresh) a costmap semantics amounts to; None for `"occupancy"` (the grid's own)."""
    check_semantics(semantics)
    if semantics == NAV2:
        return LETHAL, INSCRIBED  # 100 occupied; 0..99 free; -1 unknown
    if semantics == NAV2_INSCRIBED_AS_OBSTACLE:
        return INSCRIBED, MAX_INFLATION  # 99, 100 occupied; 0..98 free; -1 unknown
    return None


def translate(cost: np.ndarray) -> np.ndarray:
    """costmap_2d costs (0..255, uint8) -> OccupancyGrid values, as Costmap2DPublisher's translation table does."""
    c = np.asarray(cost)
    if c.size and (c.min() < 0 or c.max() > 255):
        raise InputError(f"translate.cost: expected costmap_2d costs 0..255, got [{c.min()}, {c.max()}]")
    c = c.astype(np.int64)
    out = np.where(c == 0, FREE, 1 + (97 * (c - 1)) // 251)
    out = np.where(c == COST_INSCRIBED, INSCRIBED, out)
    out = np.where(c == COST_LETHAL, LETHAL, out)
    out = np.where(c == COST_UNKNOWN, UNKNOWN, out)
    return out.astype(np.int8)


def cost_field(data: np.ndarray, semantics: str, unknown_policy: str = "occupied") -> np.ndarray:
    """The soft cost in [0, 1] per cell (the module docstring's table; zeros for `"occupancy"`): what the MPC's
    `MPCConfig.costmap_cost_weight` term penalises."""
    check_semantics(semantics)
    d = np.asarray(data)
    if semantics == OCCUPANCY:
        return np.zeros(d.shape)
    out = np.clip(d, 0, MAX_INFLATION).astype(float) / MAX_INFLATION
    out[d >= INSCRIBED] = 1.0
    out[d < 0] = 1.0 if unknown_policy == "occupied" else 0.0
    return out


def inflate(
    obstacles: np.ndarray,
    resolution: float,
    inscribed_radius_m: float,
    inflation_radius_m: float = NAV2_INFLATION_RADIUS_M,
    cost_scaling_factor: float = NAV2_COST_SCALING_FACTOR,
    unknown: np.ndarray | None = None,
) -> np.ndarray:
    """Nav2's inflation layer on an obstacle mask, translated to OccupancyGrid values (int8).

    As nav2_costmap_2d's InflationLayer::computeCost, for each cell at distance d (between cell centres, in metres)
    from the nearest LETHAL cell: 254 at d = 0, 253 for d <= inscribed radius, else
    uint8(252 exp(-cost_scaling_factor (d - inscribed radius))) for d <= inflation radius, else 0; then
    translated (`translate`). `unknown` cells stay unknown unless the inflation makes them inscribed or lethal (the
    layer's default inflate_unknown: false); they are not inflated around (inflate_around_unknown: false)."""
    obs = np.asarray(obstacles, dtype=bool)
    if obs.ndim != 2:
        raise InputError(f"inflate.obstacles: expected a 2-D mask, got shape {obs.shape}")
    for name, value in (
        ("resolution", resolution),
        ("inscribed_radius_m", inscribed_radius_m),
        ("inflation_radius_m", inflation_radius_m),
        ("cost_scaling_factor", cost_scaling_factor),
    ):
        if not (is_real(value) and value >= 0) or (name == "resolution" and value <= 0):
            raise InputError(f"inflate.{name}: expected a finite number {'> 0' if name == 'resolution' else '>= 0'}")
    from scipy import ndimage

    cost = np.zeros(obs.shape, dtype=np.int64)
    if obs.any():
        d = ndimage.distance_transform_edt(~obs) * resolution
        decay = np.floor((COST_INSCRIBED - 1) * np.exp(-cost_scaling_factor * (d - inscribed_radius_m)))
        cost = np.where(d <= inflation_radius_m + 1e-9, decay, 0).astype(np.int64)
        cost[d <= inscribed_radius_m + 1e-9] = COST_INSCRIBED
        cost[obs] = COST_LETHAL
    if unknown is not None:
        unk = np.asarray(unknown, dtype=bool) & ~obs
        cost[unk & (cost < COST_INSCRIBED)] = COST_UNKNOWN
    return translate(cost)


__all__ = [
    "LETHAL",
    "MAX_COSTMAP_COST_WEIGHT",
    "INSCRIBED",
    "MAX_INFLATION",
    "NAV2",
    "NAV2_INSCRIBED_AS_OBSTACLE",
    "OCCUPANCY",
    "SEMANTICS",
    "check_semantics",
    "cost_field",
    "inflate",
    "thresholds",
    "translate",
]
