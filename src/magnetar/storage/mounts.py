"""What file system a shared data directory is on, and whether its settings are safe for
brokers sharing it: the mount table (``/proc/mounts``) parsed, the mount holding a path
found by longest prefix, its kind (GlusterFS's FUSE client, NFS, CephFS, local) and the
settings known to break what the brokers rely on across hosts (docs/cluster.md, "Across
hosts"), each named with the option that fixes it; and whether a local data directory's
file system makes a new file's directory entries durable with the file's own sync
(`file_sync_covers_new_entries`). Pure but for reading the mount table.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

PROC_MOUNTS = "/proc/mounts"

#: kinds of file system, by ``fstype``
GLUSTERFS, NFS, CEPH, LOCAL, UNSUPPORTED = "glusterfs", "nfs", "ceph", "local", "unsupported"

#: network file systems without coherent caches or cross-host locks brokers could rely on
_UNSUPPORTED = {"cifs", "smb3", "smbfs", "9p", "fuse.sshfs", "fuse.s3fs", "fuse.rclone",
                "fuse.gcsfuse", "fuse.goofys", "davfs", "fuse.davfs2"}

#: what a GlusterFS volume and its FUSE mount need (issue 30: with these, 12 of 12 checks of
#: ``magnetar check-shared-storage`` pass across two mounts; with Gluster's default caches, 6
#: fail, among them the new inode a replaced fence file must show): the volume's
#: performance translators off, the FUSE client's attribute, entry and negative-lookup
#: caches at 0 seconds, and its page cache bypassed (``direct-io-mode=enable``: without it
#: an overwrite inside a file the other mount read before stays unseen there, measured on
#: the multi-host bed; the mount helper cannot pass ``fopen-keep-cache`` off)
GLUSTER_VOLUME_OPTIONS = (
    "performance.write-behind=off", "performance.read-ahead=off", "performance.io-cache=off",
    "performance.quick-read=off", "performance.stat-prefetch=off", "performance.open-behind=off",
    "performance.readdir-ahead=off", "performance.nl-cache=off", "performance.flush-behind=off",
)
GLUSTER_MOUNT_OPTIONS = ("attribute-timeout=0", "entry-timeout=0", "negative-timeout=0",
                         "direct-io-mode=enable")
GLUSTER_OPTIONS = GLUSTER_VOLUME_OPTIONS + GLUSTER_MOUNT_OPTIONS

#: the broker.conf key in which a user states the GlusterFS options above are set
CONFIRM_KEY = "magnetarSharedStorageVolumeOptionsConfirmed"

#: local file systems on which an fsync or fdatasync of a newly created file also makes its
#: name in its directory durable. ext4 with a journal: the sync commits the journal's
#: transaction holding the file's creation (and every earlier one); ext4 without one: the
#: sync writes the directory's blocks and inode itself (the kernel's ``ext4_sync_parent``,
#: for a file created since it was last read in: kept in memory while it is open); XFS: the
#: sync forces the log up to the new inode's last change, which holds its creation. Not
#: btrfs, overlay, FUSE or network file systems: there the directory needs its own fsync.
FILE_SYNC_COVERS_NEW_ENTRIES = frozenset({"ext4", "xfs"})

#: NFS mount options the brokers need (docs/cluster.md)
NFS_OPTIONS = "hard,noac,lookupcache=none (locking on: no nolock, no local_lock)"


@dataclass(frozen=True)
class Mount:
    """One line of the mount table."""

    device: str
    mount_point: str
    fstype: str
    options: tuple[str, ...] = field(default=())

    def option(self, name: str) -> str | None:
        """The value of ``name=value`` ("" for a bare flag), None when absent (the last
        one counts, as the kernel's parser)."""
        found = None
        for opt in self.options:
            key, sep, value = opt.partition("=")
            if key == name:
                found = value if sep else ""
        return found

    @property
    def kind(self) -> str:
        return kind_of(self.fstype)


def _unescape(text: str) -> str:
    """The kernel's octal escapes in the mount table (``\\040`` a space, ``\\011`` a tab...)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def parse_mounts(text: str) -> list[Mount]:
    """The mounts of a ``/proc/mounts`` text, in order (lines that are not mounts skipped)."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mounts.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2],
                            tuple(parts[3].split(","))))
    return mounts


def kind_of(fstype: str) -> str:
    if fstype == "fuse.glusterfs" or fstype == "glusterfs":
        return GLUSTERFS
    if fstype in ("nfs", "nfs4"):
        return NFS
    if fstype in ("ceph", "fuse.ceph", "fuse.ceph-fuse"):
        return CEPH
    if fstype in _UNSUPPORTED:
        return UNSUPPORTED
    return LOCAL


def mount_of(path: str, mounts: list[Mount]) -> Mount | None:
    """The mount holding ``path`` (absolute, symlinks resolved): the longest mount point
    that is a prefix of it, the last mounted one when several are on the same point."""
    best: Mount | None = None
    for m in mounts:
        point = m.mount_point.rstrip("/") or "/"
        inside = path == point or path.startswith(point + "/") or point == "/"
        if inside and (best is None or len(point) >= len(best.mount_point.rstrip("/") or "/")):
            best = m
    return best


def existing_real_path(path: str) -> str:
    """``path`` with symlinks resolved, through its nearest existing ancestor (a data
    directory not made yet lives on its parent's file system)."""
    path = os.path.abspath(path)
    missing: list[str] = []
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path, tail = os.path.split(path)
        missing.append(tail)
    return os.path.join(os.path.realpath(path), *reversed(missing))


def confirmed_options(text: str) -> set[str]:
    """The options a user stated in ``magnetarSharedStorageVolumeOptionsConfirmed``
    (comma or space separated)."""
    return {o.strip() for o in re.split(r"[,\s]+", text) if o.strip()}


def problems(mount: Mount, confirmed: str = "") -> list[str]:
    """What is unsafe about ``mount`` for brokers sharing a directory on it, each with the
    option to set; [] when nothing known is."""
    if mount.kind == NFS:
        return _nfs_problems(mount)
    if mount.kind == GLUSTERFS:
        missing = [o for o in GLUSTER_OPTIONS if o not in confirmed_options(confirmed)]
        if not missing:
            return []
        return [f"GlusterFS's caches break what brokers sharing a directory rely on (a "
                f"replaced file's new inode, a file fsynced on one host seen on another) "
                f"unless the volume is set with `gluster volume set VOLUME OPTION VALUE` for "
                f"{', '.join(GLUSTER_VOLUME_OPTIONS)} and mounted with "
                f"-o {','.join(GLUSTER_MOUNT_OPTIONS)}; neither shows in the mount table, so "
                f"once they are set, state them in broker.conf: "
                f"{CONFIRM_KEY}={','.join(GLUSTER_OPTIONS)} (not stated yet: "
                f"{', '.join(missing)})"]
    if mount.kind == UNSUPPORTED:
        return [f"{mount.fstype} gives no coherent caches or cross-host locks: brokers "
                "cannot share a directory on it; use NFSv4 (mounted "
                f"{NFS_OPTIONS}), GlusterFS or CephFS (docs/cluster.md)"]
    return []


def _nfs_problems(mount: Mount) -> list[str]:
    found = []
    if mount.option("soft") is not None or mount.option("softerr") is not None:
        found.append("soft (an I/O error after a timeout can lose acknowledged writes): mount with hard")
    zero_cache = all(mount.option(k) == "0" for k in ("acregmin", "acregmax", "acdirmin", "acdirmax"))
    if mount.option("noac") is None and mount.option("actimeo") != "0" and not zero_cache:
        found.append("attribute caching on (a stale stat hides a new fence): mount with noac")
    if mount.option("lookupcache") != "none":
        found.append("lookup caching on (another host's new file may stay invisible): mount "
                     "with lookupcache=none")
    if mount.option("nolock") is not None:
        found.append("nolock (flock does not cross hosts): remove nolock")
    local_lock = mount.option("local_lock")
    if local_lock not in (None, "none"):
        found.append(f"local_lock={local_lock} (flock stays on this host): use local_lock=none")
    return found


def describe(mount: Mount) -> str:
    """One line: what the data directory is on."""
    return f"{mount.fstype} {mount.device} mounted at {mount.mount_point} ({mount.kind})"


def mount_holding(path: str, mounts_path: str = PROC_MOUNTS) -> Mount | None:
    """The mount holding ``path`` in the mount table at ``mounts_path`` (None: the table
    unreadable, as outside Linux, or no mount holds it)."""
    try:
        with open(mounts_path) as f:
            mounts = parse_mounts(f.read())
    except OSError:
        return None
    return mount_of(existing_real_path(path), mounts)


def check_data_dir(path: str, confirmed: str = "", mounts_path: str = PROC_MOUNTS
                   ) -> tuple[Mount | None, list[str]]:
    """The mount holding ``path`` and what is unsafe about it for shared storage (the mount
    table unreadable, as outside Linux: (None, []))."""
    mount = mount_holding(path, mounts_path)
    if mount is None:
        return None, []
    return mount, problems(mount, confirmed)


def file_sync_covers_new_entries(path: str, mounts_path: str = PROC_MOUNTS) -> bool:
    """Whether ``path`` is on a file system (`FILE_SYNC_COVERS_NEW_ENTRIES`) where a new
    file's sync, while it is still open, makes its name durable without an fsync of its
    directory; False when unsure (the mount table unreadable, a path on another kind)."""
    mount = mount_holding(path, mounts_path)
    return mount is not None and mount.fstype in FILE_SYNC_COVERS_NEW_ENTRIES


FSTAB = "/etc/fstab"


def mount_to_check(path: str, mounts_path: str = PROC_MOUNTS, fstab_path: str = FSTAB) -> str:
    """What an operator should check when ``path`` is not on the volume it should be: the
    ``/etc/fstab`` entry over it that is not mounted now (the usual cause: a mount that
    failed at boot), else the mount holding it, else the path itself."""
    real = existing_real_path(path)
    current = mount_holding(path, mounts_path)
    try:
        with open(fstab_path) as f:
            wanted = mount_of(real, [m for m in parse_mounts(f.read())
                                     if not m.device.startswith("#") and m.mount_point != "/"])
    except OSError:
        wanted = None
    if wanted is not None and (current is None or current.mount_point.rstrip("/")
                               != wanted.mount_point.rstrip("/")):
        return (f"{wanted.mount_point} ({wanted.fstype} {wanted.device} in {fstab_path}) is "
                f"not mounted: `findmnt {wanted.mount_point}`, `mount {wanted.mount_point}`")
    if current is not None and current.mount_point != "/":
        return f"the mount at {current.mount_point}: `findmnt {current.mount_point}`"
    return (f"the shared volume's mount over {path} (it is on the root file system now): "
            f"`findmnt --target {path}`")
