"""The controller's choices a command line or a node parameter names, import-light (no solver behind them).

`MODES`: the SQP's start -- hold the pose ("cold"), the shifted previous solution ("shift"), a warm-start provider's
prediction ("learned", seed 002 §5.2's learned start), or the shift where there is a fresh one and the prediction
where there is none ("hybrid", `nav.controller.choose_start`). "learned" and "hybrid" need a provider, which the
controller is handed (`mnemo_mpc.warmstart.runtime` makes one from an ONNX model); nav never builds one.

`SQP_MODES`: how many SQP iterations a tick runs -- to convergence, up to `MPCConfig.max_iter` ("full"), or one
(real-time iteration, "rti": `Controller._plan`).
"""

MODES = ("cold", "shift", "learned", "hybrid")
SQP_MODES = ("full", "rti")
