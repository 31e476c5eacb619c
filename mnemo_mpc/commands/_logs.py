"""Console logging while a command runs many closed-loop episodes under a progress bar (`eval`).

The controller (`mnemo_mpc.nav.*`) logs what it does inside an episode -- a start blocked by an obstacle that moved
into the robot's cells, an infeasible MPC problem, a recovery started or skipped -- at INFO and WARNING. For one
episode (`demo`, the node) each of those lines is news. Over an evaluation of many worlds with moving obstacles they
are the expected cost of the setting (about 23 "start blocked ... in collision" WARNINGs in a 20-world run), the
episode results count their consequences (recoveries, failures, collisions), and printed one by one they broke the
progress bar into pieces.

`episode_notes` therefore, for the duration of the episodes:

* routes every console log record through tqdm (`tqdm.contrib.logging.logging_redirect_tqdm`), so a line that is
  printed appears above the bar instead of inside it;
* holds back the controller's records below ERROR (unless the user asked for `-v`), counting them by kind, and
  afterwards logs one INFO line with the counts (`controller notes held back during the episodes: start blocked
  x18, ...`).

Errors, and everything from other loggers, are printed as they come.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections import Counter
from collections.abc import Iterator

HELD_LOGGER = "mnemo_mpc.nav"  # the controller and its parts (recovery, own path, prefetch...)

log = logging.getLogger("mnemo_mpc.commands")


def _kind(record: logging.LogRecord) -> str:
    """A record's kind: its message up to the first ':', ';' or '(' ("start blocked", "MPC problem infeasible")."""
    return re.split(r"[:;(]", record.getMessage(), maxsplit=1)[0].strip()[:60] or record.name


class HeldNotes(logging.Filter):
    """Drops (and counts) records of `HELD_LOGGER` and its children below ERROR; passes everything else."""

    def __init__(self) -> None:
        super().__init__()
        self.warnings: Counter[str] = Counter()
        self.notes = 0
        self._last: logging.LogRecord | None = None  # the filter sits on every console handler: count a record once

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR or not (
            record.name == HELD_LOGGER or record.name.startswith(HELD_LOGGER + ".")
        ):
            return True
        if record is self._last:
            return False
        self._last = record
        if record.levelno >= logging.WARNING:
            self.warnings[_kind(record)] += 1
        else:
            self.notes += 1
        return False

    def summary(self) -> str | None:
        """One line with what was held back, or None when nothing was."""
        if not self.warnings and not self.notes:
            return None
        parts = [f"{kind} x{n}" for kind, n in self.warnings.most_common()]
        if self.notes:
            parts.append(f"{self.notes} info line{'s' if self.notes != 1 else ''}")
        return f"controller notes held back during the episodes: {', '.join(parts)} (mnemo-mpc -v prints each)"


@contextlib.contextmanager
def episode_notes(verbose: bool = False) -> Iterator[HeldNotes | None]:
    """See the module docstring. Yields the filter (None with `verbose`: every record is printed, above the bar)."""
    from tqdm.contrib.logging import logging_redirect_tqdm

    with logging_redirect_tqdm():
        if verbose:
            yield None
            return
        held = HeldNotes()
        handlers = list(logging.getLogger().handlers)
        for h in handlers:
            h.addFilter(held)
        try:
            yield held
        finally:
            for h in handlers:
                h.removeFilter(held)
    line = held.summary()
    if line is not None:
        log.info("%s", line)
