"""Causal Mnemosyne learned optimizer (seed 002 §5.1), its LSTM baseline, optimizee tasks and meta-training.

- `preprocess`: Andrychowicz et al. (2016) gradient preprocessing (log-magnitude and sign, p = 10).
- `base`: the coordinate-wise `LearnedOptimizer` interface and `LearnedOptimizerConfig` (the paper's sizes).
- `cell`: `CausalMnemosyneCell` (Eq. 3-6, causal, discounted; FAVOR+ / hyperbolic / thickened FAVOR++ from
  `mnemo_mpc.memory`) and `MnemosyneLearnedOptimizer` (two stacked cells + linear layer).
- `lstm`: `LSTMLearnedOptimizer`, the Andrychowicz et al. baseline (2 layers of 20).
- `attention`: `AttentionCacheLearnedOptimizer`, the regular-attention ablation (softmax over a cache of h steps).
- `factory`: build from a config; save/load weights (also from a meta-training checkpoint or run directory).
- `tasks`: bundled digits, MNIST-IDX reader, functional MLP optimizees (the four MLPs of Fig. 2).
- `vit_task`: `ViTTask`, a small Vision Transformer optimizee (Fig. 3: 3 layers of size 16, 2 heads).
- `meta_train`: truncated meta-training with the on-policy Adam imitation loss and random scaling; resumable.
- `torch_optim`: `MnemosyneOptimizer`, a `torch.optim.Optimizer` driven by a meta-trained learned optimizer.
- `bench`: state bytes per coordinate and step() time vs Adam on a ~1M-parameter model.
"""

from __future__ import annotations

import importlib
from typing import Any

# The public names, importable from the package (`from mnemo_mpc.optimizers import MnemosyneOptimizer`), loaded on
# first use: importing the package stays free of torch until one of them is asked for.
_EXPORTS = {
    "MnemosyneOptimizer": "torch_optim",
    "LearnedOptimizerConfig": "base",
    "LearnedOptimizer": "base",
    "MnemosyneLearnedOptimizer": "cell",
    "LSTMLearnedOptimizer": "lstm",
    "AttentionCacheLearnedOptimizer": "attention",
    "build_learned_optimizer": "factory",
    "load_learned_optimizer": "factory",
    "save_learned_optimizer": "factory",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
