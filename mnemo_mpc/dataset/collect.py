"""Offline collection of SQP solutions: an MPC agent drives through many generated worlds and every MPC step becomes
one example (seed 002 §5.2: "running MPC navigation agent in 2787 different environments ... 180 steps on average ...
~500,000 training examples").

One task = one world: generate it, run a recorded closed-loop episode, write the world to the store and commit it
atomically (`store.write_world`). The same task function runs in a local process pool (`concurrent.futures`) or on a
Ray cluster (`ray.remote`); the coordinator only records finished worlds in the manifest. With Ray on several nodes,
the output directory must be on a filesystem all nodes share.

World seeds are `COLLECT_SEED_OFFSET + seed * 100_000 + world_id`, far above the small seeds the evaluation uses, so
training worlds never coincide with held-out evaluation worlds (`mnemo-mpc eval --worlds 50 --seed 1000`).

Process lifetime. Local workers die with their coordinator: each sets PR_SET_PDEATHSIG = SIGKILL on Linux (then
re-checks its parent, in case the coordinator died before that took effect), and a watcher thread polling the parent
pid covers other systems; a worker also re-checks its coordinator just before it commits. So a killed `collect` (even
SIGKILL) leaves no process behind that could keep committing worlds; the world in progress is lost, as with any crash,
and resume redoes it. SIGINT and SIGTERM on the coordinator stop the collection cleanly: worlds not yet started are
cancelled, the workers are killed (their worlds in progress are lost), the manifest is refreshed to list exactly the
committed worlds, and `CollectInterrupted` (a `KeyboardInterrupt` carrying the signal number) is raised. Workers
ignore SIGINT, so a Ctrl-C that reaches the whole process group is handled by the coordinator alone. With Ray,
`ray.shutdown()` runs on every exit path and unfinished tasks are cancelled; a local cluster (`--ray-address local`)
stops with it. After a SIGKILL of the driver, Ray's own fate sharing ends its GCS, raylet and workers within seconds;
its two node agents linger up to a minute (Ray's 60 s timeout reporting the raylet's death) but touch no dataset.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mnemo_mpc.dataset.recorder import ExpertRecorder, stack_record
from mnemo_mpc.dataset.store import DatasetStore, WorldRecord, write_world
from mnemo_mpc.errors import DatasetError, InputError
from mnemo_mpc.nav.controller import ControllerConfig
from mnemo_mpc.planning.mpc import MPCConfig
from mnemo_mpc.planning.robot import RobotModel
from mnemo_mpc.sim.worlds import WorldConfig

log = logging.getLogger(__name__)

COLLECT_SEED_OFFSET = 1_000_000
MAX_WORLDS_PER_SEED = 100_000
# Test hook: "kill:<world_id>:<step>" SIGKILLs the worker when it reaches that step of that world (a crash mid-world);
# "raise:<world_id>:<step>" raises there (an episode that fails). Read in the worker, so it crosses process pools.
FAULT_ENV = "MNEMO_MPC_COLLECT_FAULT"
# How often the coordinator looks for a stop request between results, and a worker's watcher thread for its parent.
POLL_S = 0.25
# How long the coordinator waits for killed workers to be reaped before it refreshes the manifest.
WORKER_EXIT_TIMEOUT_S = 10.0
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class CollectInterrupted(KeyboardInterrupt):
    """Collection stopped by SIGINT or SIGTERM after a clean shutdown; `signum` is the signal (exit 128 + signum).

    A `KeyboardInterrupt`, so code that handles Ctrl-C handles this too, and `except Exception` never swallows it.
    """

    def __init__(self, signum: int, root: str = "") -> None:
        name = signal.Signals(signum).name
        where = f"{root}: " if root else ""
        super().__init__(
            f"{where}collection stopped by {name}; committed worlds are in the manifest - re-run the same command "
            "to resume"
        )
        self.signum = int(signum)


def _episode_config_default() -> Any:
    from mnemo_mpc.sim.episode import EpisodeConfig

    return EpisodeConfig()


@dataclass(frozen=True)
class CollectConfig:
    """Everything that decides what a collected example is; saved in the manifest and checked on resume."""

    seed: int = 0
    world: WorldConfig = field(default_factory=WorldConfig)
    # World families taken in turn (world i gets kinds[i mod K]); None: the kind the seed draws
    kinds: tuple[str | None, ...] = (None,)
    robot: RobotModel = field(default_factory=RobotModel)
    mpc: MPCConfig = field(default_factory=MPCConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    episode: Any = field(default_factory=_episode_config_default)  # mnemo_mpc.sim.episode.EpisodeConfig
    # A closed-loop solve stopped at its cap is continued this far for the expert (`dataset.recorder`)
    expert_max_iter: int = 100
    model: str | None = None  # warm-start model (ONNX) for controller.warm_start "learned" / "hybrid"
    # The simulator (body, period, lidar, realism: `closed_loop_setup(...).sim`); None: the robot's ideal one
    sim: Any = None

    def __post_init__(self) -> None:
        if int(self.seed) < 0:
            raise InputError(f"CollectConfig.seed: expected a non-negative integer, got {self.seed}")
        if int(self.expert_max_iter) < 1:
            raise InputError(f"CollectConfig.expert_max_iter: expected an integer >= 1, got {self.expert_max_iter}")
        from mnemo_mpc.sim.worlds import ALL_KINDS

        kinds = tuple(self.kinds)
        if not kinds or any(k is not None and k not in ALL_KINDS for k in kinds):
            raise InputError(f"CollectConfig.kinds: expected world families from {ALL_KINDS} or None, got {kinds}")
        object.__setattr__(self, "kinds", kinds)

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
        from mnemo_mpc.sim.simulator import SimConfig, Simulator

        if "sim" in _WORKER:
            _WORKER["sim"].close()
        _WORKER.clear()
        provider = None
        if config.controller.warm_start in ("learned", "hybrid"):
            from mnemo_mpc.warmstart.runtime import WarmStartModel

            provider = WarmStartModel(config.model, config.robot, config.mpc.N, config.mpc.dt)
        controller = Controller(config.robot, config.mpc, config.controller, provider)
        # The simulated body and control period are the configured robot's (the default robot: SimConfig()).
        sim = Simulator(config.sim or SimConfig.for_robot(config.robot, control_dt=config.mpc.dt))
        _WORKER.update(key=key, sim=sim, controller=controller)
    return _WORKER["sim"], _WORKER["controller"]


# --- worker lifetime ------------------------------------------------------------------------------------------
# The coordinator's pid as this worker process saw it at start-up; set by `_init_worker` (pool workers only).
_COORDINATOR: dict[str, int] = {}
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _set_parent_death_signal(signum: int = signal.SIGKILL) -> bool:
    """Linux: ask the kernel to send `signum` to this process when its parent dies; False where unavailable.

    The kernel ties this to the parent *thread* that created the process: the pool is created and all its tasks are
    submitted from the coordinator thread, which outlives the workers, so that is the coordinator's lifetime.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _coordinator_gone() -> bool:
    """True in a pool worker whose coordinator has died (it was reparented to init or a subreaper)."""
    pid = _COORDINATOR.get("pid")
    return pid is not None and os.getppid() != pid


def _exit_if_coordinator_gone() -> None:
    if _coordinator_gone():
        # os._exit, not sys.exit: no atexit or multiprocessing finalizers that would write to a coordinator's pipes.
        os._exit(1)


def _watch_coordinator() -> None:
    while True:
        time.sleep(POLL_S)
        _exit_if_coordinator_gone()


def _init_worker(coordinator_pid: int) -> None:
    """Pool initializer: this worker dies with `coordinator_pid`, its parent, and leaves Ctrl-C to it.

    PR_SET_PDEATHSIG (Linux) kills the worker the moment the coordinator dies, SIGKILL included. The parent is
    checked again right after it is set: a coordinator that died before that (during the worker's start-up) would
    otherwise never signal us. A daemon thread polling the parent pid is the portable fallback (other POSIX systems,
    or a kernel that refuses prctl); it ends the worker within `POLL_S` of the coordinator's death.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _COORDINATOR["pid"] = int(coordinator_pid)
    if not _set_parent_death_signal():
        log.debug("PR_SET_PDEATHSIG unavailable; the parent watcher alone ends this worker with its coordinator")
    _exit_if_coordinator_gone()
    threading.Thread(target=_watch_coordinator, name="mnemo-mpc-coordinator-watch", daemon=True).start()


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
    from mnemo_mpc.sim.episode import run_episode
    from mnemo_mpc.sim.worlds import generate_world

    t0, c0 = time.perf_counter(), time.process_time()
    seed = world_seed(config.seed, world_id)
    kind = "unknown"
    try:
        world = generate_world(seed, config.world, kind=config.kinds[world_id % len(config.kinds)])
        kind = world.kind
        sim, controller = _worker_state(config)
        result = run_episode(
            world,
            sim=sim,
            controller=controller,
            config=config.episode,
            on_step=_fault_hook(world_id),
            observer=ExpertRecorder(config.expert_max_iter),
        )
        info = {k: v for k, v in result.metrics.items() if k not in ("world",)}
        info["wall_time_s"] = time.perf_counter() - t0
        info["cpu_time_s"] = time.process_time() - c0
        record = WorldRecord(world_id, seed, kind, result.metrics["outcome"], result.record or {}, info)
    except Exception as exc:  # recorded, never dropped: the manifest counts "error" worlds
        log.warning("world %d (seed %d) failed: %s: %s", world_id, seed, type(exc).__name__, exc)
        empty = stack_record({}, (1, 1), config.mpc.N)
        info = {
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5),
            "wall_time_s": time.perf_counter() - t0,
        }
        record = WorldRecord(world_id, seed, kind, "error", empty, info)
    # A worker whose coordinator is gone does not commit (on Linux PR_SET_PDEATHSIG has already killed it).
    _exit_if_coordinator_gone()
    return write_world(root, record, before_commit=_exit_if_coordinator_gone)


def _progress(total: int, initial: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="world", disable=not enabled, dynamic_ncols=True, smoothing=0.1)


class _StopSignals:
    """While installed (coordinator's main thread only): SIGINT / SIGTERM only record a stop request, which the
    runners check between results. No exception is raised at an arbitrary point of the coordinator, and a second
    signal during the shutdown cannot cut the manifest refresh short."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._saved: dict[int, Any] = {}

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum

    def install(self) -> None:
        """Install (again: `ray.init` replaces the SIGTERM handler with its own `sys.exit`)."""
        if threading.current_thread() is not threading.main_thread():
            return  # Python runs signal handlers in the main thread only; an embedding program keeps its own
        for signum in STOP_SIGNALS:
            previous = signal.signal(signum, self._handle)
            self._saved.setdefault(signum, previous)

    def restore(self) -> None:
        for signum, previous in self._saved.items():
            if previous is not None:  # None: a handler not installed from Python, which cannot be put back
                signal.signal(signum, previous)
        self._saved.clear()

    def check(self, root: str) -> None:
        if self.signum is not None:
            raise CollectInterrupted(self.signum, root)


def _kill_pool(pool: Any) -> None:
    """Cancel what has not started, kill the workers (worlds in progress are lost) and wait until they are gone."""
    # Python < 3.14 has no public way to reach the workers (3.14 adds `kill_workers`); snapshot them before shutdown
    # drops the reference.
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.kill()
    deadline = time.monotonic() + WORKER_EXIT_TIMEOUT_S
    for p in procs:
        p.join(max(deadline - time.monotonic(), 0.0))
        if p.is_alive():
            log.warning("collection worker %d did not exit within %.0f s", p.pid, WORKER_EXIT_TIMEOUT_S)


def _run_pool(
    root: str, todo: list[int], config: CollectConfig, workers: int, stop: _StopSignals
) -> Iterable[dict[str, Any]]:
    import multiprocessing as mp
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from concurrent.futures.process import BrokenProcessPool

    # Block SIGINT while the pool starts its processes: they inherit the blocked signal, so a Ctrl-C to the process
    # group during a worker's start-up (before `_init_worker` ignores it) cannot print a traceback from it. Here
    # the signal stays pending and reaches the coordinator's handler when the mask is restored.
    blocked = hasattr(signal, "pthread_sigmask")
    if blocked:
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    pool = None
    finished = False
    try:
        # spawn: a clean interpreter per worker (no inherited PyBullet client, CasADi state or torch threads).
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(os.getpid(),),
        )
        pending = {pool.submit(collect_world, root, wid, config): wid for wid in todo}
        if blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            blocked = False
        while pending:
            stop.check(root)
            done, _ = wait(pending, timeout=POLL_S, return_when=FIRST_COMPLETED)
            for fut in done:
                del pending[fut]
                try:
                    entry = fut.result()
                except BrokenProcessPool as exc:
                    stop.check(root)  # the workers died of a signal sent to the whole process group
                    raise DatasetError(
                        f"{root}: a collection worker died (killed or out of memory); committed worlds are safe - "
                        "re-run the same command to resume"
                    ) from exc
                yield entry
        finished = True
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if pool is not None:
            if finished:
                pool.shutdown(wait=True)
            else:  # a stop request, an error, or the consumer closed us: no worker may outlive this call
                _kill_pool(pool)


def _run_ray(
    root: str, todo: list[int], config: CollectConfig, address: str, workers: int, stop: _StopSignals
) -> Iterable[dict[str, Any]]:
    try:
        import ray
    except ImportError as exc:
        raise InputError("--ray-address: Ray is not installed (pip install 'mnemo_mpc[ray]')") from exc
    pending: list[Any] = []
    try:
        try:
            if address == "local":
                ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
            else:
                ray.init(address=address, log_to_driver=False, ignore_reinit_error=True)
        except SystemExit as exc:  # a SIGTERM during ray.init reached Ray's handler, which calls sys.exit(SIGTERM)
            if exc.code != signal.SIGTERM:
                raise
            stop.signum = stop.signum or signal.SIGTERM
        stop.install()  # ray.init replaced our SIGTERM handler
        stop.check(root)
        task = ray.remote(num_cpus=1, max_retries=2)(collect_world)
        pending = [task.remote(root, wid, config) for wid in todo]
        while pending:
            stop.check(root)
            done, pending = ray.wait(pending, num_returns=1, timeout=POLL_S)
            for ref in done:
                yield ray.get(ref)
    finally:
        for ref in pending:  # not started or in progress: a cluster must not keep committing after we leave
            try:
                ray.cancel(ref, force=True)
            except Exception as exc:  # already finished or its worker gone: nothing left to stop
                log.debug("ray.cancel: %s", exc)
        ray.shutdown()


def collect(
    root: str | os.PathLike[str],
    n_worlds: int,
    config: CollectConfig | None = None,
    workers: int = 1,
    ray_address: str | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Collect worlds 0..n_worlds-1 into `root`, skipping committed ones; returns a summary of this run.

    SIGINT / SIGTERM (when called from the main thread) stop it cleanly and raise `CollectInterrupted` once the
    workers are gone and the manifest lists exactly the committed worlds (module docstring).
    """
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
    stop = _StopSignals()
    stop.install()
    try:
        runner = (
            _run_ray(root, todo, config, ray_address, workers, stop)
            if ray_address
            else _run_pool(root, todo, config, workers, stop)
        )
        try:
            for entry in runner:
                store.record_world(entry)
                examples += entry["steps"]
                rate = examples / max(time.perf_counter() - t0, 1e-9)
                bar.set_postfix(examples=store.manifest["counts"]["examples"], ex_per_s=f"{rate:.1f}", refresh=False)
                bar.update(1)
        finally:
            runner.close()  # stops the workers now, whatever ended the loop, before the manifest is refreshed
            bar.close()
            # Workers are gone: the committed set can no longer change. A world committed but not yet recorded
            # (its worker killed between rename and reply) is picked up from disk here.
            store.refresh_manifest()
    finally:
        stop.restore()
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
