"""Faults across hosts (tests/multihost.py): a ZooKeeper ensemble on three hosts, a
GlusterFS replica-3 volume on three storage hosts, two broker hosts each over its own FUSE
mount, the official client on a host of its own. Each scenario runs a named producer
(deduplication on) under ``send_async`` load on a fresh topic and fresh brokers, injects
one fault, heals it, and checks: the load resumes, everything acknowledged is consumed,
nothing is stored twice; it reports how long the clients waited (``recovery_s``).

Faults: the owner's host lost (link down, broker killed) or cut off (link down, broker
running); the ZooKeeper leader killed
(restarted afterwards); one storage host lost and brought back (the volume heals, the three
bricks hold identical files); two storage hosts lost (writes pause with a storage error,
never "fenced", and resume once they are back).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pulsar
import pytest

from magnetar.broker.config import BrokerConfig
from magnetar.storage.mounts import (
    CONFIRM_KEY,
    GLUSTER_MOUNT_OPTIONS,
    GLUSTER_OPTIONS,
    GLUSTER_VOLUME_OPTIONS,
)
from magnetar.testing import COMMAND
from tests.cluster.brokers import QUIET
from tests.cluster.test_partitions import Load, owner_url, read_all
from tests.multihost import (
    VOLUME,
    MultiHost,
    NsGlusterd,
    broker_conf,
    multihost_missing_reason,
    place,
    recipe,
    wait_quorum,
)
from tests.netbed import NetBed, NsBroker, sh

SESSION_S = 4.0
RESUME_S = 60.0  # bound on the wait for the load to resume after the heal
# the topic has no subscription: with the default retention (none), a slow run's
# housekeeping (every 60 s) may trim a segment a fault sealed before the read-back
KEEP_ALL = {"defaultRetentionTimeInMinutes": "-1", "defaultRetentionSizeInMB": "-1"}


def test_the_recipe_states_what_the_brokers_check(tmp_path: Path) -> None:
    """docs/deploy.md (no root needed): every block the bed runs is there; its broker.conf
    has only real keys, passes the broker's own checks and states exactly the GlusterFS
    options the broker asks for; its volume commands and fstab line set those options."""
    steps = recipe()
    assert set(steps) == {"install", "zoo.cfg", "myid", "volume", "fstab", "init",
                          "broker.conf", "unit"}
    # the unit runs the magnetar the install block puts into its virtual environment
    venv = re.search(r"python3 -m venv (\S+)", steps["install"])
    assert venv, steps["install"]
    assert f"{venv.group(1)}/bin/pip install " in steps["install"]
    exec_start = re.search(r"^ExecStart=(\S+) ", steps["unit"], re.M)
    assert exec_start and exec_start.group(1) == f"{venv.group(1)}/bin/magnetar", steps["unit"]
    assert re.search(r"^Requires=mnt-magnetar\.mount$", steps["unit"], re.M), steps["unit"]
    assert steps["fstab"].split()[1] == "/mnt/magnetar"  # (the mount unit's name)
    conf = broker_conf(steps["broker.conf"])
    known = {f.name for f in dataclasses.fields(BrokerConfig)}
    assert set(conf) <= known, set(conf) - known
    needed = {"clusterName", "metadataStoreUrl", "metadataStoreSessionTimeoutMillis",
              "advertisedAddress", "brokerServicePort", "webServicePort", "magnetarDataDir",
              "magnetarSharedStorage", "magnetarSharedStorageVolumeOptionsConfirmed",
              "brokerDeduplicationEnabled", "zookeeperSessionExpiredPolicy"}
    assert needed <= set(conf), needed - set(conf)
    (tmp_path / "broker.conf").write_text(steps["broker.conf"])
    loaded = BrokerConfig.load(tmp_path / "broker.conf")  # raises on a bad value
    assert loaded.magnetarSharedStorage and not loaded.unknown_keys
    stated = conf["magnetarSharedStorageVolumeOptionsConfirmed"].split(",")
    assert sorted(stated) == sorted(GLUSTER_OPTIONS)
    for option in GLUSTER_VOLUME_OPTIONS:
        key, value = option.split("=")
        assert f"gluster volume set {VOLUME} {key} {value}\n" in steps["volume"], option
    fstab_options = steps["fstab"].split()[3].split(",")
    assert set(GLUSTER_MOUNT_OPTIONS) <= set(fstab_options)
    assert f"clusterName={conf['clusterName']}" in steps["broker.conf"]
    assert f"--cluster {conf['clusterName']} " in steps["init"]


@pytest.fixture(scope="module")
def multihost(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiHost]:
    reason = multihost_missing_reason()
    if reason:
        pytest.skip(reason)
    root = tmp_path_factory.mktemp("multihost")
    with NetBed(root) as bed:
        mh = MultiHost(bed, root)
        print(f"multihost setup: {json.dumps({k: round(v, 1) for k, v in mh.timings.items()})}")
        yield mh


Fault = Callable[[MultiHost, NsBroker], Callable[[], None]]  # inject; returns the heal


def run_fault(mh: MultiHost, name: str, fault: Fault,
              record_property: Callable[[str, object], None], duration: float,
              after_heal: Callable[[MultiHost], object] = lambda mh: None,
              after_stop: Callable[[MultiHost], object] = lambda mh: None) -> dict[str, object]:
    """One fault under load for ``duration`` s; the checks of the module's docstring.
    ``after_heal`` runs once the load resumed after the heal, ``after_stop`` once it
    stopped (every send answered)."""
    topic = f"persistent://public/default/mh-{name}"
    brokers = mh.start_brokers(name, {
        "metadataStoreSessionTimeoutMillis": str(int(SESSION_S * 1000)), **KEEP_ALL})
    service_url = "pulsar://" + ",".join(f"{b.host.address}:{b.port}" for b in brokers)
    main = Load(mh.client, service_url, topic, "main")
    try:
        assert main.wait_acks(100, 0, 60), f"no load before the fault: {main.errors[-3:]}"
        url = mh.client.call(owner_url, brokers[0].web_url, topic)
        owner = next(b for b in brokers if b.url == url)
        faulted = time.monotonic()
        heal = fault(mh, owner)
        time.sleep(max(0.0, faulted + duration - time.monotonic()))
        heal()
        healed = time.monotonic()
        resumed = main.wait_acks(20, healed, RESUME_S)
        after_heal(mh)
        pending = main.stop(60)
        after_stop(mh)
        gap, gap_at = main.longest_gap()
        first_after_heal = min((t for t in main.ack_times if t > healed), default=None)
        report: dict[str, object] = {
            "scenario": name, "acked": len(main.acked), "failed": len(main.failed),
            "recovery_s": round(gap, 2),
            "wait_began_after_fault_s": round(main.started + gap_at - faulted, 2),
            "first_ack_after_heal_s": (None if first_after_heal is None
                                       else round(first_after_heal - healed, 2)),
            "resumed_after_heal": resumed,
        }
        print(f"multihost {name}: {json.dumps(report)}")
        for key, value in report.items():
            record_property(key, value)
        assert resumed, f"the load did not resume within {RESUME_S} s of the heal: {report}"
        assert not pending, f"sends never answered: {len(pending)}"
        stored = mh.client.call(read_all, service_url, topic)
        twice = [p for p, n in Counter(stored).items() if n > 1]
        assert not twice, f"stored twice: {twice[:10]} ({len(twice)})"
        lost = set(main.acked) - set(stored)
        assert not lost, f"acknowledged but not stored: {sorted(lost)[:10]} ({len(lost)})"
        assert set(stored) <= set(main.sent)
        return report
    except BaseException:
        for b in brokers:  # into the failed test's report
            lines = b.log_path.read_text(errors="replace").splitlines()
            print(f"--- {b.host.name}: the last of {b.log_path}")
            print("\n".join(lines[-30:]))
        raise
    finally:
        main.abandon()
        mh.stop_brokers()


def test_a_broker_refuses_the_volume_until_its_options_are_stated(multihost: MultiHost) -> None:
    """A shared-mode broker on the real GlusterFS mount, with the recipe's broker.conf less
    the key that states the volume's options: it exits 2 at once, naming the options to set
    and the key; the recipe's own broker.conf (the key included) is what the bed's brokers
    start with (`start_brokers`), so the key is all that differs."""
    host, mnt = multihost.broker_hosts[0], multihost.mounts[0]
    zk = {f"s{i}": z.host.address for i, z in enumerate(multihost.zookeepers, 1)}
    conf = broker_conf(place(recipe()["broker.conf"], zk))
    assert conf.pop(CONFIRM_KEY)
    conf["magnetarDataDir"] = str(mnt / "refused")
    path = multihost.root / "refused.conf"
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    done = host.sh(*COMMAND, "broker", "--config", str(path), check=False)
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "refusing shared storage" in done.stderr and "fuse.glusterfs" in done.stderr, done.stderr
    assert all(option in done.stderr for option in GLUSTER_OPTIONS), done.stderr
    assert f"{CONFIRM_KEY}=" in done.stderr, done.stderr


def test_check_shared_storage_passes_across_the_two_mounts(multihost: MultiHost) -> None:
    """`magnetar check-shared-storage` across the two broker hosts' mounts of the volume as
    the recipe mounts it: every check passes."""
    dirs = []
    for mnt in multihost.mounts:
        d = mnt / "checks"
        d.mkdir(exist_ok=True)
        dirs.append(str(d))
    done = multihost.broker_hosts[0].sh(*COMMAND, "check-shared-storage", *dirs, check=False)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "FAIL" not in done.stdout and " checks passed" in done.stdout, done.stdout


def brick_files(g: NsGlusterd) -> dict[str, str]:
    """Each file of a brick (Gluster's own ``.glusterfs`` aside) with its content's hash."""
    out = {}
    for path in g.brick.rglob("*"):
        rel = path.relative_to(g.brick)
        if rel.parts[0] == ".glusterfs" or not path.is_file():
            continue
        out[str(rel)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def lose_broker_host(mh: MultiHost, owner: NsBroker) -> Callable[[], None]:
    """The owner's host gone: its link down, its broker killed (the link comes back with
    no broker on it)."""
    owner.host.link_down()
    owner.kill()
    return owner.host.link_up


@pytest.mark.slow
def test_lose_the_owners_host(multihost: MultiHost,
                              record_property: Callable[[str, object], None]) -> None:
    run_fault(multihost, "brokerhost", lose_broker_host, record_property, SESSION_S + 3)


def cut_off_broker_host(mh: MultiHost, owner: NsBroker) -> Callable[[], None]:
    """The owner's host cut off (link down) with its broker running: it loses ZooKeeper and
    its mount's bricks; its session expires and the other broker takes its topics."""
    owner.host.link_down()
    return owner.host.link_up


@pytest.mark.slow
def test_cut_off_the_owners_host(multihost: MultiHost,
                                 record_property: Callable[[str, object], None]) -> None:
    run_fault(multihost, "brokercut", cut_off_broker_host, record_property, SESSION_S + 3)


@pytest.mark.slow
def test_lose_the_zookeeper_leader(multihost: MultiHost,
                                   record_property: Callable[[str, object], None]) -> None:
    leader = wait_quorum(multihost.zookeepers)

    def fault(mh: MultiHost, owner: NsBroker) -> Callable[[], None]:
        leader.host.link_down()
        leader.kill()

        def heal() -> None:
            leader.host.link_up()
            leader.start()

        return heal

    report = run_fault(multihost, "zkleader", fault, record_property, SESSION_S + 3,
                       after_heal=lambda mh: wait_quorum(mh.zookeepers))
    assert report["acked"]


@pytest.mark.slow
def test_lose_a_storage_host_and_heal(multihost: MultiHost,
                                      record_property: Callable[[str, object], None]) -> None:
    lost = multihost.glusterds[2]

    def fault(mh: MultiHost, owner: NsBroker) -> Callable[[], None]:
        lost.host.link_down()
        lost.kill()

        def heal() -> None:
            lost.host.link_up()
            lost.start()

        return heal

    def healed(mh: MultiHost) -> None:
        """Under load: until nothing is left to heal (Gluster's heal started by hand, as
        the recipe says, rather than waiting for its daemon's next crawl)."""
        t = time.monotonic()
        deadline = t + 90
        while mh.heal_info():
            assert time.monotonic() < deadline, f"not healed in 90 s: {mh.heal_info()} left"
            mh.glusterds[0].cli("volume", "heal", VOLUME, check=False)
            time.sleep(1)
        record_property("heal_s", round(time.monotonic() - t, 2))
        print(f"multihost storage1: healed in {time.monotonic() - t:.2f} s under load")

    def identical(mh: MultiHost) -> None:
        """With the load stopped: the three bricks hold the same files (bounded wait for
        the last writes' heal)."""
        t = time.monotonic()
        deadline = t + 60
        while mh.heal_info() or len({json.dumps(brick_files(g), sort_keys=True)
                                     for g in mh.glusterds}) != 1:
            assert time.monotonic() < deadline, (
                "bricks differ: " + "; ".join(f"{g.host.name}: {len(brick_files(g))} files"
                                             for g in mh.glusterds))
            mh.glusterds[0].cli("volume", "heal", VOLUME, check=False)
            time.sleep(1)
        record_property("bricks_identical_after_stop_s", round(time.monotonic() - t, 2))
        print(f"multihost storage1: bricks identical {time.monotonic() - t:.2f} s after "
              "the load stopped")

    run_fault(multihost, "storage1", fault, record_property, 10.0, after_heal=healed,
              after_stop=identical)


@pytest.mark.slow
def test_lose_two_storage_hosts(multihost: MultiHost,
                                record_property: Callable[[str, object], None]) -> None:
    lost = multihost.glusterds[1:]
    marks: dict[str, int] = {}

    def fault(mh: MultiHost, owner: NsBroker) -> Callable[[], None]:
        for b in mh.brokers:
            marks[b.host.name] = b.log_path.stat().st_size
        for g in lost:
            g.host.link_down()
            g.kill()

        def heal() -> None:
            for g in lost:
                g.host.link_up()
                g.launch()
            for g in lost:
                g.wait_ready()

        return heal

    brokers: list[NsBroker] = []

    def logs(mh: MultiHost) -> None:
        brokers.extend(mh.brokers)

    run_fault(multihost, "storage2", fault, record_property, 15.0, after_heal=logs)
    said = "".join(b.log_path.read_text(errors="replace")[marks[b.host.name]:]
                   for b in brokers)
    assert "storage error" in said, said[-3000:]  # the cause, named in the log
    assert "fenced" not in said.lower(), said[-3000:]


def send_some(url: str, topic: str, n: int) -> None:
    """``n`` messages acknowledged on ``topic`` through the official client."""
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=QUIET)
    try:
        producer = client.create_producer(topic)
        for i in range(n):
            producer.send(f"m{i}".encode())
    finally:
        client.close()


@pytest.mark.slow
def test_a_host_without_its_mount_serves_nothing(multihost: MultiHost) -> None:
    """Issue 38: a broker host whose GlusterFS mount goes away under its running broker
    (the broker stops, giving its bundles up, in one line), then restarted without its
    mount (the broker refuses to start on the empty directory under the mount point: exit
    2, naming the directory, the file system it is on and the identity expected), then
    with it (it serves again). The topic's acknowledged messages are read whole through
    the other broker meanwhile."""
    brokers = multihost.start_brokers("nomount", {"magnetarStorageIdentityCheckSeconds": "1"})
    try:
        victim, other = brokers[1], brokers[0]
        mnt = multihost.mounts[1]
        service_url = "pulsar://" + ",".join(f"{b.host.address}:{b.port}" for b in brokers)
        topic = "persistent://public/default/nomount"
        multihost.client.call(send_some, service_url, topic, 50)

        victim.host.sh("umount", "-l", str(mnt))  # the mount gone under the running broker
        assert victim.proc is not None
        assert victim.proc.wait(timeout=120) == 1
        victim.proc = None
        said = [line for line in victim.log_path.read_text(errors="replace").splitlines()
                if "expected storage identity" in line]
        assert len(said) == 1 and str(victim.data_dir) in said[0], said
        stored = multihost.client.call(read_all, other.url, topic)
        assert stored == [f"m{i}".encode() for i in range(50)]

        # the host "restarted" without its mount: the broker refuses the local directory
        done = sh(*victim.command, check=False)  # (its command runs in its host)
        assert done.returncode == 2, (done.returncode, done.stderr)
        err = done.stderr
        assert str(victim.data_dir) in err and "holds no storage identity" in err, err
        assert "fuse.glusterfs" not in err and "it is on:" in err and "check:" in err, err

        multihost.mounts[1] = multihost._mount(victim.host)  # mounted again: it serves
        victim.start(timeout=90)
        assert multihost.client.call(read_all, victim.url, topic) == stored
    finally:
        multihost.stop_brokers()
