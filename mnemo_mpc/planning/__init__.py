"""Robot model, occupancy grid + ESDF, SQP MPC (CasADi) and global path."""
