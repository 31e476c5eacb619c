"""The LSTM learned optimizer of Andrychowicz et al. (2016), the baseline of seed 002 §5.1.

Coordinate-wise: the same preprocessing (log-magnitude and sign, p = 10), a stack of LSTM cells (2 layers of 20),
then a linear layer -> update times `output_scale` (0.1 in Andrychowicz et al.). State per coordinate: (h, c) per
layer, 2 · layers · hidden numbers, also independent of the step count.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.optimizers.base import LearnedOptimizer, LearnedOptimizerConfig, State, check_grad
from mnemo_mpc.optimizers.preprocess import PREPROCESSED_DIM, preprocess_gradients

__all__ = ["LSTMLearnedOptimizer"]


class LSTMLearnedOptimizer(LearnedOptimizer):
    """Andrychowicz et al.'s coordinate-wise LSTM optimizer: gradient (n,) -> update (n,)."""

    def __init__(self, config: LearnedOptimizerConfig | None = None) -> None:
        super().__init__()
        config = config or LearnedOptimizerConfig(kind="lstm")
        if config.kind != "lstm":
            raise InputError(f"LSTMLearnedOptimizer needs config.kind='lstm', got {config.kind!r}")
        self.config = config
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.seed)
            self.layers = nn.ModuleList(
                nn.LSTMCell(PREPROCESSED_DIM if i == 0 else config.lstm_hidden, config.lstm_hidden)
                for i in range(config.lstm_layers)
            )
            self.head = nn.Linear(config.lstm_hidden, 1)

    def init_state(self, n: int, *, device: torch.device | str | None = None) -> State:
        shape = (n, self.config.lstm_hidden)
        state: State = {}
        for i in range(self.config.lstm_layers):
            state[f"layer{i}.h"] = torch.zeros(shape, dtype=self.dtype, device=device)
            state[f"layer{i}.c"] = torch.zeros(shape, dtype=self.dtype, device=device)
        return state

    def forward(self, grad: Tensor, state: State) -> tuple[Tensor, State]:
        check_grad(grad)
        x = preprocess_gradients(grad.to(self.dtype), self.config.preprocess_p)
        new: State = {}
        for i, layer in enumerate(self.layers):
            h, c = layer(x, (state[f"layer{i}.h"], state[f"layer{i}.c"]))
            new[f"layer{i}.h"], new[f"layer{i}.c"] = h, c
            x = h
        return self.head(x).squeeze(-1) * self.config.output_scale, new
