"""Process lifetime of `mnemo-mpc collect`, with real processes: SIGKILL of the coordinator leaves no worker behind
(none keeps committing worlds) and resume then commits every world exactly once; SIGINT / SIGTERM stop it cleanly
with the committed worlds intact and listed; the worker-side guards (PR_SET_PDEATHSIG, the parent watcher, the
start-up re-check) each work on their own; Ray in local mode (slow tier).

A run's processes are found through /proc: everything in the session the test starts it in, plus anything carrying
the run's marker environment variable (Ray's processes inherit the environment). Linux only.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from mnemo_mpc.dataset.collect import CollectConfig, CollectInterrupted, collect
from mnemo_mpc.dataset.store import DatasetStore
from mnemo_mpc.sim.episode import EpisodeConfig

pytest.importorskip("pybullet")
if not Path("/proc/self/stat").exists():
    pytest.skip("finds processes through /proc (Linux)", allow_module_level=True)

MARKER_ENV = "MNEMO_MPC_TEST_RUN"
GONE_WITHIN_S = 5.0  # the bound: no process of a killed collect left after this
START_TIMEOUT_S = 180.0  # first world committed (interpreter + worker start-up on a loaded 2-core machine)
RUN_TIMEOUT_S = 300.0


# --- finding a run's processes ------------------------------------------------------------------------------------
def _stat(pid: int) -> tuple[str, int, int, int] | None:
    """(state, ppid, pgrp, session) of a process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # the command name may contain spaces and parentheses
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def _has_marker(pid: int, marker: str) -> bool:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARKER_ENV}={marker}".encode() in env.split(b"\0")


def run_processes(session: int, marker: str) -> dict[int, str]:
    """Live processes (zombies excluded) of the run started as session leader `session` with `marker`."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        st = _stat(pid)
        if st is None or st[0] == "Z":
            continue
        if session in (st[2], st[3]) or _has_marker(pid, marker):
            try:
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120].decode()
            except OSError:
                continue
    return found


def wait_gone(session: int, marker: str, timeout: float = GONE_WITHIN_S) -> float:
    """Seconds until no process of the run is left; fails with the survivors after `timeout`."""
    t0 = time.monotonic()
    while True:
        left = run_processes(session, marker)
        elapsed = time.monotonic() - t0
        if not left:
            return elapsed
        if elapsed > timeout:
            pytest.fail(f"{len(left)} process(es) of the run still alive {elapsed:.1f} s after it ended: {left}")
        time.sleep(0.05)


# --- running collect ----------------------------------------------------------------------------------------------
class Run:
    """`python -m mnemo_mpc.cli collect` in its own session, with a marker in its environment."""

    def __init__(self, root: Path, n_worlds: int, workers: int, logs: Path, extra: tuple[str, ...] = ()) -> None:
        self.marker = uuid.uuid4().hex
        self.root = root
        logs.mkdir(parents=True, exist_ok=True)
        tag = uuid.uuid4().hex[:6]
        self.out_path, self.err_path = logs / f"{tag}.out", logs / f"{tag}.err"
        cmd = [sys.executable, "-m", "mnemo_mpc.cli", "collect", "--worlds", str(n_worlds), "--out", str(root)]
        cmd += ["--workers", str(workers), "--no-progress", *extra]
        env = {**os.environ, MARKER_ENV: self.marker, "OMP_NUM_THREADS": "1"}
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, start_new_session=True)

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def processes(self) -> dict[int, str]:
        return run_processes(self.proc.pid, self.marker)

    def wait_committed(self, k: int) -> set[int]:
        """Block until at least `k` worlds are committed on disk; the run must still be going."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            ids = on_disk(self.root)
            if len(ids) >= k:
                return ids
            if self.proc.poll() is not None:
                pytest.fail(f"collect exited ({self.proc.returncode}) before {k} worlds: {self.stderr[-2000:]}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"no {k} committed worlds after {START_TIMEOUT_S:.0f} s")
            time.sleep(0.05)

    def finish(self) -> int:
        try:
            return self.proc.wait(RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise


def on_disk(root: Path) -> set[int]:
    wdir = root / "worlds"
    if not wdir.is_dir():
        return set()
    return {int(p.name[1:]) for p in wdir.iterdir() if p.is_dir() and p.name[:1] == "w" and p.name[1:].isdigit()}


def tree_digest(path: Path) -> str:
    """SHA-256 over every file (relative name and bytes) of a committed world: detects a redone or touched world."""
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(path)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def digests(root: Path, ids: set[int]) -> dict[int, str]:
    return {w: tree_digest(root / "worlds" / f"w{w:06d}") for w in ids}


def assert_manifest_is_disk(root: Path) -> DatasetStore:
    """The manifest lists exactly the committed worlds, and every one of them reads back verified."""
    store = DatasetStore.open(root)
    assert set(store.world_ids) == on_disk(root) == store.committed_world_ids()
    assert store.manifest["counts"]["worlds"] == len(store.world_ids)
    store.verify()
    return store


def assert_complete(root: Path, n: int, kept: dict[int, str]) -> None:
    """Every world 0..n-1 committed exactly once; the worlds committed before the interruption untouched."""
    store = assert_manifest_is_disk(root)
    assert store.world_ids == list(range(n))
    names = sorted(p.name for p in (root / "worlds").iterdir() if p.is_dir())
    assert names == [f"w{w:06d}" for w in range(n)]  # no stray copies beside the committed worlds
    assert store.manifest["counts"]["examples"] == sum(store.world_entry(w)["steps"] for w in range(n))
    tmp = root / ".tmp"
    assert not tmp.exists() or not any(tmp.iterdir())
    assert digests(root, set(kept)) == kept


def stop_with_signal(run: Run, sig: int) -> tuple[int, set[int], dict[int, str]]:
    """Signal the coordinator once a world is committed (workers mid-world); returns (exit status, ids, digests)."""
    run.wait_committed(1)
    assert len(run.processes()) >= 3  # coordinator + 2 workers are up: the signal lands mid-run
    run.proc.send_signal(sig)
    rc = run.proc.wait(60)
    wait_gone(run.proc.pid, run.marker)
    ids = on_disk(run.root)
    return rc, ids, digests(run.root, ids)


def assert_interrupted_cleanly(run: Run, rc: int, sig: int) -> None:
    # CollectInterrupted is a KeyboardInterrupt carrying the signal: the CLI exits 128 + signum (130 / 143).
    assert rc == 128 + sig, (rc, run.stderr)
    err = [line for line in run.stderr.splitlines() if "interrupted" in line or "Traceback" in line]
    assert len(err) == 1 and "interrupted" in err[0], run.stderr
    assert_manifest_is_disk(run.root)


N_WORLDS = 5


# slow (30-45 s: three CLI runs): the default tier guards its failures piecewise and faster, with
# test_worker_dies_with_its_coordinator and test_worker_whose_coordinator_died_during_startup_exits_at_once (SIGKILL),
# test_collect_raises_collect_interrupted_and_restores_handlers (SIGTERM), test_optim_cli's Ctrl-C exit status (the
# CLI's 128 + signum) and test_dataset_collect::test_kill_mid_world_then_resume_loses_and_duplicates_nothing (resume).
@pytest.mark.slow
def test_sigterm_then_sigkill_then_resume_commits_every_world_once(tmp_path):
    """The whole path with the real CLI: a SIGTERM'd run ends cleanly; a SIGKILL'd run leaves no process; resume is
    exact."""
    root = tmp_path / "ds"
    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    rc, ids, kept = stop_with_signal(run, signal.SIGTERM)
    assert_interrupted_cleanly(run, rc, signal.SIGTERM)
    assert len(ids) < N_WORLDS  # it stopped, it did not finish the collection first

    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    before = run.wait_committed(len(ids) + 1)
    assert len(run.processes()) >= 3
    run.proc.kill()
    run.proc.wait(10)
    gone_s = wait_gone(run.proc.pid, run.marker)
    # No worker outlived its coordinator (before this issue one did, and committed 3 more worlds).
    after = on_disk(root)
    assert after >= before
    kept = {**kept, **digests(root, after - set(kept))}
    print(f"SIGKILL -> no process left after {gone_s:.2f} s")

    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    assert run.finish() == 0, run.stderr
    wait_gone(run.proc.pid, run.marker)
    assert_complete(root, N_WORLDS, kept)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_cleanly_and_resume_completes(tmp_path, sig):
    root = tmp_path / "ds"
    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    rc, ids, kept = stop_with_signal(run, sig)
    assert_interrupted_cleanly(run, rc, sig)
    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    assert run.finish() == 0, run.stderr
    assert_complete(root, N_WORLDS, kept)


@pytest.mark.slow
def test_sigint_to_the_whole_process_group_is_handled_by_the_coordinator(tmp_path):
    """A terminal's Ctrl-C reaches every process of the foreground group: workers ignore it, no traceback."""
    root = tmp_path / "ds"
    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    run.wait_committed(1)
    os.killpg(run.proc.pid, signal.SIGINT)
    rc = run.proc.wait(60)
    wait_gone(run.proc.pid, run.marker)
    assert_interrupted_cleanly(run, rc, signal.SIGINT)


@pytest.mark.slow
def test_repeated_sigkill_mid_run_never_orphans_and_resume_is_exact(tmp_path):
    """Several SIGKILLs at different moments (start-up included), then one resume."""
    root = tmp_path / "ds"
    n, kept, times = 8, {}, []
    for delay in (0.3, None, None, 2.0):
        run = Run(root, n, 2, tmp_path / "logs")
        if delay is None:
            run.wait_committed(len(on_disk(root)) + 1)
        else:  # while the workers are still starting
            time.sleep(delay)
        run.proc.kill()
        run.proc.wait(10)
        times.append(wait_gone(run.proc.pid, run.marker))
        ids = on_disk(root)
        kept.update(digests(root, ids - set(kept)))
    print(f"SIGKILL -> no process left after max {max(times):.2f} s over {len(times)} kills")
    run = Run(root, n, 2, tmp_path / "logs")
    assert run.finish() == 0, run.stderr
    assert_complete(root, n, kept)


# --- the worker-side guards on their own ----------------------------------------------------------------------------
_ORPHAN = """
import os, sys, time
import mnemo_mpc.dataset.collect as c
if sys.argv[1] == "pdeathsig":
    c._watch_coordinator = lambda: None        # only the kernel's parent-death signal
elif sys.argv[1] == "watcher":
    c._set_parent_death_signal = lambda *a: False  # only the portable watcher thread
c._init_worker(os.getppid())
print(os.getpid(), flush=True)
time.sleep(60)
print("survived", flush=True)
"""
_MIDDLE = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(120)
"""


@pytest.mark.parametrize("guard", ["pdeathsig", "watcher"])
def test_worker_dies_with_its_coordinator(tmp_path, guard):
    if guard == "pdeathsig" and not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux-only")
    middle = subprocess.Popen(
        [sys.executable, "-c", _MIDDLE, _ORPHAN, guard], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        worker = int(middle.stdout.readline())  # printed once its initializer has run
        middle.kill()  # the "coordinator" dies without a chance to clean up
        middle.wait(10)
        deadline = time.monotonic() + GONE_WITHIN_S
        while (st := _stat(worker)) is not None and st[0] != "Z":
            assert time.monotonic() < deadline, f"worker {worker} outlived its coordinator ({guard})"
            time.sleep(0.02)
    finally:
        os.killpg(middle.pid, signal.SIGKILL)  # the session: nothing of this test survives a failure
        middle.stdout.close()


def test_worker_whose_coordinator_died_during_startup_exits_at_once():
    """The race PR_SET_PDEATHSIG cannot see: the parent died before the worker set it."""
    code = "import os, mnemo_mpc.dataset.collect as c; c._init_worker(os.getppid() + 1); print('ran')"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "ran" not in res.stdout, res


# --- in-process: the library call restores the caller's handlers -------------------------------------------------
def test_collect_raises_collect_interrupted_and_restores_handlers(tmp_path):
    """SIGTERM to a process running `collect()` in its main thread: `CollectInterrupted`, manifest = disk, and
    the caller's own handler is back afterwards (it also catches the signal should `collect` not install one)."""
    root = tmp_path / "ds"
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, f: seen.append(s))
    cfg = CollectConfig(seed=0, episode=EpisodeConfig(time_limit_s=2.0, keep_plan_every=0))

    finished = threading.Event()

    def send_when_committed() -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not on_disk(root) and time.monotonic() < deadline and not finished.is_set():
            time.sleep(0.05)
        if not finished.is_set():  # never after the test put the previous handler back
            os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=send_when_committed, daemon=True)
    try:
        sender.start()
        with pytest.raises(CollectInterrupted) as info:
            collect(root, 200, cfg, workers=1, progress=False)
        assert info.value.signum == signal.SIGTERM and not seen
        assert "SIGTERM" in str(info.value) and "resume" in str(info.value)
        assert 1 <= len(assert_manifest_is_disk(root).world_ids) < 200
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler) and handler is not previous and handler.__name__ == "<lambda>"
    finally:
        finished.set()
        sender.join()
        signal.signal(signal.SIGTERM, previous)


# --- Ray, local cluster ---------------------------------------------------------------------------------------------
# Ray's two node agents notice the raylet's death at once but then spend Ray's hard-coded 60 s timeout reporting it
# to the (dead) GCS before they exit (ray/_private/utils.py publish_error_to_driver); they hold no dataset file.
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_ray_local_leaves_no_process(tmp_path, sig):
    pytest.importorskip("ray", reason="Ray is not installed; the --ray-address path cannot run")
    root = tmp_path / "ds"
    run = Run(root, N_WORLDS, 2, tmp_path / "logs", extra=("--ray-address", "local"))
    run.wait_committed(1)
    assert any("raylet" in c for c in run.processes().values())
    run.proc.send_signal(sig)
    rc = run.proc.wait(60)
    deadline = time.monotonic() + GONE_WITHIN_S
    while True:
        left = run.processes()
        if sig == signal.SIGKILL:
            left = {p: c for p, c in left.items() if not c.startswith(RAY_AGENTS)}
        if not left:
            break
        assert time.monotonic() < deadline, f"left after {GONE_WITHIN_S} s: {left}"
        time.sleep(0.05)
    if sig == signal.SIGTERM:
        assert_interrupted_cleanly(run, rc, sig)
    else:
        wait_gone(run.proc.pid, run.marker, timeout=90.0)  # the agents too, in their own time
    run = Run(root, N_WORLDS, 2, tmp_path / "logs")
    kept = digests(root, on_disk(root))
    assert run.finish() == 0, run.stderr
    assert_complete(root, N_WORLDS, kept)
