"""CasADi functions, called fast: through `Function.buffer()`, and compiled to C once per problem shape and cached
on disk.

An SQP iteration evaluates a handful of small CasADi functions; interpreted, they cost ~0.1 ms each on the CI
machine, compiled ~0.01 ms. `compiled(functions, tag)` generates C for the functions (CasADi's `CodeGenerator`),
compiles it with the system C compiler into a shared library in a user cache directory, and loads it back with
`casadi.external`.

The cache entry is keyed by a hash of the generated source, the CasADi version, the compiler and its flags, so any
change to the NLP (horizon, grid shape, weights) or the toolchain builds a new entry, and a second process finds the
first one's. Entries are written atomically (temporary file + rename) with a metadata file holding the library's
SHA-256; a library whose hash, metadata or function signatures do not match, or whose functions disagree with the
interpreted ones on a test input, is rebuilt, never used. No compiler, or a failed build: the interpreted functions,
with one log line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mnemo_mpc.atomic import atomic_write_json

log = logging.getLogger(__name__)

CACHE_ENV = "MNEMO_MPC_CACHE_DIR"
COMPILER_ENV = "CC"
# -O2: within a few percent of -O3 -march=native here at a third of the build time, and portable across the CPUs a
# shared home directory may see.
CFLAGS = ("-O2", "-fPIC")
BUILD_TIMEOUT_S = 600.0


@dataclass
class BuildInfo:
    """What `compiled` did: `compiled` False means the interpreted functions are in use (`reason` says why)."""

    compiled: bool
    cache_hit: bool = False
    build_s: float = 0.0
    path: str | None = None
    reason: str = ""
    checks: dict[str, Any] = field(default_factory=dict)


def cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("mnemo_mpc")) / "casadi"


def find_compiler() -> str | None:
    """$CC, else `cc` or `gcc` on PATH."""
    env = os.environ.get(COMPILER_ENV)
    if env:
        return shutil.which(env) or None
    return shutil.which("cc") or shutil.which("gcc")


def _compiler_id(cc: str) -> str:
    """The compiler's version line, part of the cache key. Asked once per process for each binary and its
    modification time: `cc --version` is a process launch, and every `SQPMPC` built paid it (~90 in the test suite)."""
    try:
        stamp: int | None = os.stat(cc).st_mtime_ns
    except OSError:
        stamp = None
    return _compiler_version(cc, stamp)


@functools.lru_cache(maxsize=8)
def _compiler_version(cc: str, stamp: int | None) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
        return out.stdout.splitlines()[0] if out.stdout else cc
    except (OSError, subprocess.SubprocessError):
        return cc


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _signature(f: Any) -> list:
    ins = [[f.name_in(i), *f.sparsity_in(i).shape, f.sparsity_in(i).nnz()] for i in range(f.n_in())]
    outs = [[f.name_out(i), *f.sparsity_out(i).shape, f.sparsity_out(i).nnz()] for i in range(f.n_out())]
    return [ins, outs]


def _self_test(original: dict[str, Any], loaded: dict[str, Any]) -> str:
    """Evaluate both on one deterministic input in [0, 1); '' if they agree (relative 1e-8), else what disagrees."""
    import casadi as ca

    rng = np.random.default_rng(0)
    for name, f in original.items():
        args = [ca.DM(f.sparsity_in(i), rng.uniform(0.0, 1.0, f.sparsity_in(i).nnz())) for i in range(f.n_in())]
        ref = f.call(args)
        got = loaded[name].call(args)
        for i, (a, b) in enumerate(zip(ref, got, strict=True)):
            a, b = np.asarray(a.nonzeros()), np.asarray(b.nonzeros())
            scale = 1.0 + float(np.nanmax(np.abs(a), initial=0.0))
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-8, atol=1e-10 * scale, equal_nan=True):
                return f"{name} output {i} differs from the interpreted function"
    return ""


def _load(lib: Path, meta_path: Path, key: str, functions: dict[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """The cached functions, or None and why the entry is not usable."""
    import casadi as ca

    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        return None, f"unreadable metadata ({exc})"
    if meta.get("key") != key:
        return None, "metadata of another build"
    try:
        if _sha256(lib) != meta.get("sha256"):
            return None, "library does not match its recorded SHA-256"
        loaded = {name: ca.external(f.name(), str(lib)) for name, f in functions.items()}
    except (OSError, RuntimeError) as exc:
        return None, f"cannot load ({str(exc).splitlines()[-1][:120] if str(exc) else type(exc).__name__})"
    for name, f in functions.items():
        if _signature(loaded[name]) != _signature(f):
            return None, f"function {name} has another signature"
    bad = _self_test(functions, loaded)
    if bad:
        return None, bad
    return loaded, ""


def _build(cc: str, sources: list[Path], lib: Path) -> str:
    """Compile each source to an object file (in parallel: one per core) and link them into `lib`; '' on success,
    else the compiler's last line. CasADi prefixes its helper symbols with the source's name, so they do not clash."""
    from concurrent.futures import ThreadPoolExecutor

    def run(cmd: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S)

    objects = [src.with_suffix(".o") for src in sources]
    commands = [[cc, *CFLAGS, "-c", str(src), "-o", str(obj)] for src, obj in zip(sources, objects, strict=True)]
    with ThreadPoolExecutor(max_workers=max(1, min(len(sources), os.cpu_count() or 1))) as pool:
        procs = list(pool.map(run, commands))
    if all(p.returncode == 0 for p in procs):
        procs.append(run([cc, "-shared", *map(str, objects), "-o", str(lib), "-lm"]))
    for proc in procs:
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["(no output)"]
            return tail[0][:200]
    return ""


def compiled(functions: dict[str, Any], tag: str, directory: Path | None = None) -> tuple[dict[str, Any], BuildInfo]:
    """`functions` compiled (from the cache when possible), or the interpreted ones if that cannot be done."""
    import casadi as ca

    directory = Path(directory) if directory is not None else cache_dir()
    cc = find_compiler()
    if cc is None:
        log.info("no C compiler found (set $CC); using CasADi's interpreted functions for %s", tag)
        return functions, BuildInfo(False, reason="no C compiler")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mnemo_mpc_codegen_") as tmp:
        sources = []
        for name, f in functions.items():
            gen = ca.CodeGenerator(f"{tag}_{name}.c", {"with_header": False})
            gen.add(f)
            sources.append(Path(gen.generate(tmp + os.sep)))
        code = "\n".join(src.read_text() for src in sources)
        key = hashlib.sha256(
            "\n".join([code, ca.__version__, _compiler_id(cc), " ".join(CFLAGS)]).encode("utf-8")
        ).hexdigest()[:20]
        lib = directory / f"{tag}-{key}.so"
        meta_path = lib.with_suffix(".json")
        if lib.exists() and meta_path.exists():
            loaded, why = _load(lib, meta_path, key, functions)
            if loaded is not None:
                return loaded, BuildInfo(True, cache_hit=True, build_s=time.perf_counter() - t0, path=str(lib))
            log.warning("cached compiled functions %s are not usable (%s); rebuilding", lib, why)
        log.info(
            "compiling %d CasADi functions for %s (once per machine; cached in %s)", len(functions), tag, directory
        )
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp_lib = tempfile.mkstemp(prefix=f".{lib.name}.", suffix=".tmp", dir=directory)
            os.close(fd)
            error = _build(cc, sources, Path(tmp_lib))
            if error:
                Path(tmp_lib).unlink(missing_ok=True)
                log.warning("compiling %s failed (%s); using CasADi's interpreted functions", tag, error)
                return functions, BuildInfo(False, reason=f"compiler failed: {error}")
            os.chmod(tmp_lib, 0o755)
            sha = _sha256(Path(tmp_lib))
            os.replace(tmp_lib, lib)
            build_s = time.perf_counter() - t0
            meta = {"key": key, "sha256": sha, "casadi": ca.__version__, "compiler": _compiler_id(cc)}
            meta.update({"cflags": list(CFLAGS), "functions": sorted(functions), "build_s": round(build_s, 3)})
            atomic_write_json(meta_path, meta)
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("compiling %s failed (%s); using CasADi's interpreted functions", tag, exc)
            return functions, BuildInfo(False, reason=f"build failed: {exc}")
    loaded, why = _load(lib, meta_path, key, functions)
    if loaded is None:
        log.warning("freshly compiled %s is not usable (%s); using CasADi's interpreted functions", tag, why)
        return functions, BuildInfo(False, reason=why)
    log.info("compiled %d CasADi functions for %s in %.1f s (cached at %s)", len(functions), tag, build_s, lib)
    return loaded, BuildInfo(True, cache_hit=False, build_s=build_s, path=str(lib))


class BufferedFunction:
    """A CasADi Function evaluated through `Function.buffer()`: inputs and outputs are numpy arrays that CasADi
    reads and writes in place (the ordinary call converts every argument element by element: for the ~7k map
    coefficients that costs more than the evaluation). Outputs are overwritten by the next call."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self._buffer, self._trigger = function.buffer()
        self.inputs = {n: np.zeros(function.sparsity_in(i).nnz()) for i, n in enumerate(function.name_in())}
        self.outputs = {n: np.zeros(function.sparsity_out(i).nnz()) for i, n in enumerate(function.name_out())}
        for i, n in enumerate(function.name_in()):
            self._buffer.set_arg(i, memoryview(self.inputs[n]))
        for i, n in enumerate(function.name_out()):
            self._buffer.set_res(i, memoryview(self.outputs[n]))

    def bind(self, name: str, array: np.ndarray) -> None:
        """Read input `name` from `array` (float64, contiguous, of the input's size) from now on: several
        functions can share one parameter vector that is written once per solve."""
        if array.dtype != np.float64 or not array.flags.c_contiguous or array.size != self.inputs[name].size:
            raise ValueError(f"bind({name!r}): expected a contiguous float64 array of {self.inputs[name].size}")
        self._buffer.set_arg(self.function.index_in(name), memoryview(array))
        self.inputs[name] = array

    def bind_output(self, name: str, array: np.ndarray) -> None:
        """Write output `name` straight into `array` (a contiguous float64 view of the output's size)."""
        if array.dtype != np.float64 or not array.flags.c_contiguous or array.size != self.outputs[name].size:
            raise ValueError(f"bind_output({name!r}): expected a contiguous float64 array of {self.outputs[name].size}")
        self._buffer.set_res(self.function.index_out(name), memoryview(array))
        self.outputs[name] = array

    def __call__(self, **args: Any) -> dict[str, np.ndarray]:
        for name, value in args.items():
            self.inputs[name][:] = value
        self._trigger()
        return self.outputs

    def stats(self) -> dict[str, Any]:
        return dict(self._buffer.stats())
