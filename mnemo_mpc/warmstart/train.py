"""Supervised training of the spatial Mnemosyne ViT on collected SQP solutions (seed 002 §5.2: "trained with
supervised learning on the SQP dataset by minimizing mean squared error between the SQP optimal trajectories and the
predicted trajectories").

Loss = mean squared control error, each control over its range, + `state_weight` x mean squared position error of
the rolled-out states over the horizon's reach (v_max N dt): heading errors accumulate along the horizon, and the
position term weighs them as the MPC's tracking cost does. The split is by world (`data.world_split`); validation
reports the loss and the RMS control error in m/s and rad/s (the units of `bench sqp`'s accuracy curve).

A run directory holds `config.json`, `history.json` (per-epoch train/val loss and errors), `loss_curve.png`,
`checkpoint.pt` (everything to resume: model, optimiser, schedule, epoch, RNG states; written atomically after every
epoch) and `best.pt` (the weights with the lowest validation loss). Re-running the same command resumes; Ctrl-C keeps
the last finished epoch. Under `torchrun` (environment variable WORLD_SIZE > 1) it trains data-parallel
(DistributedDataParallel, gloo on CPU, nccl on CUDA): each process takes its share of every batch, rank 0 writes.
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import math
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mnemo_mpc.atomic import atomic_write_bytes, atomic_write_json
from mnemo_mpc.errors import InputError
from mnemo_mpc.warmstart import data as wdata
from mnemo_mpc.warmstart.inputs import mirror_sign
from mnemo_mpc.warmstart.model import RobotLimits, SpatialMnemosyneViT, ViTConfig, rollout
from mnemo_mpc.warmstart.pack import Pack, read_pack

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WarmStartTrainConfig:
    data: str
    epochs: int = 30
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 1e-4
    warmup_epochs: float = 1.0
    state_weight: float = 1.0
    augment: bool = True  # left-right mirror (an exact symmetry of the problem) on half of each batch
    seed: int = 0
    val_fraction: float = 0.1
    max_train_worlds: int | None = None  # a nested subset of the training worlds (learning curves)
    epoch_examples: int | None = None  # examples per epoch, drawn without replacement (default: the training set)
    device: str = "auto"  # "auto": CUDA when present, else CPU
    threads: int | None = None
    input_workers: int = 1  # processes that build the input cache
    model: ViTConfig = field(default_factory=ViTConfig)

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or not self.lr > 0:
            raise InputError(f"WarmStartTrainConfig: expected epochs >= 1, batch_size >= 1, lr > 0, got {self}")
        if self.epoch_examples is not None and self.epoch_examples < self.batch_size:
            raise InputError(f"WarmStartTrainConfig.epoch_examples: expected >= batch_size, got {self.epoch_examples}")
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise InputError(f"WarmStartTrainConfig.device: expected auto, cpu or cuda[:i], got {self.device!r}")

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self)))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WarmStartTrainConfig:
        d = dict(d)
        d["model"] = ViTConfig.from_dict(d["model"])
        return cls(**d)


class Objective:
    """The loss of the module docstring and the validation errors, for one robot and horizon."""

    def __init__(self, cfg: ViTConfig, state_weight: float, device: torch.device) -> None:
        lim, spec = cfg.limits, cfg.inputs
        self.scale = torch.tensor([lim.v_max - lim.v_min, 2.0 * lim.w_max], device=device)
        self.reach = lim.v_max * spec.N * spec.dt
        self.dt, self.state_weight = spec.dt, state_weight

    def __call__(self, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        control = (((pred - target) / self.scale) ** 2).mean()
        pos = (rollout(pred, self.dt)[..., 1:, :2] - rollout(target, self.dt)[..., 1:, :2]) / self.reach
        return control + self.state_weight * (pos**2).mean()


def _distributed() -> tuple[int, int]:
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {name}: CUDA is not available on this machine")
    return torch.device(name)


def _save(path: Path, obj: Any) -> None:
    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(path, buf.getvalue())


def _schedule(cfg: WarmStartTrainConfig, steps_per_epoch: int) -> Any:
    total = cfg.epochs * steps_per_epoch
    warm = max(1, int(cfg.warmup_epochs * steps_per_epoch))

    def factor(step: int) -> float:
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warm) / max(1, total - warm))))

    return factor


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, arrays: wdata.Arrays, objective: Objective, device: torch.device, batch_size: int = 1024
) -> dict[str, float]:
    """Validation loss and RMS control errors (m/s, rad/s) over `arrays`."""
    model.eval()
    loss, sq, count = 0.0, torch.zeros(2, device=device), 0
    for start in range(0, len(arrays), batch_size):
        sl = slice(start, start + batch_size)
        g = torch.from_numpy(arrays.grid[sl].astype(np.float32)).to(device)
        v = torch.from_numpy(arrays.vector[sl]).to(device)
        y = torch.from_numpy(arrays.controls[sl]).to(device)
        pred = model(g, v)
        loss += float(objective(pred, y)) * y.shape[0]
        sq += ((pred - y) ** 2).sum(dim=(0, 1))
        count += y.shape[0]
    rms = torch.sqrt(sq / (count * arrays.controls.shape[1])).cpu().numpy()
    return {"loss": loss / count, "rms_v": float(rms[0]), "rms_w": float(rms[1])}


# Up to this many epochs each one is marked: a 1-epoch run is a single point, which a bare line does not draw.
MARKERS_UP_TO_EPOCHS = 30


def history_figure(history: list[dict[str, Any]]) -> Any:
    """The loss curve (`plot_history` writes it): train and validation loss, validation RMS errors, per epoch."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    epochs = [h["epoch"] for h in history]
    style = {"marker": "o", "ms": 5} if len(epochs) <= MARKERS_UP_TO_EPOCHS else {}
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.8))
    ax[0].semilogy(epochs, [h["train_loss"] for h in history], label="train", **style)
    ax[0].semilogy(epochs, [h["val_loss"] for h in history], label="validation (held-out worlds)", **style)
    ax[0].set_xlabel("epoch")
    ax[0].set_ylabel("loss (normalised MSE)")
    ax[0].legend()
    ax[1].plot(epochs, [h["val_rms_v"] for h in history], label="v (m/s)", **style)
    ax[1].plot(epochs, [h["val_rms_w"] for h in history], label="w (rad/s)", **style)
    ax[1].set_xlabel("epoch")
    ax[1].set_ylabel("validation RMS control error")
    ax[1].set_yscale("log")
    ax[1].legend()
    for a in ax:
        a.grid(True, which="both", alpha=0.3)
        a.xaxis.set_major_locator(MaxNLocator(integer=True))  # whole epochs, also for one or two
    fig.tight_layout()
    return fig


def plot_history(history: list[dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig = history_figure(history)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _check_pack(cfg: WarmStartTrainConfig, pack: Pack) -> None:
    """A pack fixes the world split and the crop: a configuration asking for another is an error, not another run."""
    split = {"val_fraction": cfg.val_fraction, "seed": cfg.seed, "max_train_worlds": cfg.max_train_worlds}
    for key, value in split.items():
        if pack.meta["split"][key] != value:
            raise InputError(
                f"{cfg.data}: the pack was split with {key}={pack.meta['split'][key]}, the run asks {value}; "
                "pack the store again with the run's split"
            )
    asked = dataclasses.replace(cfg.model.inputs, N=pack.spec.N, dt=pack.spec.dt)
    if asked != pack.spec:
        raise InputError(f"{cfg.data}: the pack holds inputs for {pack.spec}, the run asks {asked}")


def train(cfg: WarmStartTrainConfig, out: str | os.PathLike[str], progress: bool = True) -> dict[str, Any]:
    """Train (or resume) into `out`; returns the final history entry and paths."""
    from tqdm import tqdm

    rank, world_size = _distributed()
    device = _device(cfg.device)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    if world_size > 1:
        import torch.distributed as dist

        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend)
        if device.type == "cuda":
            device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}")
            torch.cuda.set_device(device)
    out = Path(out)
    # The model's input spec and limits follow the store (the planner that produced the data).
    pack = read_pack(cfg.data) if Path(cfg.data).is_file() else None
    if pack is not None:
        robot, spec = pack.robot, pack.spec
        _check_pack(cfg, pack)
    else:
        robot, n, dt = wdata.store_robot(wdata.DatasetStore.open(cfg.data))
        spec = dataclasses.replace(cfg.model.inputs, N=n, dt=dt)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, inputs=spec, limits=RobotLimits.of(robot)))
    config_path, ckpt_path = out / "config.json", out / "checkpoint.pt"
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
        if config_path.exists():
            # More epochs extend a run (the cosine schedule follows the new total); anything else is another run.
            saved, now = json.loads(config_path.read_text()), cfg.to_dict()
            diff = sorted(k for k in set(saved) | set(now) if k != "epochs" and saved.get(k) != now.get(k))
            if diff:
                raise InputError(f"{out}: holds a run with another configuration (differs in {diff}); use a new --out")
        atomic_write_json(config_path, cfg.to_dict())
    if pack is not None:
        train_ids, val_ids = pack.meta["train_worlds"], pack.meta["val_worlds"]
        train_set, val_set = pack.train, pack.val
    else:
        train_ids, val_ids = wdata.world_split(cfg.data, cfg.val_fraction, cfg.seed, cfg.max_train_worlds)
        if rank == 0:
            wdata.build_cache(cfg.data, spec, cfg.input_workers, train_ids + val_ids, progress=progress)
        if world_size > 1:
            torch.distributed.barrier()
        cache = wdata.cache_dir(cfg.data, spec)
        train_set, val_set = wdata.load(cache, train_ids), wdata.load(cache, val_ids)

    torch.manual_seed(cfg.seed)
    model = SpatialMnemosyneViT(cfg.model).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    per_rank = max(1, cfg.batch_size // world_size)
    # A fixed epoch size gives every training-set size the same steps and schedule (learning curves).
    steps_per_epoch = max(1, (cfg.epoch_examples or len(train_set)) // cfg.batch_size)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(cfg, steps_per_epoch))
    objective = Objective(cfg.model, cfg.state_weight, device)
    history: list[dict[str, Any]] = []
    start_epoch = 0
    if ckpt_path.exists():
        ckpt = torch.load(ckpt_path, map_location=device, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        history, start_epoch = ckpt["history"], ckpt["epoch"]
        torch.set_rng_state(ckpt["torch_rng"])
        if rank == 0:
            log.info("resuming %s after epoch %d", out, start_epoch)
    ddp = model
    if world_size > 1:
        ddp = torch.nn.parallel.DistributedDataParallel(model)
    sign_vec = torch.from_numpy(mirror_sign(spec)).to(device)
    sign_u = torch.tensor([1.0, -1.0], device=device)
    best = min((h["val_loss"] for h in history), default=math.inf)
    t_start = time.perf_counter()
    for epoch in range(start_epoch, cfg.epochs):
        model.train()
        gen = torch.Generator().manual_seed(cfg.seed * 100_003 + epoch)
        order = torch.randperm(len(train_set), generator=gen).numpy()
        if steps_per_epoch * cfg.batch_size > len(order):  # an epoch longer than the set: concatenated passes
            reps = -(-steps_per_epoch * cfg.batch_size // len(order))
            more = [torch.randperm(len(train_set), generator=gen).numpy() for _ in range(reps - 1)]
            order = np.concatenate([order, *more])
        flips = torch.rand(len(order), generator=gen).numpy() < 0.5  # per draw: a repeated example may flip
        t0, total, seen = time.perf_counter(), 0.0, 0
        bar = tqdm(range(steps_per_epoch), desc=f"epoch {epoch + 1}/{cfg.epochs}", disable=not progress or rank)
        try:
            for step in bar:
                idx = np.sort(order[step * cfg.batch_size : (step + 1) * cfg.batch_size][rank::world_size][:per_rank])
                g = torch.from_numpy(train_set.grid[idx].astype(np.float32)).to(device)
                v = torch.from_numpy(train_set.vector[idx]).to(device)
                y = torch.from_numpy(train_set.controls[idx]).to(device)
                if cfg.augment:
                    f = torch.from_numpy(flips[step * cfg.batch_size : step * cfg.batch_size + len(idx)]).to(device)
                    g = torch.where(f[:, None, None, None], g.flip(-1), g)
                    v = torch.where(f[:, None], v * sign_vec, v)
                    y = torch.where(f[:, None, None], y * sign_u, y)
                loss = objective(ddp(g, v), y)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                total += loss.item() * len(idx)
                seen += len(idx)
                bar.set_postfix(loss=f"{total / seen:.3e}", refresh=False)
        except KeyboardInterrupt:
            if rank == 0:
                log.warning("interrupted in epoch %d; %s keeps epoch %d: re-run to resume", epoch + 1, out, epoch)
            raise
        if rank == 0:
            val = evaluate(model, val_set, objective, device)
            entry = {
                "epoch": epoch + 1,
                "train_loss": total / max(seen, 1),
                "val_loss": val["loss"],
                "val_rms_v": val["rms_v"],
                "val_rms_w": val["rms_w"],
                "lr": scheduler.get_last_lr()[0],
                "epoch_s": time.perf_counter() - t0,
            }
            history.append(entry)
            if val["loss"] < best:
                best = val["loss"]
                _save(
                    out / "best.pt",
                    {
                        "model": model.state_dict(),
                        "config": cfg.to_dict(),
                        "epoch": epoch + 1,
                        "val": val,
                        "robot": asdict(robot),
                        "train_worlds": len(train_ids),
                        "train_examples": len(train_set),
                        "val_worlds": len(val_ids),
                        "val_examples": len(val_set),
                    },
                )
            _save(
                ckpt_path,
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(),
                    "history": history,
                    "epoch": epoch + 1,
                    "torch_rng": torch.get_rng_state(),
                },
            )
            atomic_write_json(out / "history.json", history)
            plot_history(history, out / "loss_curve.png")
            log.info(
                "epoch %d: train %.3e val %.3e (rms v %.4f m/s, w %.4f rad/s) %.0f s",
                epoch + 1,
                entry["train_loss"],
                val["loss"],
                val["rms_v"],
                val["rms_w"],
                entry["epoch_s"],
            )
        if world_size > 1:
            torch.distributed.barrier()
    result = {
        "out": str(out),
        "history": history[-1] if history else None,
        "best_val_loss": best,
        "train_worlds": len(train_ids),
        "val_worlds": len(val_ids),
        "train_examples": len(train_set),
        "val_examples": len(val_set),
        "wall_s_this_run": time.perf_counter() - t_start,
    }
    if rank == 0:
        atomic_write_json(out / "summary.json", result)
    if world_size > 1:
        torch.distributed.destroy_process_group()
    return result


def load_model(run_dir: str | os.PathLike[str], which: str = "best") -> tuple[SpatialMnemosyneViT, dict[str, Any]]:
    """The trained model of a run directory (`best` or `checkpoint` weights) and its saved record."""
    path = Path(run_dir) / ("best.pt" if which == "best" else "checkpoint.pt")
    if not path.is_file():
        raise InputError(f"{run_dir}: no {path.name} (train first: mnemo-mpc train --data DIR --out {run_dir})")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        cfg = WarmStartTrainConfig.from_dict(json.loads((Path(run_dir) / "config.json").read_text()))
    except Exception as exc:  # torch/pickle raise many kinds for a damaged file
        raise InputError(f"{path}: unreadable checkpoint ({type(exc).__name__}: {exc})") from exc
    model = SpatialMnemosyneViT(cfg.model)
    model.load_state_dict(ckpt["model"])
    model.eval()
    return model, {**ckpt, "config": cfg}
