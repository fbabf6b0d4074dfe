"""The file system under a shared data directory (storage/mounts.py), from mount tables as
the kernel writes them: the mount found by longest prefix, its kind, and the settings
refused with the options that fix them; and ``magnetar check-shared-storage`` on two paths
of one local directory (every check passes) and on two directories that are not one
volume (exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from magnetar.storage import mounts
from magnetar.storage.mounts import Mount, mount_of, parse_mounts, problems
from magnetar.storage.shared_checks import CHECKS

#: lines as Linux prints them (nfs_show_mount_options, fuse, ceph), escapes included
TABLE = r"""/dev/vda / ext4 rw,relatime,discard,errors=remount-ro 0 0
proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /run tmpfs rw,nosuid,nodev,size=1635656k,mode=755 0 0
nfs1:/export /mnt/nfs nfs4 rw,relatime,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.2,local_lock=none,addr=10.0.0.1 0 0
nfs1:/safe /mnt/nfs/safe nfs4 rw,sync,relatime,vers=4.2,rsize=1048576,wsize=1048576,namlen=255,acregmin=0,acregmax=0,acdirmin=0,acdirmax=0,hard,noac,proto=tcp,timeo=600,retrans=2,sec=sys,lookupcache=none,local_lock=none,addr=10.0.0.1 0 0
old:/v3 /mnt/v3 nfs rw,relatime,vers=3,soft,nolock,proto=tcp,timeo=600,retrans=2,sec=sys,local_lock=all,addr=10.0.0.3 0 0
s1:/gv0 /mnt/gluster\040a fuse.glusterfs rw,relatime,user_id=0,group_id=0,default_permissions,allow_other,max_read=131072 0 0
10.0.0.4:6789:/ /mnt/ceph ceph rw,relatime,name=admin,secret=<hidden>,acl 0 0
//srv/share /mnt/smb cifs rw,relatime,vers=3.1.1,cache=strict 0 0
"""


def at(path: str) -> Mount:
    m = mount_of(path, parse_mounts(TABLE))
    assert m is not None
    return m


def test_parse_and_longest_prefix() -> None:
    table = parse_mounts(TABLE)
    assert len(table) == 9
    assert at("/var/lib/magnetar").fstype == "ext4"
    assert at("/mnt/nfs/data").device == "nfs1:/export"
    assert at("/mnt/nfs/safe/data").device == "nfs1:/safe"  # the longer prefix wins
    assert at("/mnt/nfs").device == "nfs1:/export"
    assert at("/mnt/nfsother/x").fstype == "ext4"  # a prefix of the name, not a parent
    assert at("/mnt/gluster a/data").kind == mounts.GLUSTERFS  # \040 is a space
    assert at("/mnt/ceph/x").kind == mounts.CEPH
    assert at("/mnt/smb/x").kind == mounts.UNSUPPORTED
    assert at("/mnt/v3/x").option("vers") == "3" and at("/mnt/v3/x").option("soft") == ""
    stacked = parse_mounts(TABLE + "tmpfs /mnt/nfs tmpfs rw 0 0\n")  # mounted over it later
    assert mount_of("/mnt/nfs/data", stacked).fstype == "tmpfs"  # type: ignore[union-attr]


def test_nfs_settings_refused_with_the_options_to_set() -> None:
    assert problems(at("/mnt/nfs/safe/data")) == []
    default = " ".join(problems(at("/mnt/nfs/data")))
    assert "mount with noac" in default and "lookupcache=none" in default
    assert "hard" not in default  # it is hard already
    old = " ".join(problems(at("/mnt/v3/data")))
    for needed in ("mount with hard", "remove nolock", "local_lock=none", "noac", "lookupcache=none"):
        assert needed in old, needed
    actimeo = Mount("s:/e", "/m", "nfs4", ("hard", "actimeo=0", "lookupcache=none"))
    assert problems(actimeo) == []  # fstab spelling, as given to mount(8)


def test_glusterfs_needs_its_options_stated() -> None:
    gluster = at("/mnt/gluster a/data")
    refused = problems(gluster)
    assert len(refused) == 1
    text = refused[0]
    for option in mounts.GLUSTER_OPTIONS:
        assert option in text, option
    assert f"{mounts.CONFIRM_KEY}={','.join(mounts.GLUSTER_OPTIONS)}" in text
    assert problems(gluster, ",".join(mounts.GLUSTER_OPTIONS)) == []
    partly = " ".join(mounts.GLUSTER_OPTIONS[:-1])  # space separated works too
    assert "not stated yet: direct-io-mode=enable" in problems(gluster, partly)[0]


def test_local_and_ceph_accepted_smb_refused() -> None:
    assert problems(at("/var/lib/magnetar")) == []
    assert problems(at("/mnt/ceph/data")) == []
    assert "NFSv4" in problems(at("/mnt/smb/data"))[0]


def test_check_data_dir_reads_a_mount_table(tmp_path: Path) -> None:
    table = tmp_path / "mounts"
    table.write_text(TABLE)
    mount, found = mounts.check_data_dir("/mnt/nfs/data/not-made-yet", mounts_path=str(table))
    assert mount is not None and mount.device == "nfs1:/export" and found
    assert mounts.check_data_dir("/x", mounts_path=str(tmp_path / "none")) == (None, [])
    # this machine's own table: the test's directory is on some mount, accepted as local
    mount, found = mounts.check_data_dir(str(tmp_path / "data"))
    assert found == []


def magnetar(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[2] / "src"), os.environ.get("PYTHONPATH")) if p))
    return subprocess.run([sys.executable, "-m", "magnetar.cli.main", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_check_shared_storage_on_one_local_directory(tmp_path: Path) -> None:
    """Two paths of one directory (the directory and a symlink to it): every check passes,
    and nothing is left behind."""
    (tmp_path / "data").mkdir()
    (tmp_path / "other-path").symlink_to(tmp_path / "data")
    done = magnetar("check-shared-storage", str(tmp_path / "data"), str(tmp_path / "other-path"))
    assert done.returncode == 0, done.stdout + done.stderr
    verdicts = [line for line in done.stdout.splitlines() if line.startswith(("PASS", "FAIL"))]
    assert len(verdicts) == len(CHECKS) >= 12 and all(v.startswith("PASS") for v in verdicts)
    assert f"{len(CHECKS)} of {len(CHECKS)} checks passed" in done.stdout
    assert os.listdir(tmp_path / "data") == []
    done = magnetar("check-shared-storage", str(tmp_path / "data"), str(tmp_path / "other-path"),
                    "-o", "json")
    assert [v["ok"] for v in json.loads(done.stdout)] == [True] * len(CHECKS)


def test_check_shared_storage_on_two_volumes_fails(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    done = magnetar("check-shared-storage", str(tmp_path / "a"), str(tmp_path / "b"))
    assert done.returncode == 1 and "not two mounts of one volume" in done.stderr
    done = magnetar("check-shared-storage", str(tmp_path / "a"), str(tmp_path / "missing"))
    assert done.returncode == 1 and "is not a directory" in done.stderr
    assert os.listdir(tmp_path / "a") == []


def test_every_check_fails_across_two_unrelated_directories(tmp_path: Path) -> None:
    """No check passes when the second path does not show what the first one writes (two
    separate directories): each can fail, and says what it saw."""
    from magnetar.storage.shared_checks import CheckFailed

    for name, check in CHECKS:
        a, b = tmp_path / name / "a", tmp_path / name / "b"
        a.mkdir(parents=True)
        b.mkdir()
        try:
            detail = check(str(a), str(b))
        except (CheckFailed, OSError) as exc:
            assert str(exc), name
        else:
            raise AssertionError(f"{name} passed across two unrelated directories: {detail}")


def test_shared_mode_start_names_the_file_system(tmp_path: Path) -> None:
    """A broker in shared mode reads the mount under its data directory at start and says
    in one line what it is (here a local one: for brokers on this host only)."""
    from magnetar.testing import standalone

    with standalone({"magnetarSharedStorage": True}, data_dir=tmp_path / "data") as broker:
        log = broker.log_path.read_text()
    mount, _ = mounts.check_data_dir(str(tmp_path / "data"))
    assert mount is not None
    lines = [line for line in log.splitlines() if "shared data directory" in line]
    assert len(lines) == 1 and mounts.describe(mount) in lines[0], log
    assert "for brokers on this host only" in lines[0]


def test_where_a_new_files_sync_covers_its_name(tmp_path: Path) -> None:
    """ext4 and XFS make a new file's name durable with its own sync; tmpfs, overlay, btrfs,
    FUSE and network file systems are not trusted to; an unreadable table says no."""
    table = tmp_path / "mounts"
    table.write_text(
        "/dev/vda / ext4 rw,relatime 0 0\n"
        "/dev/vdb /srv/xfs xfs rw,relatime 0 0\n"
        "/dev/vdc /srv/btrfs btrfs rw,relatime 0 0\n"
        "overlay /srv/ovl overlay rw,lowerdir=/a,upperdir=/b,workdir=/c 0 0\n"
        "tmpfs /srv/tmp tmpfs rw 0 0\n"
        "s1:/gv0 /srv/gluster fuse.glusterfs rw,relatime 0 0\n"
        "nfs1:/export /srv/nfs nfs4 rw,hard 0 0\n")

    def covers(path: str) -> bool:
        return mounts.file_sync_covers_new_entries(path, mounts_path=str(table))

    assert covers("/var/lib/magnetar/data") and covers("/srv/xfs/data")
    assert not any(covers(f"/srv/{kind}/data")
                   for kind in ("btrfs", "ovl", "tmp", "gluster", "nfs"))
    assert not mounts.file_sync_covers_new_entries("/x", mounts_path=str(tmp_path / "none"))
