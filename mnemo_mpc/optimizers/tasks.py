"""Optimizee tasks for learned optimizers (seed 002 §5.1): MLP image classifiers on a bundled or user dataset.

- `load_digits`: scikit-learn's bundled 8×8 digits (1797 images, 10 classes), the default stand-in for MNIST (no
  download); pixels scaled to [0, 1], a fixed stratified train/validation split.
- `read_idx` / `load_mnist_idx`: the MNIST IDX format (gzip or plain) for users' own files, e.g. the original MNIST
  `train-images-idx3-ubyte` / `train-labels-idx1-ubyte`.
- `MLPTask`: a functional MLP over ONE flat parameter vector θ (what a coordinate-wise optimizer sees), so that
  meta-training can differentiate through θ_{t+1} = θ_t + update. `MLP_VARIANTS` are the four MLPs of Fig. 2:
  1×20 sigmoid (the meta-training task), 2×20 sigmoid, 1×40 sigmoid, 1×20 relu.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from mnemo_mpc.errors import InputError

__all__ = [
    "DATASETS",
    "MLP_VARIANTS",
    "ImageData",
    "MLPSpec",
    "MLPTask",
    "load_dataset",
    "load_digits",
    "load_mnist_idx",
    "read_idx",
    "sample_batch",
]

DATASETS = ("digits", "idx")


@dataclass(frozen=True)
class ImageData:
    """Flattened images (N, features) in [0, 1] and integer labels (N,), split into train and validation."""

    name: str
    x_train: Tensor
    y_train: Tensor
    x_val: Tensor
    y_val: Tensor
    num_classes: int

    @property
    def num_inputs(self) -> int:
        return int(self.x_train.shape[1])


def _split(name: str, x: np.ndarray, y: np.ndarray, val_fraction: float, seed: int) -> ImageData:
    if not 0.0 < val_fraction < 1.0:
        raise InputError(f"val_fraction must lie in (0, 1), got {val_fraction!r}")
    rng = np.random.default_rng(seed)
    val_idx = []
    # Stratified: every class keeps the same share in both splits.
    for c in np.unique(y):
        idx = np.flatnonzero(y == c)
        rng.shuffle(idx)
        val_idx.append(idx[: max(1, round(val_fraction * len(idx)))])
    val = np.sort(np.concatenate(val_idx))
    train = np.setdiff1d(np.arange(len(y)), val)
    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    yt = torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64))
    return ImageData(name, xt[train], yt[train], xt[val], yt[val], int(y.max()) + 1)


def load_digits(val_fraction: float = 0.2, seed: int = 0) -> ImageData:
    """scikit-learn's bundled digits (8×8 grey images, 16 levels) as `ImageData`."""
    from sklearn.datasets import load_digits as sk_load_digits

    bunch = sk_load_digits()
    return _split("digits", bunch.data / 16.0, bunch.target, val_fraction, seed)


_IDX_DTYPES = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}


def read_idx(path: str | os.PathLike[str]) -> np.ndarray:
    """Read an IDX file (LeCun's MNIST format), plain or gzip-compressed, into an array of its stored shape.

    Header: two zero bytes, a type code (0x08 ubyte, 0x09 byte, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E
    float64), the number of dimensions, then each dimension as a big-endian uint32; then the data, row-major.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read IDX file ({exc.strerror or exc})") from exc
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: gzip-compressed but not readable ({exc})") from exc
    if len(raw) < 4:
        raise InputError(f"{path}: {len(raw)} bytes, too short for an IDX header (4 bytes of magic number)")
    zero, code, ndim = raw[:2], raw[2], raw[3]
    if zero != b"\x00\x00" or code not in _IDX_DTYPES or ndim < 1:
        raise InputError(
            f"{path}: bad IDX magic number 0x{raw[:4].hex()}: expected 0x0000TTNN with type TT in "
            f"{{{', '.join(f'{c:02x}' for c in _IDX_DTYPES)}}} and NN >= 1 dimensions (e.g. 0x00000803 for images)"
        )
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise InputError(f"{path}: truncated IDX header: {ndim} dimensions need {header} bytes, file has {len(raw)}")
    shape = struct.unpack(f">{ndim}I", raw[4:header])
    dtype = _IDX_DTYPES[code]
    expected = math.prod(shape) * dtype.itemsize
    if len(raw) - header != expected:
        raise InputError(
            f"{path}: IDX shape {shape} of {dtype.name} needs {expected} data bytes, file has {len(raw) - header}"
        )
    return np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


def load_mnist_idx(
    images: str | os.PathLike[str],
    labels: str | os.PathLike[str],
    *,
    val_fraction: float = 0.2,
    seed: int = 0,
    max_value: float | None = None,
) -> ImageData:
    """Images (N, H, W) and labels (N,) from IDX files as `ImageData`; pixels divided by `max_value` (default:
    255 for ubyte images, else the largest pixel)."""
    x, y = read_idx(images), read_idx(labels)
    if x.ndim < 2:
        raise InputError(f"{images}: expected images of shape (N, ...), got shape {x.shape}")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise InputError(f"{labels}: expected {x.shape[0]} labels of shape (N,) to match {images}, got {y.shape}")
    if not np.issubdtype(y.dtype, np.integer) or y.min() < 0:
        raise InputError(f"{labels}: labels must be non-negative integers, got dtype {y.dtype}, min {y.min()}")
    scale = max_value if max_value is not None else (255.0 if x.dtype == np.uint8 else float(np.abs(x).max() or 1.0))
    x = x.reshape(x.shape[0], -1).astype(np.float32) / scale
    return _split(Path(images).name, x, y.astype(np.int64), val_fraction, seed)


def load_dataset(
    name: str, *, images: str | None = None, labels: str | None = None, val_fraction: float = 0.2, seed: int = 0
) -> ImageData:
    """`"digits"` (bundled) or `"idx"` (needs `images` and `labels` paths)."""
    if name == "digits":
        return load_digits(val_fraction, seed)
    if name == "idx":
        if not images or not labels:
            raise InputError("dataset 'idx' needs both an images and a labels IDX file")
        return load_mnist_idx(images, labels, val_fraction=val_fraction, seed=seed)
    raise InputError(f"dataset must be one of {DATASETS}, got {name!r}")


def sample_batch(data: ImageData, batch_size: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """`batch_size` training examples drawn without replacement (with replacement only if the set is smaller)."""
    n = data.x_train.shape[0]
    if batch_size <= n:
        idx = torch.randperm(n, generator=generator)[:batch_size]
    else:
        idx = torch.randint(n, (batch_size,), generator=generator)
    return data.x_train[idx], data.y_train[idx]


@dataclass(frozen=True)
class MLPSpec:
    """Hidden layer widths and activation of an MLP classifier."""

    hidden: tuple[int, ...] = (20,)
    activation: str = "sigmoid"

    def __post_init__(self) -> None:
        if self.activation not in _ACTIVATIONS:
            raise InputError(f"activation must be one of {sorted(_ACTIVATIONS)}, got {self.activation!r}")
        if not self.hidden or any(int(h) < 1 for h in self.hidden):
            raise InputError(f"hidden widths must be >= 1, got {self.hidden!r}")


_ACTIVATIONS = {"sigmoid": torch.sigmoid, "relu": torch.relu, "tanh": torch.tanh}

MLP_VARIANTS: dict[str, MLPSpec] = {
    "mlp_1x20_sigmoid": MLPSpec((20,), "sigmoid"),
    "mlp_2x20_sigmoid": MLPSpec((20, 20), "sigmoid"),
    "mlp_1x40_sigmoid": MLPSpec((40,), "sigmoid"),
    "mlp_1x20_relu": MLPSpec((20,), "relu"),
}


class MLPTask:
    """Cross-entropy of an MLP classifier as a function of one flat parameter vector θ (module docstring)."""

    def __init__(self, spec: MLPSpec | str, num_inputs: int, num_classes: int) -> None:
        if isinstance(spec, str):
            if spec not in MLP_VARIANTS:
                raise InputError(f"MLP task must be one of {sorted(MLP_VARIANTS)}, got {spec!r}")
            spec = MLP_VARIANTS[spec]
        self.spec = spec
        widths = [num_inputs, *spec.hidden, num_classes]
        self.shapes = [(widths[i + 1], widths[i]) for i in range(len(widths) - 1)]
        self.num_params = sum(o * i + o for o, i in self.shapes)
        self._act = _ACTIVATIONS[spec.activation]

    def init_params(self, generator: torch.Generator) -> Tensor:
        """θ_0 as torch.nn.Linear initialises: weights and biases ~ U(-1/√fan_in, 1/√fan_in)."""
        parts = []
        for out_dim, in_dim in self.shapes:
            bound = 1.0 / math.sqrt(in_dim)
            parts.append((torch.rand(out_dim * in_dim + out_dim, generator=generator) * 2.0 - 1.0) * bound)
        return torch.cat(parts)

    def logits(self, theta: Tensor, x: Tensor) -> Tensor:
        if theta.shape != (self.num_params,):
            raise InputError(f"θ must have shape ({self.num_params},), got {tuple(theta.shape)}")
        h, offset = x, 0
        for i, (out_dim, in_dim) in enumerate(self.shapes):
            w = theta[offset : offset + out_dim * in_dim].view(out_dim, in_dim)
            offset += out_dim * in_dim
            b = theta[offset : offset + out_dim]
            offset += out_dim
            h = F.linear(h, w, b)
            if i < len(self.shapes) - 1:
                h = self._act(h)
        return h

    def loss(self, theta: Tensor, x: Tensor, y: Tensor) -> Tensor:
        return F.cross_entropy(self.logits(theta, x), y)

    @torch.no_grad()
    def accuracy(self, theta: Tensor, x: Tensor, y: Tensor) -> float:
        return float((self.logits(theta, x).argmax(dim=-1) == y).float().mean())
