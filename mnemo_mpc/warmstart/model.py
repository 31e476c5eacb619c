"""The spatial Mnemosyne ViT (seed 002 §5.2): occupancy context -> a near-optimal control sequence.

Seed 002 §5.2: "the occupancy grid is first pre-processed by a convolution layer and then flattened to a sequence.
Each element (token) of the sequence corresponds to a different 5x5 patch of the original frame which is then
enriched with positional encoding. The pre-processed input is then fed to 3 Mnemosyne attention and MLP layers of
hidden dimension 64. The final embedding of one of the tokens is chosen as a latent representation of the occupancy
grid, l_oc. p_r, p_g and l_oc are concatenated and processed by an MLP which outputs the predicted action trajectory."

Here: the convolution is the patch embedding (kernel = stride = `patch`), positions are learned, a learned latent
token is prepended and its final embedding is l_oc; attention is Mnemosyne's bidirectional compact associative
memory (`CAMAttention`: Eq. 4 and 6 with t = M, features from `mnemo_mpc.memory.features`); the robot state, sub-goal
and reference (`inputs.vector_input`) join l_oc in the MLP head. The head predicts control increments bounded by the
acceleration limits, accumulated from the current velocity and clipped to the velocity bounds, so a prediction obeys
the bounds and (up to the clipping) the rate limits; the states follow by the robot model's rollout (`rollout`,
differentiable and exact), so a prediction is dynamically consistent by construction.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.memory.features import draw_projections, favor_plus_features, hyperbolic_features
from mnemo_mpc.warmstart.inputs import InputSpec

ATTENTIONS = ("favor_plus", "hyperbolic", "favor_plus_plus", "softmax")


@dataclass(frozen=True)
class RobotLimits:
    """The robot model's limits the decoder enforces (`RobotModel`'s fields)."""

    v_min: float = 0.0
    v_max: float = 0.5
    w_max: float = 1.5
    a_max: float = 1.0
    alpha_max: float = 3.0

    @classmethod
    def of(cls, robot: object) -> RobotLimits:
        return cls(**{k: float(getattr(robot, k)) for k in ("v_min", "v_max", "w_max", "a_max", "alpha_max")})


@dataclass(frozen=True)
class ViTConfig:
    """The paper's architecture by default: 5x5 patches, 3 CAM attention + MLP layers of width 64 (§5.2)."""

    inputs: InputSpec = field(default_factory=InputSpec)
    limits: RobotLimits = field(default_factory=RobotLimits)
    patch: int = 5
    width: int = 64
    depth: int = 3
    heads: int = 1
    mlp_ratio: int = 2
    attention: str = "favor_plus"  # feature map of the compact associative memory, or exact "softmax"
    num_features: int = 16  # r, random features per head
    head_width: int = 256
    feature_seed: int = 0  # the random projections are fixed buffers drawn from this seed

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise InputError(f"ViTConfig.attention: expected one of {ATTENTIONS}, got {self.attention!r}")
        if self.inputs.size % self.patch:
            raise InputError(f"ViTConfig: the crop ({self.inputs.size}) must be a multiple of the patch ({self.patch})")
        if self.width % self.heads:
            raise InputError(f"ViTConfig: width {self.width} is not divisible by heads {self.heads}")
        if self.attention == "hyperbolic" and self.num_features % 2:
            raise InputError("ViTConfig.num_features: hyperbolic features need an even number")
        for name in ("width", "depth", "heads", "mlp_ratio", "num_features", "head_width", "patch"):
            if getattr(self, name) < 1:
                raise InputError(f"ViTConfig.{name}: expected >= 1, got {getattr(self, name)}")

    @property
    def tokens(self) -> int:
        return (self.inputs.size // self.patch) ** 2

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ViTConfig:
        d = dict(d)
        d["inputs"] = InputSpec(**d["inputs"])
        d["limits"] = RobotLimits(**d["limits"])
        return cls(**d)


def _rho_star(gamma: Tensor, dim: int) -> Tensor:
    """ρ* of Eq. 9 (seed 002) in the cancellation-free form 2d / (2γ + d + √((2γ + d)² + 8dγ)), as tensor ops."""
    s = 2.0 * gamma + dim
    return (2.0 * dim / (s + torch.sqrt(s * s + 8.0 * dim * gamma))).clamp(max=1.0 - 1e-6)


def _favor_plus_plus(x: Tensor, omega: Tensor, rho: Tensor, stabilize: str) -> Tensor:
    """FAVOR++ features (§3.2.1, `memory.features.favor_plus_plus_features`) with a tensor ρ of shape (B, 1, 1):
    A = (1 - 1/ρ)/8 (the module docstring of `memory.features` says why), B = √(1 + 4Â), C = -1/2,
    D = (1 + 4Â)^{d/4}."""
    d, r = omega.shape[1], omega.shape[0]
    a_hat = (1.0 / rho - 1.0) / 8.0
    b = torch.sqrt(1.0 + 4.0 * a_hat)
    exponent = b * (x @ omega.T) - a_hat * (omega * omega).sum(-1) - 0.5 * (x * x).sum(-1, keepdim=True)
    exponent = exponent + (d / 4.0) * torch.log1p(4.0 * a_hat)
    shift = exponent.amax(dim=-1, keepdim=True) if stabilize == "row" else exponent.amax(dim=(-2, -1), keepdim=True)
    return torch.exp(exponent - shift.detach()) / math.sqrt(r)


class CAMAttention(nn.Module):
    """Bidirectional compact associative memory (seed 002 Eq. 4 and 6 with t = M, λ ≡ 1):

        N = Σ_μ φ(k^μ) v^μᵀ,  Ψ = Σ_μ φ(k^μ),  out(q) = φ(q)ᵀN / φ(q)ᵀΨ,

    φ the positive random features of `attention` (FAVOR+ Eq. 7, hyperbolic Eq. 8, FAVOR++ with ρ* of Eq. 9 per
    example), q and k scaled by d^{-1/4} (the softmax temperature 1/√d) and max-shifted as in the Performer code.
    "softmax" is exact attention (the comparison for cost and accuracy)."""

    def __init__(self, cfg: ViTConfig, layer: int) -> None:
        super().__init__()
        self.heads, self.kind = cfg.heads, cfg.attention
        self.head_dim = cfg.width // cfg.heads
        self.qkv = nn.Linear(cfg.width, 3 * cfg.width)
        self.out = nn.Linear(cfg.width, cfg.width)
        if self.kind != "softmax":
            rows = cfg.num_features // 2 if self.kind == "hyperbolic" else cfg.num_features
            gen = torch.Generator().manual_seed(cfg.feature_seed * 1000 + layer)
            self.register_buffer("omega", draw_projections(rows, self.head_dim, generator=gen))

    def forward(self, x: Tensor) -> Tensor:
        b, t, w = x.shape
        q, k, v = self.qkv(x).reshape(b, t, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        scale = self.head_dim**-0.25
        q, k = q * scale, k * scale
        if self.kind == "softmax":
            y = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
        else:
            if self.kind == "favor_plus":
                qf = favor_plus_features(q, self.omega, stabilize="row")
                kf = favor_plus_features(k, self.omega, stabilize="sequence")
            elif self.kind == "hyperbolic":
                qf = hyperbolic_features(q, self.omega, stabilize="row")
                kf = hyperbolic_features(k, self.omega, stabilize="sequence")
            else:
                # γ = mean_ij |q_i + k_j|² from sums (memory.features.favor_plus_plus_gamma), per example and head
                gamma = (
                    (q * q).sum((-2, -1)) / t
                    + (k * k).sum((-2, -1)) / t
                    + 2.0 * (q.sum(-2) * k.sum(-2)).sum(-1) / (t * t)
                )
                rho = _rho_star(gamma, self.head_dim)[..., None, None]
                qf = _favor_plus_plus(q, self.omega, rho, "row")
                kf = _favor_plus_plus(k, self.omega, rho, "sequence")
            memory = kf.transpose(-1, -2) @ v  # N
            normaliser = kf.sum(dim=-2, keepdim=True)  # Ψ
            y = (qf @ memory) / (qf * normaliser).sum(-1, keepdim=True)
        return self.out(y.transpose(1, 2).reshape(b, t, w))


class Block(nn.Module):
    def __init__(self, cfg: ViTConfig, layer: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.width)
        self.attention = CAMAttention(cfg, layer)
        self.norm2 = nn.LayerNorm(cfg.width)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.width, cfg.mlp_ratio * cfg.width), nn.GELU(), nn.Linear(cfg.mlp_ratio * cfg.width, cfg.width)
        )

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class SpatialMnemosyneViT(nn.Module):
    """grid (B, 2, S, S), vector (B, 2N + 7) -> controls (B, N, 2) (`inputs` says what the inputs hold)."""

    def __init__(self, cfg: ViTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        spec, lim = cfg.inputs, cfg.limits
        self.patch_embed = nn.Conv2d(2, cfg.width, cfg.patch, stride=cfg.patch)
        self.position = nn.Parameter(torch.zeros(1, cfg.tokens + 1, cfg.width))
        self.latent = nn.Parameter(torch.zeros(1, 1, cfg.width))
        nn.init.trunc_normal_(self.position, std=0.02)
        nn.init.trunc_normal_(self.latent, std=0.02)
        self.blocks = nn.Sequential(*[Block(cfg, i) for i in range(cfg.depth)])
        self.norm = nn.LayerNorm(cfg.width)
        self.head = nn.Sequential(
            nn.Linear(cfg.width + spec.vector_size, cfg.head_width),
            nn.GELU(),
            nn.Linear(cfg.head_width, cfg.head_width),
            nn.GELU(),
            nn.Linear(cfg.head_width, 2 * spec.N),
        )
        nn.init.zeros_(self.head[-1].weight)  # start from "keep the current velocity"
        nn.init.zeros_(self.head[-1].bias)
        self.register_buffer("step_bound", torch.tensor([lim.a_max, lim.alpha_max]) * spec.dt)
        self.register_buffer("lower", torch.tensor([lim.v_min, -lim.w_max]))
        self.register_buffer("upper", torch.tensor([lim.v_max, lim.w_max]))
        self.register_buffer("velocity_scale", torch.tensor([lim.v_max, lim.w_max]))

    def latent_of(self, grid: Tensor) -> Tensor:
        """l_oc: the latent token's final embedding (B, width)."""
        x = self.patch_embed(grid).flatten(2).transpose(1, 2)
        x = torch.cat([self.latent.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        return self.norm(self.blocks(x))[:, 0]

    def forward(self, grid: Tensor, vector: Tensor) -> Tensor:
        n = self.cfg.inputs.N
        raw = self.head(torch.cat([self.latent_of(grid), vector], dim=-1)).reshape(-1, n, 2)
        current = vector[:, None, 0:2] * self.velocity_scale  # the robot's velocity (vector entries 0, 1)
        controls = current + torch.cumsum(torch.tanh(raw) * self.step_bound, dim=1)
        return torch.minimum(torch.maximum(controls, self.lower), self.upper)


def rollout(controls: Tensor, dt: float, start: Tensor | None = None) -> Tensor:
    """States (..., N+1, 3) of the unicycle under `controls` (..., N, 2) from `start` (..., 3), default the origin
    (the robot frame): `robot.unicycle_step` in closed form, yaw_k = yaw_0 + dt Σ_{j<k} w_j, so the whole rollout is
    three cumulative sums (exact, differentiable, and a handful of ONNX nodes)."""
    v, w = controls[..., 0], controls[..., 1]
    if start is None:
        start = torch.zeros(*controls.shape[:-2], 3, dtype=controls.dtype, device=controls.device)
    yaw = start[..., 2:3] + dt * torch.cumsum(w, dim=-1)
    yaw_before = torch.cat([start[..., 2:3], yaw[..., :-1]], dim=-1)
    mid = yaw_before + 0.5 * dt * w
    x = start[..., 0:1] + torch.cumsum(dt * v * torch.cos(mid), dim=-1)
    y = start[..., 1:2] + torch.cumsum(dt * v * torch.sin(mid), dim=-1)
    states = torch.stack([x, y, yaw], dim=-1)
    return torch.cat([start[..., None, :], states], dim=-2)
