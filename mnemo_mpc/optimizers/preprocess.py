"""Gradient preprocessing of Andrychowicz et al. (2016, §3.2), used by every learned optimizer here (seed 002 §5.1:
"the gradient is pre-processed as proposed in Andrychowicz et al.").

Each gradient coordinate g becomes two inputs whose scale does not depend on the magnitude of g:

    (log|g| / p, sign g)   if |g| >= e^{-p}
    (-1, e^p g)            otherwise

so gradients spanning many orders of magnitude reach the network in a bounded range; p = 10 as in the paper.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mnemo_mpc.errors import InputError

__all__ = ["PREPROCESSED_DIM", "preprocess_gradients"]

PREPROCESSED_DIM = 2


def preprocess_gradients(grad: Tensor, p: float = 10.0) -> Tensor:
    """(...) gradient -> (..., 2) inputs as in the module docstring. Non-finite gradients are rejected."""
    if not p > 0 or not math.isfinite(p):
        raise InputError(f"preprocessing p must be finite and > 0, got {p!r}")
    if not torch.all(torch.isfinite(grad)):
        raise InputError("gradient contains NaN or inf: the learned optimizer cannot make an update from it")
    threshold = math.exp(-p)
    magnitude = grad.abs()
    large = magnitude >= threshold
    # clamp keeps log finite on the branch torch.where discards (and its gradient, were one taken, too).
    log_part = torch.where(large, torch.log(magnitude.clamp(min=threshold)) / p, torch.full_like(grad, -1.0))
    sign_part = torch.where(large, torch.sign(grad), grad * math.exp(p))
    return torch.stack((log_part, sign_part), dim=-1)
