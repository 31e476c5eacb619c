"""The spatial Mnemosyne ViT that warm-starts the SQP MPC (seed 002 §5.2).

`inputs` turns an MPC problem into the model's inputs (a robot-frame crop of the distance field + the robot state,
sub-goal and reference), `model` is the ViT whose attention is Mnemosyne's bidirectional compact associative memory,
`data` builds training arrays from a collected store, `train` fits it, `compare` sets runs side by side, `export`
writes ONNX with its metadata and `runtime` runs it with onnxruntime. Which start a solve gets (`MODES`) is the
controller's choice (`mnemo_mpc.nav.controller`, `choose_start` for "hybrid"); the model runs off the control step
(`mnemo_mpc.nav.prefetch`).
"""

from mnemo_mpc.nav.modes import MODES, SQP_MODES  # the controller's choices, named where they are made

__all__ = ["MODES", "SQP_MODES"]
