"""PyBullet worlds, robot, lidar -> local grid sensor, closed-loop episodes (uses the library; never imported by it)."""
