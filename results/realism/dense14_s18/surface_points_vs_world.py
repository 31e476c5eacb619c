"""How far the controller's lidar surface points lie from the true walls (docs/realism.md, eighteenth session).

Runs one dense world mapless with the realistic Jackal, without real time (so a run repeats exactly), and every 20
steps takes the surface points of the obstacle cells the MPC's field refined within 1 m of the robot, moves them into
the map frame by the true odometry error (the true pose against the odometry's) and measures each one's signed
distance to the world's walls: positive in free space (a wall believed nearer: safe), negative inside a wall (a wall
believed farther: the optimistic side).

    PYTHONPATH=<checkout> python results/realism/dense14_s18/surface_points_vs_world.py SEED SECONDS

from a checkout of the commit to measure (run in its root: it reads config/robots/jackal.yaml). The eighteenth
session's figures: `1020 20` and `1055 20` at 4ec61ae with the hold added (each cell's own mean) and at 5825132.
"""

import sys

import numpy as np


def main() -> None:
    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.profile import NavParams
    from mnemo_mpc.sim.episode import EpisodeConfig, run_episode
    from mnemo_mpc.sim.profile import closed_loop_setup
    from mnemo_mpc.sim.simulator import Simulator
    from mnemo_mpc.sim.worlds import generate_world

    seed, seconds = int(sys.argv[1]), float(sys.argv[2])
    setup = closed_loop_setup(NavParams.from_yaml("config/robots/jackal.yaml"), real_time=False, realism="profile")
    world = generate_world(seed, setup.world, kind="dense")
    outside = DistanceField(world.grid, "occupied")
    inside = DistanceField(
        world.grid.with_data(np.where(world.grid.occupied_mask(), 0, 100).astype(np.int8)), "occupied"
    )
    errors = []

    class Observer:
        def step(self, k, obs, goal, out, controller):
            surfaces = controller._surfaces
            if k % 20 or k == 0 or out.field is None or surfaces is None:
                return {}
            rows, cols = np.nonzero(surfaces.known & out.field.obstacles)
            points = surfaces.points[rows, cols]
            points = points[np.hypot(*(points - obs.pose[:2]).T) < 1.0]
            if len(points) == 0:
                return {}
            turn = obs.true_pose[2] - obs.pose[2]
            rot = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
            in_map = (points - obs.pose[:2]) @ rot.T + obs.true_pose[:2]
            out_d, in_d = outside.exact_distance(in_map), inside.exact_distance(in_map)
            errors.append(np.where(out_d > 1e-9, out_d, -in_d))
            return {}

        def finish(self, *args):
            return None

    with Simulator(setup.sim) as sim:
        controller = setup.controller("shift")
        config = EpisodeConfig(global_path=False, time_limit_s=seconds)
        run_episode(world, sim=sim, controller=controller, config=config, observer=Observer())
    e = np.concatenate(errors)
    p1, p10, p50, p90, p99 = np.percentile(e, [1, 10, 50, 90, 99])
    sys.stdout.write(
        f"{len(e)} points; signed distance to the true walls (+ in free space): p1 {p1:.4f} p10 {p10:.4f} "
        f"p50 {p50:.4f} p90 {p90:.4f} p99 {p99:.4f} m; over 1 cm inside a wall: {np.mean(e < -0.01):.3f}\n"
    )


if __name__ == "__main__":
    main()
