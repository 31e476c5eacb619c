"""Where the package's data folders are: `sim/` (URDFs, sample worlds, scenarios), `models/`, `config/`, `launch/`.

The same data is found from three installs:

- a source checkout (`pip install -e .`, or plain `PYTHONPATH`): the folder at the repository root, next to
  `package.xml`;
- a pip install: setup.py's `data_files` put it in `<prefix>/share/mnemo_mpc/<kind>`, where `<prefix>` is the install
  prefix (the venv, `--prefix`, `--user`'s base), found from the installed package's own location
  (`<prefix>/lib/pythonX.Y/site-packages/mnemo_mpc`) and from `sys.prefix`;
- a colcon (ament_python) install: the same `share/mnemo_mpc/<kind>` under the package's install prefix, which the
  ament resource index names (`ament_index_python.get_package_share_directory`, reading `AMENT_PREFIX_PATH` as
  `source install/setup.bash` sets it).

`$MNEMO_MPC_<KIND>` (e.g. `MNEMO_MPC_MODELS`, `MNEMO_MPC_SIM`) names a folder that is searched first. Only the
standard library is imported here (ament_index_python when present), so any module may use it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from mnemo_mpc.errors import InputError

PACKAGE = "mnemo_mpc"
KINDS = ("sim", "models", "config", "launch")

_PACKAGE_DIR = Path(__file__).resolve().parent


def _ament_share() -> Path | None:
    """The package's share folder from the ament resource index, or None (no ament_index_python, no
    AMENT_PREFIX_PATH, or the package is not in the index)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_share_directory
    except ImportError:
        return None
    try:
        return Path(get_package_share_directory(PACKAGE))
    except (PackageNotFoundError, OSError, ValueError):  # OSError: AMENT_PREFIX_PATH unset
        return None


def candidate_dirs(kind: str) -> list[Path]:
    """Every place `kind` is looked for, in order of preference (existing or not; see the module docstring)."""
    if kind not in KINDS:
        raise InputError(f"share folder kind: expected one of {KINDS}, got {kind!r}")
    out: list[Path] = []
    override = os.environ.get(f"MNEMO_MPC_{kind.upper()}")
    if override:
        out.append(Path(override))
    checkout = _PACKAGE_DIR.parent
    if (checkout / "package.xml").is_file() and (checkout / "setup.py").is_file():
        out.append(checkout / kind)
    # <prefix>/lib/pythonX.Y/site-packages/mnemo_mpc -> <prefix>
    if len(_PACKAGE_DIR.parents) > 3:
        out.append(_PACKAGE_DIR.parents[3] / "share" / PACKAGE / kind)
    ament = _ament_share()
    if ament is not None:
        out.append(ament / kind)
    out.append(Path(sys.prefix) / "share" / PACKAGE / kind)
    return list(dict.fromkeys(out))  # each place once, first mention kept


def share_dirs(kind: str) -> list[Path]:
    """The existing folders of `kind`, most preferred first (possibly empty)."""
    return [d for d in candidate_dirs(kind) if d.is_dir()]


def share_dir(kind: str) -> Path:
    """The preferred existing folder of `kind`; InputError naming every place searched when there is none."""
    found = share_dirs(kind)
    if not found:
        searched = ", ".join(str(d) for d in candidate_dirs(kind))
        raise InputError(
            f"mnemo_mpc data folder '{kind}' not found; searched {searched} (set MNEMO_MPC_{kind.upper()})"
        )
    return found[0]


def share_file(kind: str, relative: str | os.PathLike[str]) -> Path:
    """The first `<folder>/<relative>` that exists among the folders of `kind`; InputError naming the places
    searched when none has it."""
    for d in share_dirs(kind):
        path = d / relative
        if path.exists():
            return path
    searched = ", ".join(str(d / relative) for d in candidate_dirs(kind))
    raise InputError(f"mnemo_mpc data file '{kind}/{relative}' not found; searched {searched}")


__all__ = ["KINDS", "PACKAGE", "candidate_dirs", "share_dir", "share_dirs", "share_file"]
