"""mnemo_mpc: real-time SQP navigation warm-started by a spatial Mnemosyne ViT, and the research studies."""

import logging

__version__ = "0.1.0"

# Library code logs; applications (the CLI, the ROS node) decide where it goes.
logging.getLogger(__name__).addHandler(logging.NullHandler())
