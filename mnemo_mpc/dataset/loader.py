"""PyTorch view of the SQP dataset: one item per recorded MPC step (context c -> expert trajectory x_T, seed 002 §5.2).

Reads are chunked: the index (which steps of which world) comes from the manifest (or, where some expert solves did
not converge, the small per-world `expert_success` arrays); grids - 14 KB of the ~15 KB an example takes - are read
from disk per item or batch (one concurrent round trip per batch), while each world's small per-step vectors (pose,
goal, expert trajectory: ~1 KB per example) are cached after first use (`cache_worlds` bounds that cache), so
the store is never loaded into RAM. The split is by world, so a validation example never comes from a training world.

Every read is verified (`dataset.store`: chunk presence and CRC32C, metadata seals, and the decoded digest of each
world's small arrays when they are first loaded): a damaged store raises `DatasetError` naming the world, array and
chunk, never returns fill values. `verify=False` exists only to measure what that costs.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from mnemo_mpc.dataset.store import DatasetStore
from mnemo_mpc.errors import DatasetError

try:  # torch is a hard dependency of the package, but keep the store usable where it is absent
    from torch.utils.data import Dataset as _TorchDataset
except ImportError:  # pragma: no cover
    _TorchDataset = object  # type: ignore[assignment,misc]

# What an item carries by default: the model's context (grid, pose, velocity, goal) and the expert target.
DEFAULT_FIELDS = (
    "grid",
    "grid_origin",
    "grid_resolution",
    "pose",
    "velocity",
    "goal",
    "subgoal",
    "expert_states",
    "expert_controls",
)


def split_worlds(world_ids: Sequence[int], val_fraction: float = 0.1, seed: int = 0) -> tuple[list[int], list[int]]:
    """Deterministic split of world ids: the `ceil(val_fraction * n)` worlds with the smallest seeded hash go to
    validation. A world's hash depends only on (seed, id), so growing the store keeps earlier assignments mostly."""
    if not 0.0 <= val_fraction < 1.0:
        raise DatasetError(f"val_fraction: expected a number in [0, 1), got {val_fraction}")
    ids = sorted(int(w) for w in world_ids)
    keys = [int(np.random.SeedSequence([int(seed), w]).generate_state(1)[0]) for w in ids]
    n_val = int(np.ceil(val_fraction * len(ids))) if val_fraction > 0 and len(ids) > 1 else 0
    n_val = min(n_val, len(ids) - 1) if ids else 0
    order = np.argsort(keys, kind="stable")
    val = sorted(ids[i] for i in order[:n_val])
    train = sorted(set(ids) - set(val))
    return train, val


class SQPStepDataset(_TorchDataset):
    """Map-style dataset over a store. `split` is "train", "val" or "all" (see `split_worlds`).

    `only_converged` keeps the steps whose expert solve converged (the imitation targets of §5.2); `statuses`
    optionally restricts to worlds with given episode outcomes. Items are dicts of numpy-backed torch tensors plus
    `world_id`, `seed` and `step`. `verify=False` skips the store's read-side checks (seals, chunk presence,
    digests; zarr still checks chunk CRCs) and exists only to measure their cost.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        split: str = "train",
        val_fraction: float = 0.1,
        split_seed: int = 0,
        only_converged: bool = True,
        statuses: Sequence[str] | None = None,
        fields: Sequence[str] = DEFAULT_FIELDS,
        cache_worlds: int | None = None,
        verify: bool = True,
    ) -> None:
        self.store = DatasetStore.open(root, verify=verify)
        if split not in ("train", "val", "all"):
            raise DatasetError(f"split: expected 'train', 'val' or 'all', got {split!r}")
        ids = [
            w for w in self.store.world_ids if statuses is None or self.store.world_entry(w)["status"] in set(statuses)
        ]
        train, val = split_worlds(ids, val_fraction, split_seed)
        self.world_ids = {"train": train, "val": val, "all": sorted(ids)}[split]
        self.fields = tuple(fields)
        # Shuffled batches touch most worlds; an LRU smaller than the number of worlds would thrash.
        self.cache_worlds = int(cache_worlds) if cache_worlds is not None else 1 << 30
        self._groups: OrderedDict[int, Any] = OrderedDict()
        self._small: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        world_col, step_col = [], []
        for wid in self.world_ids:
            n = self.store.world_entry(wid)["steps"]
            if n == 0:
                continue
            entry = self.store.world_entry(wid)
            if only_converged and entry["expert_converged"] < n:
                ok = np.flatnonzero(self._group(wid)["expert_success"][:])
            else:
                ok = np.arange(n)
            world_col.append(np.full(ok.shape, wid, dtype=np.int64))
            step_col.append(ok.astype(np.int64))
        self._world = np.concatenate(world_col) if world_col else np.zeros(0, np.int64)
        self._row = np.concatenate(step_col) if step_col else np.zeros(0, np.int64)

    def __len__(self) -> int:
        return int(self._world.shape[0])

    def __getstate__(self) -> dict[str, Any]:
        # DataLoader workers re-open zarr groups themselves; open handles do not travel well across processes.
        state = self.__dict__.copy()
        state["_groups"] = OrderedDict()
        state["_small"] = OrderedDict()
        return state

    def _group(self, wid: int) -> Any:
        g = self._groups.get(wid)
        if g is None:
            g = self.store.open_world(wid)
            self._groups[wid] = g
            while len(self._groups) > self.cache_worlds:
                self._groups.popitem(last=False)
        else:
            self._groups.move_to_end(wid)
        return g

    def _small_arrays(self, wid: int) -> dict[str, np.ndarray]:
        small = self._small.get(wid)
        if small is None:
            self._load_small([wid])
            small = self._small[wid]
        else:
            self._small.move_to_end(wid)
        return small

    def _load_small(self, wids: list[int]) -> None:
        """Read the per-step vectors of several worlds in one concurrent zarr round trip."""
        names = [f for f in self.fields if f != "grid"] + ["step"]
        for w in wids:
            absent = sorted(set(names) - set(self._group(w).array_keys()))
            if absent:
                raise DatasetError(
                    f"{self.store.root}: world {w} has no field(s) {absent} (collected by an older version)"
                )
        keys = [(w, f) for w in wids for f in names]
        readers = [self._group(w)[f] for w, f in keys]  # opened (and checked) before any read starts
        values = _gather([r.aget(slice(None)) for r in readers])
        for w in wids:
            self._small[w] = {}
        for (w, f), v in zip(keys, values, strict=True):
            self._small[w][f] = np.asarray(v)
        while len(self._small) > max(self.cache_worlds, len(wids)):
            self._small.popitem(last=False)

    def _item(self, wid: int, row: int, grid: np.ndarray | None) -> dict[str, Any]:
        import torch

        small = self._small_arrays(wid)
        item: dict[str, Any] = {}
        for f in self.fields:
            a = grid if f == "grid" else small[f][row]
            a = np.asarray(a)
            item[f] = torch.from_numpy(a.astype(np.float32) if a.dtype.kind == "f" else a.copy())
        entry = self.store.world_entry(wid)
        item["world_id"] = int(wid)
        item["seed"] = int(entry["seed"])
        item["step"] = int(small["step"][row])
        return item

    def _check_index(self, index: int) -> int:
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} out of range for a dataset of {n} examples")
        return index % n if n else index

    def __getitem__(self, index: int) -> dict[str, Any]:
        i = self._check_index(int(index))
        wid, row = int(self._world[i]), int(self._row[i])
        grid = self._group(wid)["grid"][row] if "grid" in self.fields else None
        return self._item(wid, row, grid)

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Batched fetch (used by torch's DataLoader): all reads of the batch in one concurrent zarr round trip."""
        idx = np.asarray([self._check_index(int(i)) for i in indices], dtype=np.int64)
        out: list[dict[str, Any] | None] = [None] * len(idx)
        worlds = self._world[idx]
        uniq_worlds = [int(w) for w in np.unique(worlds)]
        missing = [w for w in uniq_worlds if w not in self._small]
        if missing:
            self._load_small(missing)
        grids: list[Any] = [None] * len(idx)
        if "grid" in self.fields:
            # One integer read per item, all in one concurrent round trip (orthogonal selections are slower in zarr).
            readers = {w: self._group(w)["grid"] for w in uniq_worlds}  # opened before any read starts
            grids = _gather([readers[int(w)].aget(int(r)) for w, r in zip(worlds, self._row[idx], strict=True)])
        for p, (w, r) in enumerate(zip(worlds, self._row[idx], strict=True)):
            out[p] = self._item(int(w), int(r), None if grids[p] is None else np.asarray(grids[p]))
        return out  # type: ignore[return-value]


def _gather(coros: list[Any]) -> list[Any]:
    """Run zarr async reads concurrently on zarr's own event loop: one round trip instead of one per array."""
    import asyncio

    from zarr.core.sync import sync

    async def run() -> list[Any]:
        # Wait for every read (none left running behind an error), then raise the first failure.
        return list(await asyncio.gather(*coros, return_exceptions=True))

    results = sync(run())
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results
