"""`Episode`: a fault that persists (a file system not answering, a directory unreadable),
logged once when it starts and once when it ends, with how many times it was seen and for
how long, instead of a line at every periodic check that meets it."""

from __future__ import annotations

import logging
import time

__all__ = ["Episode"]


class Episode:
    """One kind of recurring failure of one periodic check: `failed` at each failure
    (the first is logged), `succeeded` at each success (logged when it ends one)."""

    def __init__(self, logger: logging.Logger, what: str, level: int = logging.WARNING) -> None:
        self.log = logger
        self.what = what
        self.level = level
        self.count = 0
        self._since = 0.0

    @property
    def ongoing(self) -> bool:
        return self.count > 0

    def failed(self, detail: object) -> None:
        self.count += 1
        if self.count == 1:
            self._since = time.monotonic()
            self.log.log(self.level, "%s: %s (said again when it ends)", self.what, detail)

    def succeeded(self) -> None:
        if self.count:
            self.log.log(self.level, "%s: works again, after %d failed checks in %.1f s",
                         self.what, self.count, time.monotonic() - self._since)
            self.count = 0
