"""Training arrays for the warm-start model from a collected store (`mnemo_mpc.dataset`), one world at a time.

Every step with a converged expert solve becomes one example: the model's inputs (`inputs.grid_input`,
`inputs.vector_input`: the recorded local grid's distance field around the pose, the velocity, sub-goal and
reference) and the target, the expert's control sequence (seed 002 §5.2: "a pair of input context c and the final
optimal trajectory x_T"). The robot model and horizon come from the store's manifest, so examples match the planner
that produced them.

Inputs are computed once per world into `CACHE/wNNNNNN.npz` (written atomically; a process pool builds the missing
ones, so an interrupted build resumes), under a folder keyed by the input spec, so another crop makes another cache.
`load` concatenates the requested worlds into memory (grids as float16: 6.4 KB per example).

World arrays are read through the store's verified reader (`DatasetStore.open_world`: chunk presence and CRC32C,
metadata seals, decoded digests of every whole-array read), so a damaged store raises `DatasetError` naming the world,
array and chunk instead of turning into training examples.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import zipfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mnemo_mpc.atomic import atomic_write_bytes
from mnemo_mpc.dataset.loader import split_worlds
from mnemo_mpc.dataset.store import DatasetStore, world_name
from mnemo_mpc.errors import DatasetError
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.warmstart.inputs import InputSpec, grid_input, vector_input

log = logging.getLogger(__name__)

FIELDS = ("grid", "grid_origin", "grid_resolution", "pose", "velocity", "subgoal", "reference", "expert_controls")


@dataclass
class Arrays:
    """Examples of some worlds: grid (M, 2, S, S) float16, vector (M, F) float32, controls (M, N, 2) float32,
    world (M,) int64 (the world each example came from)."""

    grid: np.ndarray
    vector: np.ndarray
    controls: np.ndarray
    world: np.ndarray

    def __len__(self) -> int:
        return int(self.controls.shape[0])


def store_robot(store: DatasetStore) -> tuple[RobotModel, int, float]:
    """The robot model, horizon N and step dt the store was collected with (from its manifest)."""
    cfg = store.manifest["config"]
    try:
        robot = RobotModel(**cfg["robot"])
        return robot, int(cfg["mpc"]["N"]), float(cfg["mpc"]["dt"])
    except (KeyError, TypeError) as exc:
        raise DatasetError(f"{store.root}: manifest config lacks the robot or MPC settings ({exc})") from exc


def cache_dir(root: str | os.PathLike[str], spec: InputSpec) -> Path:
    key = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()[:12]
    return Path(root) / "cache" / f"inputs-{key}"


def world_examples(store: DatasetStore, world_id: int, spec: InputSpec, robot: RobotModel) -> dict[str, np.ndarray]:
    """The examples of one world (steps with a converged expert)."""
    from mnemo_mpc.planning.esdf import DistanceField
    from mnemo_mpc.planning.grid import OccupancyGrid

    group = store.open_world(world_id)  # verified reads: every `group[f][:]` below is checked whole
    missing = [f for f in (*FIELDS, "expert_success") if f not in group.array_keys()]
    if missing:
        raise DatasetError(f"{store.root}: world {world_id} lacks {missing} (collected by an older version)")
    # The distance field as the collecting controller saw it (unknown cells occupied or free).
    unknown_policy = store.manifest["config"].get("controller", {}).get("unknown_policy", "occupied")
    ok = np.flatnonzero(np.asarray(group["expert_success"][:]))
    a = {f: np.asarray(group[f][:]) for f in FIELDS}
    m = ok.size
    out = {
        "grid": np.zeros((m, 2, spec.size, spec.size), dtype=np.float16),
        "vector": np.zeros((m, spec.vector_size), dtype=np.float32),
        "controls": a["expert_controls"][ok].astype(np.float32),
    }
    for i, row in enumerate(ok):
        grid = OccupancyGrid(a["grid"][row], float(a["grid_resolution"][row]), tuple(a["grid_origin"][row]))
        field = DistanceField(grid, unknown_policy)
        out["grid"][i] = grid_input(field, a["pose"][row], robot, spec)
        out["vector"][i] = vector_input(
            a["pose"][row], a["velocity"][row], a["subgoal"][row], a["reference"][row], robot, spec
        )
    return out


def _build_one(args: tuple[str, int, dict, dict, str]) -> int:
    root, wid, spec_d, robot_d, out = args
    store = DatasetStore.open(root)
    ex = world_examples(store, wid, InputSpec(**spec_d), RobotModel(**robot_d))
    buf = io.BytesIO()
    # The world's seal: a world quarantined by `data verify --repair` and collected again gets a fresh cache entry.
    np.savez(buf, **ex, world_sha256=np.asarray(store.world_entry(wid)["world_sha256"]))
    atomic_write_bytes(Path(out) / f"{world_name(wid)}.npz", buf.getvalue())
    return int(ex["controls"].shape[0])


def _cached(path: Path, world_sha256: str) -> bool:
    """Whether `path` holds the inputs of exactly this committed world (an unreadable file is rebuilt)."""
    try:
        with np.load(path) as z:
            return str(z["world_sha256"]) == world_sha256
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return False


def build_cache(
    root: str | os.PathLike[str],
    spec: InputSpec,
    workers: int = 1,
    world_ids: Sequence[int] | None = None,
    progress: bool = True,
) -> Path:
    """Compute the inputs of every (or the given) world of the store into its cache; returns the cache folder."""
    from tqdm import tqdm

    store = DatasetStore.open(root)
    robot, n, dt = store_robot(store)
    if (spec.N, spec.dt) != (n, dt):
        raise DatasetError(f"{root}: collected with N={n}, dt={dt}; the input spec says N={spec.N}, dt={spec.dt}")
    out = cache_dir(root, spec)
    out.mkdir(parents=True, exist_ok=True)
    ids = store.world_ids if world_ids is None else list(world_ids)
    todo = [w for w in ids if not _cached(out / f"{world_name(w)}.npz", store.world_entry(w)["world_sha256"])]
    jobs = [(str(root), w, asdict(spec), asdict(robot), str(out)) for w in todo]
    bar = tqdm(total=len(ids), initial=len(ids) - len(todo), unit="world", desc="inputs", disable=not progress)
    if workers <= 1:
        for job in jobs:
            _build_one(job)
            bar.update(1)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
            for _ in pool.map(_build_one, jobs, chunksize=4):
                bar.update(1)
    bar.close()
    return out


def load(cache: Path, world_ids: Sequence[int]) -> Arrays:
    """The examples of `world_ids` from a built cache, in memory."""
    parts: dict[str, list[np.ndarray]] = {"grid": [], "vector": [], "controls": [], "world": []}
    for w in world_ids:
        path = Path(cache) / f"{world_name(w)}.npz"
        try:
            with np.load(path) as z:
                for k in ("grid", "vector", "controls"):
                    parts[k].append(z[k])
                parts["world"].append(np.full(z["controls"].shape[0], w, dtype=np.int64))
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:  # BadZipFile: a member's CRC
            raise DatasetError(f"{path}: unreadable input cache ({exc}); delete it to rebuild") from exc
    if not parts["controls"]:
        raise DatasetError(f"{cache}: no examples for the requested worlds")
    return Arrays(*(np.concatenate(parts[k]) for k in ("grid", "vector", "controls", "world")))


def world_split(
    root: str | os.PathLike[str], val_fraction: float = 0.1, seed: int = 0, max_train_worlds: int | None = None
) -> tuple[list[int], list[int]]:
    """(train, val) world ids: `dataset.loader.split_worlds` on the store's worlds with converged experts; with
    `max_train_worlds`, the first that many training worlds of a seeded order (nested: a larger subset contains the
    smaller ones, so a learning curve grows one training set against the same validation worlds)."""
    store = DatasetStore.open(root)
    ids = [w for w in store.world_ids if store.world_entry(w)["expert_converged"] > 0]
    train, val = split_worlds(ids, val_fraction, seed)
    if max_train_worlds is not None:
        order = np.random.default_rng(seed).permutation(len(train))
        train = sorted(train[i] for i in order[:max_train_worlds])
    return train, val
