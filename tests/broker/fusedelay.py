"""A pass-through FUSE file system whose fsync is slow: a slow disk made of real parts.

``python -m tests.broker.fusedelay BACKING MOUNT DELAY_MS`` mirrors the directory BACKING
at MOUNT (on mfusepy, over libfuse 3) until it is unmounted (``fusermount3 -u MOUNT``) or
sent SIGTERM. Every fsync and fdatasync of a file waits DELAY_MS before syncing the backing
file; everything else passes straight through. It runs multithreaded, so a sleeping sync
holds up only its caller, as a slow disk's flush would. `mounted` starts one for a test.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def unavailable() -> str | None:
    """Why a FUSE test cannot run here (None: it can)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian package fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy (libfuse 3) cannot be loaded: {exc}"
    return None


def _operations(backing: str, delay_s: float) -> Any:
    import mfusepy

    def real(path: str) -> str:
        return os.path.join(backing, path.lstrip("/"))

    def passthrough(fn: Any) -> Any:
        def call(*args: Any) -> Any:
            try:
                return fn(*args)
            except OSError as exc:
                raise mfusepy.FuseOSError(exc.errno or errno.EIO) from None
        return call

    class SlowSync(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        @passthrough
        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None else os.lstat(real(path))
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
                    "st_atime_ns", "st_mtime_ns", "st_ctime_ns", "st_ino")
            out = {k: getattr(st, k) for k in keys}
            for k in ("st_atime", "st_mtime", "st_ctime"):
                out[k] = out.pop(k + "_ns")
            return out

        @passthrough
        def access(self, path: str, amode: int) -> int:
            if not os.access(real(path), amode):
                raise OSError(errno.EACCES, "access")
            return 0

        @passthrough
        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(real(path))]

        @passthrough
        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(real(path), mode)
            return 0

        @passthrough
        def rmdir(self, path: str) -> int:
            os.rmdir(real(path))
            return 0

        @passthrough
        def unlink(self, path: str) -> int:
            os.unlink(real(path))
            return 0

        @passthrough
        def rename(self, old: str, new: str) -> int:
            os.rename(real(old), real(new))
            return 0

        @passthrough
        def link(self, target: str, source: str) -> int:
            os.link(real(source), real(target))
            return 0

        @passthrough
        def symlink(self, target: str, source: str) -> int:
            os.symlink(source, real(target))
            return 0

        @passthrough
        def readlink(self, path: str) -> str:
            return os.readlink(real(path))

        @passthrough
        def chmod(self, path: str, mode: int) -> int:
            os.chmod(real(path), mode)
            return 0

        @passthrough
        def chown(self, path: str, uid: int, gid: int) -> int:
            os.chown(real(path), uid, gid)
            return 0

        @passthrough
        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            os.utime(real(path), ns=times)
            return 0

        @passthrough
        def statfs(self, path: str) -> dict[str, int]:
            st = os.statvfs(real(path))
            return {k: getattr(st, k) for k in (
                "f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                "f_files", "f_flag", "f_frsize", "f_namemax")}

        @passthrough
        def create(self, path: str, mode: int, fi: Any = None) -> int:
            return os.open(real(path), os.O_RDWR | os.O_CREAT, mode)

        @passthrough
        def open(self, path: str, flags: int) -> int:
            return os.open(real(path), flags)

        @passthrough
        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        @passthrough
        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            return os.pwrite(fh, data, offset)

        @passthrough
        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            if fh is not None:
                os.ftruncate(fh, length)
            else:
                os.truncate(real(path), length)
            return 0

        @passthrough
        def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
            if mode:
                raise OSError(errno.EOPNOTSUPP, "fallocate mode")
            os.posix_fallocate(fh, offset, size)
            return 0

        @passthrough
        def flush(self, path: str, fh: int) -> int:
            return 0

        @passthrough
        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        @passthrough
        def fsync(self, path: str, datasync: int, fh: int) -> int:
            time.sleep(delay_s)
            if datasync:
                os.fdatasync(fh)
            else:
                os.fsync(fh)
            return 0

        @passthrough
        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            time.sleep(delay_s)
            return 0

    return SlowSync()


def main(argv: list[str]) -> None:
    import mfusepy

    backing, mount, delay_ms = argv[0], argv[1], float(argv[2])
    mfusepy.FUSE(_operations(os.path.abspath(backing), delay_ms / 1000), mount,
                 foreground=True, nothreads=False)


def _is_mount(path: Path) -> bool:
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == str(path) for line in f)


@contextlib.contextmanager
def mounted(backing: Path, mount: Path, delay_ms: float) -> Iterator[subprocess.Popen[bytes]]:
    """Mount BACKING at MOUNT with fsyncs ``delay_ms`` slow, for the ``with`` block (the
    file system process is stopped and the mount gone after it, whatever happened)."""
    backing.mkdir(parents=True, exist_ok=True)
    mount.mkdir(parents=True, exist_ok=True)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (root, os.environ.get("PYTHONPATH", "")) if p)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.broker.fusedelay", str(backing), str(mount), str(delay_ms)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while not _is_mount(mount):
            if proc.poll() is not None:
                raise RuntimeError(f"the FUSE file system did not mount: "
                                   f"{proc.stderr.read().decode() if proc.stderr else ''}")
            if time.monotonic() > deadline:
                raise RuntimeError("the FUSE file system did not mount within 20 s")
            time.sleep(0.05)
        yield proc
    finally:
        subprocess.run(["fusermount3", "-u", "-z", str(mount)], capture_output=True, check=False)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()


if __name__ == "__main__":
    main(sys.argv[1:])
