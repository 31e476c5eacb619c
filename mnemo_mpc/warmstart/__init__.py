"""The spatial Mnemosyne ViT that warm-starts the SQP MPC (seed 002 §5.2).

`inputs` turns an MPC problem into the model's inputs (a robot-frame crop of the distance field + the robot state,
sub-goal and reference), `model` is the ViT whose attention is Mnemosyne's bidirectional compact associative memory,
`data` builds training arrays from a collected store, `train` fits it, `export` writes ONNX with its metadata,
`runtime` runs it with onnxruntime, and `policy` chooses the start (cold / shift / learned / hybrid).
"""
