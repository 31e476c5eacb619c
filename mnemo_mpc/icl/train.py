"""Training protocol of seed 000 §3.3 for linear transformers and Memformers.

"We optimize the function f (8) … using the ADAM optimizer. The matrices A_ℓ are initialized with i.i.d. Gaussian
entries. Each gradient step is computed using a batch of size 1000, and we resample the batch every 100 steps. We
clip the gradient of each matrix to have a maximum norm of 0.01. All plots are averaged over five runs, each with a
different randomly sampled U." The paper gives no step count or learning rate; `ICLTrainConfig`'s defaults for those
(20 000 steps, lr 0.01 halved every 4 000 steps, Adam β = (0.99, 0.9)) are ours, chosen so that the 1-layer model
reaches its optimum on this task, and recorded in every results.json.

A per-layer curve ("log(Loss) vs number of layers/steps", Fig. 1–5) is made of separately trained models with
L = 1, 2, …, L_max layers (`train_per_depth`), not of the intermediate outputs of one deep model, whose early layers
are never asked to predict.

Plateau criterion (issue 12; `ICLTrainConfig.plateau_every > 0`): a fixed-length run can stop short of the optimum, and
then a richer model can end worse than a special case it contains. In plateau mode `steps` is only a cap: every
`plateau_every` steps the held-out log-loss of a fixed validation batch (never the test batch) is measured; when its
best value has not improved by `plateau_tol` nats for `plateau_patience` checks in a row, the learning rate is halved
(a "stall", as in ReduceLROnPlateau: the validation noise of Adam's jitter at the current rate is what a plateau is
measured against), and training stops at stall number `plateau_stalls` or at the cap. The parameters with the best
validation loss are kept.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch
from torch import nn

from mnemo_mpc.errors import InputError
from mnemo_mpc.icl.data import ICLBatch, LinearRegressionTask
from mnemo_mpc.icl.linear_transformer import in_context_loss

log = logging.getLogger(__name__)

DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class ICLTrainConfig:
    """§3.3's protocol. `resample_every = 0` trains on one fixed batch (§4's small-batch experiments)."""

    steps: int = 20000
    batch_size: int = 1000
    resample_every: int = 100
    lr: float = 0.01
    betas: tuple[float, float] = (0.99, 0.9)
    lr_halve_every: int = 4000  # 0: constant learning rate
    clip: float = 0.01  # per-matrix gradient norm cap; 0 disables clipping
    # Plateau criterion (module docstring): 0 = train exactly `steps` with the `lr_halve_every` schedule; > 0 = check
    # the validation log-loss every this many steps, halve lr on a stall, stop at the `plateau_stalls`-th stall.
    plateau_every: int = 0
    plateau_tol: float = 0.01  # nats: a smaller gain over the best validation log-loss is no improvement
    plateau_patience: int = 2  # checks without improvement that make a stall (lr halved)
    plateau_stalls: int = 4  # training stops at this stall
    val_size: int = 1000  # validation prompts for the plateau check (own generator, disjoint from the test batch)
    dtype: str = "float32"
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self) -> None:
        if self.steps < 0 or self.batch_size < 1 or self.resample_every < 0:
            raise InputError(
                f"ICLTrainConfig: steps >= 0, batch_size >= 1, resample_every >= 0 expected; got steps={self.steps}, "
                f"batch_size={self.batch_size}, resample_every={self.resample_every}"
            )
        if not self.lr > 0 or self.clip < 0:
            raise InputError(f"ICLTrainConfig: lr > 0 and clip >= 0 expected, got lr={self.lr}, clip={self.clip}")
        if (
            self.plateau_every < 0
            or self.plateau_stalls < 1
            or self.plateau_patience < 1
            or self.plateau_tol < 0
            or self.val_size < 1
        ):
            raise InputError(
                "ICLTrainConfig: plateau_every >= 0, plateau_stalls >= 1, plateau_patience >= 1, plateau_tol >= 0 and "
                f"val_size >= 1 expected; got {self.plateau_every}, {self.plateau_stalls}, {self.plateau_patience}, "
                f"{self.plateau_tol}, {self.val_size}"
            )
        if self.dtype not in DTYPES:
            raise InputError(f"ICLTrainConfig.dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]


@dataclass
class TrainResult:
    """Loss every `record_every` steps (the training batch's loss before the step) and the wall time; in plateau mode
    also the validation log-losses at each check, the steps actually taken and why training stopped."""

    steps: list[int] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    val_steps: list[int] = field(default_factory=list)
    val_log_losses: list[float] = field(default_factory=list)
    steps_done: int = 0
    stopped_by: str = "steps"  # "steps" (fixed length or cap reached) | "plateau"
    best_val_log_loss: float = float("nan")

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.losses else float("nan")


def clip_per_matrix_(groups: Iterable[tuple[torch.Tensor, int]], max_norm: float) -> None:
    """Scale each matrix's gradient (each trailing 2-D slice when matrix_dims = 2, each entry when 0) to norm
    <= max_norm, in place (§3.3: "clip the gradient of each matrix to have a maximum norm of 0.01")."""
    for p, matrix_dims in groups:
        if p.grad is None:
            continue
        g = p.grad
        if matrix_dims == 2 and g.ndim >= 2:
            norms = g.flatten(-2).norm(dim=-1)[..., None, None]
        else:
            norms = g.abs()
        g.mul_(torch.clamp(max_norm / norms.clamp_min(1e-30), max=1.0))


def _clip_groups(model: nn.Module, params: list[torch.Tensor]) -> list[tuple[torch.Tensor, int]]:
    wanted = {id(p) for p in params}
    if hasattr(model, "clip_groups"):
        return [(p, m) for p, m in model.clip_groups() if id(p) in wanted]
    return [(p, 2 if p.ndim >= 2 else 0) for p in params]


def train(
    model: nn.Module,
    task: LinearRegressionTask,
    cfg: ICLTrainConfig,
    generator: torch.Generator,
    params: list[torch.Tensor] | None = None,
    fixed_batch: ICLBatch | None = None,
    desc: str = "train",
    record_every: int = 100,
    callback: Callable[[int, nn.Module], None] | None = None,
    val_batch: ICLBatch | None = None,
) -> TrainResult:
    """Minimise Eq. 8 with Adam and per-matrix clipping (§3.3). `params` restricts what is trained (e.g. only Γ when
    fine-tuning); `fixed_batch` trains on that batch only (§4); otherwise a fresh batch of `cfg.batch_size` prompts is
    drawn from `task` every `cfg.resample_every` steps.

    `callback(step, model)` runs before every step (step = 0, 1, …) and once after the last one (step = steps
    taken), e.g. to read the parameters during training (App. D). In plateau mode (`cfg.plateau_every > 0`) the
    validation batch is `val_batch`, else the fixed batch when training on one (§4 measures memorisation), else
    `cfg.val_size` prompts drawn from `generator` before training starts."""
    from tqdm import tqdm

    params = list(model.parameters()) if params is None else list(params)
    if not params:
        raise InputError("train: no parameters to train")
    opt = torch.optim.Adam(params, lr=cfg.lr, betas=cfg.betas)
    groups = _clip_groups(model, params)
    res = TrainResult()
    batch = fixed_batch
    plateau = cfg.plateau_every > 0
    if plateau and val_batch is None:
        val_batch = fixed_batch if fixed_batch is not None else task.sample(cfg.val_size, generator)
    best_state: dict[str, torch.Tensor] | None = None
    ref_val = float("inf")  # best validation log-loss at the last improvement by >= plateau_tol
    wait = stalls = 0
    t0 = time.perf_counter()
    step = 0
    for step in tqdm(range(cfg.steps), desc=desc, leave=False, disable=not cfg.progress, mininterval=1.0):
        if plateau and step % cfg.plateau_every == 0:
            val = _log_heldout(model, val_batch)
            res.val_steps.append(step)
            res.val_log_losses.append(val)
            if not val >= res.best_val_log_loss:  # also true while best is nan
                res.best_val_log_loss = val
                best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            if val <= ref_val - cfg.plateau_tol:
                ref_val, wait = val, 0
            else:
                wait += 1
                if wait >= cfg.plateau_patience:
                    wait = 0
                    stalls += 1
                    if stalls >= cfg.plateau_stalls:
                        res.stopped_by = "plateau"
                        break
                    for group in opt.param_groups:
                        group["lr"] *= 0.5
        elif not plateau and cfg.lr_halve_every and step > 0 and step % cfg.lr_halve_every == 0:
            for group in opt.param_groups:
                group["lr"] *= 0.5
        if callback is not None:
            callback(step, model)
        if fixed_batch is None and (batch is None or (cfg.resample_every and step % cfg.resample_every == 0)):
            batch = task.sample(cfg.batch_size, generator)
        opt.zero_grad(set_to_none=True)
        loss = in_context_loss(model(batch.Z0), batch.y_query)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"{desc}: loss became {float(loss.detach())} at step {step}")
        loss.backward()
        if cfg.clip > 0:
            clip_per_matrix_(groups, cfg.clip)
        opt.step()
        if step % record_every == 0 or step == cfg.steps - 1:
            res.steps.append(step)
            res.losses.append(float(loss.detach()))
    else:
        step = cfg.steps  # the loop ran to the cap (or cfg.steps == 0)
    res.steps_done = step
    if plateau:
        if res.stopped_by != "plateau":
            val = _log_heldout(model, val_batch)
            res.val_steps.append(step)
            res.val_log_losses.append(val)
            if not val >= res.best_val_log_loss:
                res.best_val_log_loss = val
                best_state = None  # the current parameters are the best
        if best_state is not None:
            model.load_state_dict(best_state)
    if callback is not None:
        callback(step, model)
    res.wall_s = time.perf_counter() - t0
    log.debug("%s: %d steps in %.1f s, final loss %.4g", desc, cfg.steps, res.wall_s, res.final_loss)
    return res


@torch.no_grad()
def _log_heldout(model: nn.Module, batch: ICLBatch) -> float:
    loss = float(in_context_loss(model(batch.Z0), batch.y_query))
    return math.log(loss) if loss > 0 else float("-inf")


@torch.no_grad()
def heldout_loss(model: nn.Module, batch: ICLBatch) -> float:
    """Eq. 8 on a held-out batch (the final layer's prediction)."""
    return float(in_context_loss(model(batch.Z0), batch.y_query))


@torch.no_grad()
def layer_heldout_losses(model: nn.Module, batch: ICLBatch) -> list[float]:
    """Eq. 8 after each layer of one model (intermediate outputs; see the module docstring for why the figures use
    `train_per_depth` instead)."""
    return [float(in_context_loss(Z, batch.y_query)) for Z in model(batch.Z0, return_layers=True)]


def copy_attention_parameters(src: nn.Module, dst: nn.Module) -> None:
    """Copy the shared attention parameters (A, B, P, Q, a) from a trained transformer into a Memformer of the same
    depth, so the Memformer is fine-tuned from the transformer (App. D: "first train the A_ℓ's … then fine-tune the
    Γ_ℓ's"). Raises if the two disagree in shape."""
    src_params = dict(src.named_parameters())
    copied = 0
    with torch.no_grad():
        for name, p in dst.named_parameters():
            if name in ("A", "B", "P", "Q", "a") and name in src_params:
                if src_params[name].shape != p.shape:
                    raise InputError(
                        f"copy_attention_parameters: {name} is {tuple(src_params[name].shape)} in the "
                        f"source and {tuple(p.shape)} in the target"
                    )
                p.copy_(src_params[name])
                copied += 1
    if copied == 0:
        raise InputError("copy_attention_parameters: no attention parameters in common")


@dataclass
class DepthRun:
    """One model per depth L = 1..L_max: its held-out loss and training curve."""

    layers: list[int]
    test_losses: list[float]
    train_results: list[TrainResult]
    models: list[nn.Module]

    @property
    def val_log_losses(self) -> list[float]:
        """Each depth's best validation log-loss (plateau mode; nan in fixed-length mode)."""
        return [r.best_val_log_loss for r in self.train_results]


def train_per_depth(
    build: Callable[[int], nn.Module],
    max_layers: int,
    task: LinearRegressionTask,
    cfg: ICLTrainConfig,
    seed: int,
    test_batch: ICLBatch,
    fixed_batch: ICLBatch | None = None,
    init_from: list[nn.Module] | None = None,
    trainable: Callable[[nn.Module], list[torch.Tensor]] | None = None,
    desc: str = "",
    val_batch: ICLBatch | None = None,
) -> DepthRun:
    """Train `build(L)` for L = 1..max_layers on `task` (each from the same seeded data stream) and evaluate on
    `test_batch`. `init_from[L-1]` (a trained transformer) seeds the attention parameters of depth L (two-stage
    Memformer training); `trainable(model)` selects the fine-tuned parameters (default: all); `val_batch` is the
    plateau criterion's validation batch (see `train`)."""
    from mnemo_mpc.icl.data import seed_generator

    if max_layers < 1:
        raise InputError(f"train_per_depth: max_layers must be >= 1, got {max_layers}")
    out = DepthRun(layers=[], test_losses=[], train_results=[], models=[])
    for L in range(1, max_layers + 1):
        model = build(L).to(device=cfg.device, dtype=cfg.torch_dtype)
        if init_from is not None:
            copy_attention_parameters(init_from[L - 1], model)
        gen = seed_generator(1_000_003 * (seed + 1) + L, cfg.device)
        res = train(
            model,
            task,
            cfg,
            gen,
            params=None if trainable is None else trainable(model),
            fixed_batch=fixed_batch,
            desc=f"{desc} L={L}",
            val_batch=val_batch,
        )
        out.layers.append(L)
        out.test_losses.append(heldout_loss(model, test_batch))
        out.train_results.append(res)
        out.models.append(model)
    return out
