"""Who changed which file of a shared data directory, and when: the test bed's check of the
file rule (issue 29 item 4: once a broker has fenced a ledger, no other broker creates,
truncates or writes a file of that ledger until it fences the ledger itself again).

`SharedDir` mounts a small tmpfs at the brokers' shared data directory (so that only their
files are watched) and watches the whole mount with ``fanotify``, which names the process
(pid) behind every event: a write, truncate or ``fallocate`` (``FAN_MODIFY``) and the close
of a file opened for writing (``FAN_CLOSE_WRITE``, which also reveals a file created and
left empty). A file whose first event comes from a broker was created by it.

`fenced_writes` replays the events in order: a broker's fence of a ledger is its writing of
the ledger's ``fence`` file (``.fence.<random>`` then renamed to ``fence``, see
``storage/fence.py``); from then on another broker's change to a file under that ledger's
directory is a violation, until that other broker fences the ledger itself (a legitimate
takeover with a newer epoch). Opening ``fence.lock`` to take the lock changes nothing and is
not counted. Not seen: renames, unlinks and directory creation (fanotify reports those
without the pid's file in this mode), and a file created and held open without a write.
"""

from __future__ import annotations

import ctypes
import os
import select
import struct
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

FAN_CLOEXEC, FAN_NONBLOCK = 0x1, 0x2
FAN_MARK_ADD, FAN_MARK_MOUNT = 0x1, 0x10
FAN_MODIFY, FAN_CLOSE_WRITE = 0x2, 0x8
AT_FDCWD = -100
EVENT = struct.Struct("<IBBHQii")  # struct fanotify_event_metadata

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int,
                                ctypes.c_char_p]


@dataclass(frozen=True)
class Event:
    """One file event: when it was read (monotonic), by which process, what, which file."""

    at: float
    pid: int
    modified: bool  # FAN_MODIFY (else only a close after writing access)
    path: str
    ino: int
    size: int


class SharedDir:
    """A tmpfs at ``path`` (created), watched with fanotify until `close` (which unmounts
    it). Use as a context manager."""

    def __init__(self, path: Path, size_mb: int = 512) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "magnetar-netbed",
                        str(path)], check=True, capture_output=True, timeout=30)
        self.events: list[Event] = []
        self._stop = threading.Event()
        self._fd = -1
        try:
            self._fd = _libc.fanotify_init(FAN_CLOEXEC | FAN_NONBLOCK,
                                           os.O_RDONLY | os.O_LARGEFILE)
            if self._fd < 0:
                raise OSError(ctypes.get_errno(), "fanotify_init")
            if _libc.fanotify_mark(self._fd, FAN_MARK_ADD | FAN_MARK_MOUNT,
                                   FAN_MODIFY | FAN_CLOSE_WRITE, AT_FDCWD,
                                   str(path).encode()) != 0:
                raise OSError(ctypes.get_errno(), f"fanotify_mark {path}")
        except BaseException:
            self.close()
            raise
        self._reader = threading.Thread(target=self._read, name="fanotify", daemon=True)
        self._reader.start()

    def __enter__(self) -> SharedDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if not ready:
                continue
            try:
                buf = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                continue
            now = time.monotonic()
            off = 0
            while off + EVENT.size <= len(buf):
                length, _, _, _, mask, fd, pid = EVENT.unpack_from(buf, off)
                off += length
                if fd < 0:
                    continue  # queue overflow: nothing to name
                try:
                    path = os.readlink(f"/proc/self/fd/{fd}").removesuffix(" (deleted)")
                    st = os.fstat(fd)
                    self.events.append(Event(now, pid, bool(mask & FAN_MODIFY), path,
                                             st.st_ino, st.st_size))
                except OSError:
                    pass
                finally:
                    os.close(fd)

    def settle(self, quiet: float = 0.5, timeout: float = 10.0) -> None:
        """Wait until no event has come for ``quiet`` seconds (bounded)."""
        deadline = time.monotonic() + timeout
        count = -1
        while count != len(self.events) and time.monotonic() < deadline:
            count = len(self.events)
            time.sleep(quiet)

    def close(self) -> None:
        self._stop.set()
        if self._fd >= 0:
            if hasattr(self, "_reader"):
                self._reader.join(5)
            os.close(self._fd)
            self._fd = -1
        for _ in range(20):
            done = subprocess.run(["umount", str(self.path)], capture_output=True, timeout=30)
            if done.returncode == 0 or not os.path.ismount(self.path):
                return
            time.sleep(0.5)  # a broker still exiting holds files open
        subprocess.run(["umount", "-l", str(self.path)], capture_output=True, timeout=30)


def _is_fence_write(path: str) -> bool:
    name = os.path.basename(path)
    return name == "fence" or name.startswith(".fence.")


@dataclass(frozen=True)
class Violation:
    """A change by ``pid`` to ``path`` after ``fencer`` fenced its ledger (``after`` s)."""

    pid: int
    fencer: int
    path: str
    what: str
    after: float

    def __str__(self) -> str:
        return (f"pid {self.pid} {self.what} {self.path} {self.after:.1f} s after pid "
                f"{self.fencer} fenced its ledger")


def fences(events: list[Event]) -> list[tuple[int, str, float]]:
    """(pid, ledger directory, when) of every fence written, in order."""
    return [(e.pid, os.path.dirname(e.path), e.at) for e in events if _is_fence_write(e.path)
            and e.modified]


def fenced_writes(events: list[Event], brokers: set[int]) -> list[Violation]:
    """The changes the file rule forbids (see the module's docstring), by the processes in
    ``brokers`` (other processes' events are not counted)."""
    fencer: dict[str, tuple[int, float]] = {}  # ledger directory -> (pid, when it fenced)
    seen: set[int] = set()
    out: list[Violation] = []
    for e in events:
        new = e.ino not in seen
        seen.add(e.ino)
        if e.pid not in brokers:
            continue
        directory = os.path.dirname(e.path)
        if _is_fence_write(e.path):
            fencer[directory] = (e.pid, e.at)
            continue
        if os.path.basename(e.path) == "fence.lock" and not e.modified:
            continue
        ledger = next((d for d in _ancestors(directory) if d in fencer), None)
        if ledger is None:
            continue
        pid, when = fencer[ledger]
        if pid != e.pid and (e.modified or new):
            what = "created" if new else "changed"
            out.append(Violation(e.pid, pid, e.path, what, e.at - when))
    return out


def _ancestors(directory: str) -> list[str]:
    out = [directory]
    while (parent := os.path.dirname(out[-1])) != out[-1]:
        out.append(parent)
    return out

