"""Offline collection of SQP solutions: an MPC agent drives through many generated worlds and every MPC step becomes
one example (seed 002 §5.2: "running MPC navigation agent in 2787 different environments ... 180 steps on average ...
~500,000 training examples").

One task = one world: generate it, run a recorded closed-loop episode, write the world to the store and commit it
atomically (`store.write_world`). The same task function runs in a local process pool (`concurrent.futures`) or on a
Ray cluster (`ray.remote`); the coordinator only records finished worlds in the manifest. With Ray on several nodes,
the output directory must be on a filesystem all nodes share.

World seeds are `COLLECT_SEED_OFFSET + seed * 100_000 + world_id`, far above the small seeds the evaluation uses, so
training worlds never coincide with held-out evaluation worlds (`mnemo-mpc eval --worlds 50 --seed 1000`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemo_mpc.dataset.store import DatasetStore, WorldRecord, write_world
from mnemo_mpc.errors import DatasetError, InputError
from mnemo_mpc.nav.controller import ControllerConfig
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.planning.worlds import WorldConfig

log = logging.getLogger(__name__)

COLLECT_SEED_OFFSET = 1_000_000
MAX_WORLDS_PER_SEED = 100_000
# Test hook: "kill:<world_id>:<step>" SIGKILLs the worker when it reaches that step of that world (a crash mid-world);
# "raise:<world_id>:<step>" raises there (an episode that fails). Read in the worker, so it crosses process pools.
FAULT_ENV = "MNEMO_MPC_COLLECT_FAULT"


def _episode_config_default() -> Any:
    from mnemo_mpc.sim.episode import EpisodeConfig

    return EpisodeConfig(record=True)


@dataclass(frozen=True)
class CollectConfig:
    """Everything that decides what a collected example is; saved in the manifest and checked on resume."""

    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    robot: RobotModel = field(default_factory=RobotModel)
    mpc: MPCConfig = field(default_factory=MPCConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    episode: Any = field(default_factory=_episode_config_default)  # mnemo_mpc.sim.episode.EpisodeConfig
    model: str | None = None  # warm-start model (ONNX) for controller.warm_start "learned" / "hybrid"

    def __post_init__(self) -> None:
        if int(self.seed) < 0:
            raise InputError(f"CollectConfig.seed: expected a non-negative integer, got {self.seed}")
        if not getattr(self.episode, "record", False):
            raise InputError("CollectConfig.episode.record must be True: collection records every step")

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(dataclasses.asdict(self), default=str))


def world_seed(seed: int, world_id: int) -> int:
    if not 0 <= int(world_id) < MAX_WORLDS_PER_SEED:
        raise InputError(f"world id: expected 0 <= id < {MAX_WORLDS_PER_SEED}, got {world_id}")
    return COLLECT_SEED_OFFSET + int(seed) * MAX_WORLDS_PER_SEED + int(world_id)


# Per-process simulator and controller, reused across the worlds a worker handles (building the NLP and connecting
# PyBullet cost more than a short episode's first steps).
_WORKER: dict[str, Any] = {}


def _worker_state(config: CollectConfig) -> tuple[Any, Any]:
    key = json.dumps(config.to_dict(), sort_keys=True)
    if _WORKER.get("key") != key:
        from mnemo_mpc.nav.controller import Controller
        from mnemo_mpc.sim.simulator import Simulator

        if "sim" in _WORKER:
            _WORKER["sim"].close()
        _WORKER.clear()
        provider = None
        if config.controller.warm_start in ("learned", "hybrid"):
            from mnemo_mpc.warmstart.runtime import WarmStartModel

            provider = WarmStartModel(config.model, config.robot, config.mpc.N, config.mpc.dt)
        controller = Controller(config.robot, config.mpc, config.controller, provider)
        _WORKER.update(key=key, sim=Simulator(), controller=controller)
    return _WORKER["sim"], _WORKER["controller"]


def _fault_hook(world_id: int) -> Callable[[dict[str, Any]], None] | None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return None
    action, wid, step = spec.split(":")
    if int(wid) != world_id:
        return None

    def hook(stat: dict[str, Any]) -> None:
        if stat["step"] >= int(step):
            if action == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected fault at world {world_id} step {stat['step']}")

    return hook


def collect_world(root: str, world_id: int, config: CollectConfig) -> dict[str, Any]:
    """The task: generate world `world_id`, drive it with recording, commit it to the store; returns its entry.

    An episode that raises is committed with status "error" and the message, so it is not retried silently and the
    manifest shows it. Process death (SIGKILL, OOM) commits nothing: the world is redone on resume.
    """
    from mnemo_mpc.planning.worlds import generate_world
    from mnemo_mpc.sim.episode import run_episode

    t0, c0 = time.perf_counter(), time.process_time()
    seed = world_seed(config.seed, world_id)
    kind = "unknown"
    try:
        world = generate_world(seed, config.world)
        kind = world.kind
        sim, controller = _worker_state(config)
        result = run_episode(
            world, sim=sim, controller=controller, config=config.episode, on_step=_fault_hook(world_id)
        )
        info = {k: v for k, v in result.metrics.items() if k not in ("world",)}
        info["wall_time_s"] = time.perf_counter() - t0
        info["cpu_time_s"] = time.process_time() - c0
        record = WorldRecord(world_id, seed, kind, result.metrics["outcome"], result.record or {}, info)
    except Exception as exc:  # recorded, never dropped: the manifest counts "error" worlds
        log.warning("world %d (seed %d) failed: %s: %s", world_id, seed, type(exc).__name__, exc)
        from mnemo_mpc.sim.episode import _stack_record

        empty = _stack_record({}, (1, 1), config.mpc.N)
        info = {
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5),
            "wall_time_s": time.perf_counter() - t0,
        }
        record = WorldRecord(world_id, seed, kind, "error", empty, info)
    return write_world(root, record)


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="world", disable=not enabled, dynamic_ncols=True, smoothing=0.1)


def _run_pool(root: str, todo: list[int], config: CollectConfig, workers: int) -> Iterable[dict[str, Any]]:
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    # spawn: a clean interpreter per worker (no inherited PyBullet client, CasADi state or torch threads).
    with ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(collect_world, root, wid, config): wid for wid in todo}
        try:
            for fut in as_completed(futures):
                yield fut.result()
        except BrokenProcessPool as exc:
            raise DatasetError(
                f"{root}: a collection worker died (killed or out of memory); committed worlds are safe - "
                "re-run the same command to resume"
            ) from exc


def _run_ray(root: str, todo: list[int], config: CollectConfig, address: str, workers: int) -> Iterable[dict[str, Any]]:
    try:
        import ray
    except ImportError as exc:
        raise InputError("--ray-address: Ray is not installed (pip install 'mnemo_mpc[ray]')") from exc
    if address == "local":
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    else:
        ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
    try:
        task = ray.remote(num_cpus=1, max_retries=2)(collect_world)
        pending = [task.remote(root, wid, config) for wid in todo]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])
    finally:
        ray.shutdown()


def collect(
    root: str | os.PathLike[str],
    n_worlds: int,
    config: CollectConfig | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Collect worlds 0..n_worlds-1 into `root`, skipping committed ones; returns a summary of this run."""
    config = config or CollectConfig()
    if n_worlds < 1 or n_worlds > MAX_WORLDS_PER_SEED:
        raise InputError(f"--worlds: expected 1..{MAX_WORLDS_PER_SEED}, got {n_worlds}")
    if workers < 1:
        raise InputError(f"--workers: expected >= 1, got {workers}")
    root = str(Path(root))
    if config.controller.warm_start in ("learned", "hybrid") and not config.model:
        raise InputError(f"--warmstart {config.controller.warm_start}: needs --model FILE.onnx")
    store = DatasetStore.create_or_resume(root, config.to_dict(), CollectConfig().to_dict())
    done = store.committed_world_ids()
    todo = [w for w in range(n_worlds) if w not in done]
    log.info(
        "collect: %d worlds committed, %d to do, %d worker(s)", len(done & set(range(n_worlds))), len(todo), workers
    )
    t0 = time.perf_counter()
    examples = 0
    bar = _progress(n_worlds, n_worlds - len(todo), progress)
    runner = (
        _run_ray(root, todo, config, ray_address, workers) if ray_address else _run_pool(root, todo, config, workers)
    )
    try:
        for entry in runner:
            store.record_world(entry)
            examples += entry["steps"]
            rate = examples / max(time.perf_counter() - t0, 1e-9)
            bar.set_postfix(examples=store.manifest["counts"]["examples"], ex_per_s=f"{rate:.1f}", refresh=False)
            bar.update(1)
    finally:
        bar.close()
        store.refresh_manifest()
    wall = time.perf_counter() - t0
    return {
        "root": root,
        "worlds_requested": n_worlds,
        "worlds_collected_now": len(todo),
        "examples_now": examples,
        "wall_s": round(wall, 3),
        "examples_per_s": round(examples / wall, 3) if wall > 0 else None,
        "counts": store.manifest["counts"],
    }
