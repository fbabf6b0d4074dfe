"""Partitions and pauses, with brokers on "hosts" of their own (network namespaces,
tests/netbed.py): ZooKeeper on ``zk``, two brokers on ``b1`` and ``b2`` sharing one data
directory (a tmpfs watched with fanotify, tests/filewatch.py), the official client on
``client``. Each scenario runs under load (a named producer, so deduplication applies,
sending with ``send_async`` and counting the sends its callbacks acknowledge), injects one
fault for the session timeout + 5 s, heals it, and checks:

- the load resumes after the heal, and everything acknowledged is consumed;
- nothing is stored twice (no payload read twice from the topic);
- the file rule: no broker creates or changes a file of a ledger after another broker
  fenced that ledger (unless it fenced it again itself); a data check that fails after
  such changes is reported as the rule's failure (`FencedWrite`): they are its cause until
  shown otherwise;
- and it reports how long the clients waited: the longest gap between acknowledged sends
  of the producer that ran throughout, and how long a producer opened during the fault (at
  the broker that was not faulted) waited for its first acknowledgement.

Faults: (a) the owner cut from ZooKeeper only (iptables in its namespace); (b) the owner's
link down; (c) ZooKeeper frozen (SIGSTOP) past the session timeout; (d) the owner frozen
past it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pulsar
import pytest

from tests.filewatch import Event, SharedDir, fenced_writes, fences
from tests.netbed import Host, NetBed, NsBroker, NsZooKeeper, netbed_missing_reason

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
SESSION_S = 4.0
FAULT_S = SESSION_S + 5  # the faulted side's session expires; the other side can take over
RESUME_S = 40.0  # bound on the wait for the load to resume after the heal


class NotServingAgain(AssertionError):
    """The cluster did not serve the load again after the heal (a broker shut down)."""


class FencedWrite(AssertionError):
    """A broker changed a file of a ledger another broker had fenced (the file rule)."""


class Load:
    """A producer named ``name`` (deduplication on) on the client host, sending ``rate``
    messages a second with ``send_async`` until `stop`; acknowledged payloads and their
    times come from the callbacks."""

    def __init__(self, host: Host, service_url: str, topic: str, name: str,
                 rate: float = 100.0) -> None:
        self.url, self.topic, self.name, self.interval = service_url, topic, name, 1 / rate
        self.sent: list[bytes] = []
        self.acked: list[bytes] = []
        self.ack_times: list[float] = []
        self.failed: list[tuple[bytes, str]] = []
        self.errors: list[str] = []
        self.started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._close = threading.Event()
        self._closed = threading.Event()
        self._thread = host.thread(self._run, name=f"load-{name}")

    def _done(self, payload: bytes, res: pulsar.Result, _msg_id: object) -> None:
        with self._lock:
            if res == pulsar.Result.Ok:
                self.acked.append(payload)
                self.ack_times.append(time.monotonic())
            else:
                self.failed.append((payload, str(res)))

    def _run(self) -> None:
        client = pulsar.Client(self.url, operation_timeout_seconds=30,
                               connection_timeout_ms=3000, logger=QUIET)
        try:
            producer = None
            while producer is None and not self._stop.is_set():
                try:
                    # no send timeout: a send waits for a broker, and the client sends it
                    # again with the same sequence id (deduplicated) after reconnecting
                    producer = client.create_producer(
                        self.topic, producer_name=self.name, send_timeout_millis=0,
                        block_if_queue_full=True, batching_enabled=False)
                except Exception as e:  # the cluster is faulted: try again
                    self.errors.append(str(e))
            for i in itertools.count():
                if producer is None or self._stop.is_set():
                    break
                payload = f"{self.name}-{i}".encode()
                with self._lock:
                    self.sent.append(payload)
                producer.send_async(payload, lambda res, mid, p=payload: self._done(p, res, mid))
                self._stop.wait(self.interval)
            self._close.wait(120)
        finally:
            client.close()
            self._closed.set()

    def acks_after(self, t: float) -> int:
        with self._lock:
            return sum(1 for a in self.ack_times if a > t)

    def wait_acks(self, n: int, after: float, timeout: float,
                  give_up: Callable[[], bool] = lambda: False) -> bool:
        """Whether ``n`` sends were acknowledged after ``after`` within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while self.acks_after(after) < n:
            if time.monotonic() > deadline or give_up():
                return False
            time.sleep(0.1)
        return True

    def stop(self, timeout: float = 60.0) -> list[bytes]:
        """Stop sending, wait (bounded) for every send to be answered, close the client
        (waiting for that no longer than ``timeout`` either); the sends unanswered."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.acked) + len(self.failed) >= len(self.sent):
                    break
            time.sleep(0.1)
        with self._lock:
            answered = set(self.acked) | {p for p, _ in self.failed}
            pending = [p for p in self.sent if p not in answered]
        self._close.set()
        self._closed.wait(timeout)
        return pending

    def abandon(self) -> None:
        """Stop sending and close the client without waiting (a test that failed)."""
        self._stop.set()
        self._close.set()

    def longest_gap(self) -> tuple[float, float]:
        """(longest time between two acknowledgements, when it began relative to start)."""
        times = sorted(self.ack_times)
        if len(times) < 2:
            return 0.0, 0.0
        gap, at = max((b - a, a) for a, b in itertools.pairwise(times))
        return gap, at - self.started

    def first_ack_wait(self) -> float | None:
        return min(self.ack_times) - self.started if self.ack_times else None


def read_all(url: str, topic: str) -> list[bytes]:
    """Every payload stored in ``topic``, from the first (a reader: no redeliveries)."""
    client = pulsar.Client(url, operation_timeout_seconds=30, logger=QUIET)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        out = []
        while reader.has_message_available():
            out.append(reader.read_next(30_000).data())
        return out
    finally:
        client.close()


def owner_url(web_url: str, topic: str) -> str:
    """The binary URL of ``topic``'s owner (an HTTP lookup, redirects followed)."""
    with urllib.request.urlopen(f"{web_url}/lookup/v2/topic/{topic.replace('://', '/')}",
                                timeout=30) as resp:
        return str(json.loads(resp.read())["brokerUrl"])


@dataclass
class Bed:
    """The scenario's cluster on the bed: ZooKeeper, two brokers, the shared directory."""

    net: NetBed
    zk: NsZooKeeper
    brokers: list[NsBroker]
    shared: SharedDir
    client: Host
    notes: dict[str, object]  # what a fault tells the report

    @property
    def service_url(self) -> str:
        return "pulsar://" + ",".join(f"{b.host.address}:{b.port}" for b in self.brokers)


@contextlib.contextmanager
def cluster_on(net: NetBed, root: Path, name: str) -> Iterator[Bed]:
    """Two brokers on ``b1`` and ``b2`` (ZooKeeper chroot ``/name``, deduplication on, a
    4 s session) over a fresh shared directory; everything undone afterwards (processes
    thawed and stopped, links up, firewall rules flushed, the directory unmounted)."""
    zk = net.zookeeper
    assert zk is not None
    # retention without limit: the read-back is by a reader (no subscription holds the
    # data), and a slow run's housekeeping (every 60 s) would trim what a fault sealed
    extra = {"magnetarSharedStorage": "true", "brokerDeduplicationEnabled": "true",
             "metadataStoreSessionTimeoutMillis": str(int(SESSION_S * 1000)),
             "defaultRetentionTimeInMinutes": "-1", "defaultRetentionSizeInMB": "-1"}
    with SharedDir(root / "shared") as shared:
        brokers = [NsBroker(net, net.hosts[h], root / h, zk.url(f"/{name}"), extra, shared.path)
                   for h in ("b1", "b2")]
        try:
            for b in brokers:
                b.start()
            yield Bed(net, zk, brokers, shared, net.hosts["client"], {})
        except BaseException:
            for b in brokers:  # into the failed test's report
                lines = b.log_path.read_text(errors="replace").splitlines()
                print(f"--- {b.host.name} ({b.pid if b.proc else '-'}): the last of {b.log_path}")
                print("\n".join(lines[-40:]))
            raise
        finally:
            zk.thaw()
            zk.host.link_up()
            for b in brokers:
                b.host.heal()
                b.stop(timeout=15)


Fault = Callable[[Bed, NsBroker], Callable[[], None]]  # inject; returns the heal


def scenario(net: NetBed, root: Path, name: str, fault: Fault,
             record_property: Callable[[str, object], None],
             all_serve_again: bool = False, late_after: float = SESSION_S + 1.5,
             duration: float = FAULT_S) -> None:
    """Run one fault under load and check it (see the module's docstring): the fault lasts
    ``duration`` s, the late client comes ``late_after`` s into it."""
    topic = f"persistent://public/default/netbed-{name}"
    with cluster_on(net, root, name) as bed:
        main = Load(bed.client, bed.service_url, topic, "main")
        loads = [main]
        try:
            assert main.wait_acks(100, 0, 60), f"no load before the fault: {main.errors[-3:]}"
            url = bed.client.call(owner_url, bed.brokers[0].web_url, topic)
            owner, other = sorted(bed.brokers, key=lambda b: b.url != url)
            assert owner.url == url, (url, [b.url for b in bed.brokers])
            pids = {b.pid for b in bed.brokers}

            faulted = time.monotonic()
            heal = fault(bed, owner)
            time.sleep(late_after)
            # a client arriving during the fault, at the broker that was not faulted
            late = Load(bed.client, other.url, topic, "late")
            loads.append(late)
            time.sleep(max(0.0, faulted + duration - time.monotonic()))
            heal()
            healed = time.monotonic()

            def all_exited() -> bool:
                return all(b.proc is None or b.proc.poll() is not None for b in bed.brokers)

            resumed = main.wait_acks(20, healed, RESUME_S, all_exited)
            late_served = late.wait_acks(20, late.started, RESUME_S, all_exited)
            alive = [b.host.name for b in bed.brokers if b.proc and b.proc.poll() is None]
            serving = [b.host.name for b in bed.brokers if b.host.name in alive
                       and bed.client.call(_answers_lookup, b, topic)]
            bound = 1.0 if all_exited() else 60.0  # no broker left: nothing will answer
            main_pending, late_pending = main.stop(bound), late.stop(bound)
            bed.shared.settle()
            violations = fenced_writes(bed.shared.events, pids)

            names = {b.pid: b.host.name for b in bed.brokers}
            taken = Counter(names.get(pid, "?") for pid, _, at in fences(bed.shared.events)
                            if at > faulted)
            gap, gap_at = main.longest_gap()
            first = late.first_ack_wait()
            report = {
                "scenario": name, "owner": owner.host.name,
                "acked": len(main.acked) + len(late.acked),
                "failed": len(main.failed) + len(late.failed),
                "longest_wait_s": round(gap, 2),
                "longest_wait_began_after_fault_s": round(main.started + gap_at - faulted, 2),
                "late_client_first_ack_s": None if first is None else round(first, 2),
                "resumed_after_heal": resumed, "brokers_alive_after": alive,
                "brokers_serving_after": serving, "fences_after_fault": dict(taken),
                "fenced_writes": len(violations), **bed.notes,
            }
            print(f"netbed {name}: {json.dumps(report)}")
            for key, value in report.items():
                record_property(key, value)

            if not (resumed and late_served) or (all_serve_again and serving != ["b1", "b2"]):
                raise NotServingAgain(f"the cluster did not serve again within {RESUME_S} s of "
                                      f"the heal: {report}")
            assert not main_pending and not late_pending, (
                f"sends never answered: {len(main_pending)} + {len(late_pending)}")
            shown = "\n".join(sorted({str(v) for v in violations})[:10])
            try:
                check_stored(bed, topic, [main, late])
            except Exception as err:
                if violations:  # files of the ledger changed under the reader: item 4's harm
                    raise FencedWrite(f"the data checks failed ({type(err).__name__}: {err}) "
                                      f"after {len(violations)} changes by a fenced broker:\n"
                                      + shown) from err
                raise
            if violations:  # last: the data checks above run (and must pass) whatever this says
                raise FencedWrite(f"{len(violations)} changes by a fenced broker:\n" + shown)
        finally:
            for load in loads:
                load.abandon()


def check_stored(bed: Bed, topic: str, loads: list[Load]) -> None:
    """Everything acknowledged is stored, nothing twice, nothing that was never sent."""
    stored = bed.client.call(read_all, bed.service_url, topic)
    twice = [p for p, n in Counter(stored).items() if n > 1]
    assert not twice, f"stored twice: {twice[:10]} ({len(twice)})"
    acked = {p for load in loads for p in load.acked}
    lost = acked - set(stored)
    assert not lost, f"acknowledged but not stored: {sorted(lost)[:10]} ({len(lost)})"
    assert set(stored) <= {p for load in loads for p in load.sent}


def _answers_lookup(broker: NsBroker, topic: str) -> bool:
    try:
        owner_url(broker.web_url, topic)
        return True
    except OSError:
        return False


def unload(bed: Bed, owner: NsBroker) -> Callable[[], None]:
    """No fault: the namespace's bundles unloaded (the control: a move by the book)."""
    def put() -> None:
        req = urllib.request.Request(f"{owner.web_url}/admin/v2/namespaces/public/default/unload",
                                     method="PUT", data=b"")
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status in (200, 204), resp.status

    bed.client.call(put)
    return lambda: None


def cut_from_zookeeper(bed: Bed, owner: NsBroker) -> Callable[[], None]:
    owner.host.cut_from(bed.zk.host)
    return owner.host.heal


def link_down(bed: Bed, owner: NsBroker) -> Callable[[], None]:
    owner.host.link_down()
    return owner.host.link_up


def freeze_zookeeper(bed: Bed, owner: NsBroker) -> Callable[[], None]:
    """Past the session timeout. On the resume ZooKeeper expires the sessions whose time
    ran out, unless a client's reconnection reaches it first (a race: in 1 of 3 runs no
    session expired): the clients are kept away until the sessions have expired."""
    sessions = bed.zk.sessions()
    bed.zk.freeze()

    def heal() -> None:
        bed.zk.host.link_down()
        bed.zk.thaw()
        bed.notes["sessions_expired_on_resume"] = bed.zk.wait_expired(sessions, 15)
        bed.zk.host.link_up()

    return heal


def freeze_owner(bed: Bed, owner: NsBroker) -> Callable[[], None]:
    owner.freeze()
    return owner.thaw


def test_control_unload(netbed: NetBed, tmp_path: Path,
                        record_property: Callable[[str, object], None]) -> None:
    """The bed's checks on a move without a fault: they pass (no false alarm)."""
    scenario(netbed, tmp_path, "unload", unload, record_property, late_after=0.5, duration=1.0)


def test_owner_cut_from_zookeeper(netbed: NetBed, tmp_path: Path,
                                  record_property: Callable[[str, object], None]) -> None:
    scenario(netbed, tmp_path, "cut", cut_from_zookeeper, record_property)


def test_owner_link_down(netbed: NetBed, tmp_path: Path,
                         record_property: Callable[[str, object], None]) -> None:
    scenario(netbed, tmp_path, "linkdown", link_down, record_property)


def test_zookeeper_frozen_past_the_session(netbed: NetBed, tmp_path: Path,
                                           record_property: Callable[[str, object], None]
                                           ) -> None:
    scenario(netbed, tmp_path, "zkfrozen", freeze_zookeeper, record_property,
             all_serve_again=True)


def test_owner_frozen_past_the_session(netbed: NetBed, tmp_path: Path,
                                       record_property: Callable[[str, object], None]) -> None:
    scenario(netbed, tmp_path, "ownerfrozen", freeze_owner, record_property)


def _event(at: float, pid: int, path: str, ino: int, modified: bool = True) -> Event:
    return Event(at, pid, modified, path, ino, 0)


def test_the_file_rule_counts_only_changes_after_another_brokers_fence() -> None:
    """`fenced_writes` on events made up by hand (no root needed)."""
    a, b = 100, 200
    events = [
        _event(1, a, "/d/ledgers/L/.fence.1", 1), _event(2, a, "/d/ledgers/L/0.seg", 2),
        _event(3, a, "/d/ledgers/L/fence.lock", 3, modified=False),
        _event(4, b, "/d/ledgers/L/fence.lock", 3, modified=False),
        _event(5, b, "/d/ledgers/L/fence", 4),  # b fences L
        _event(6, a, "/d/ledgers/L/0.seg", 2, modified=False),  # a closes: no change
        _event(7, a, "/d/ledgers/L/fence.lock", 3, modified=False),  # a takes the lock
        _event(8, a, "/d/ledgers/L/0.seg", 2),  # a writes: counted
        _event(9, a, "/d/ledgers/L/cursors.1/c.json", 5, modified=False),  # a creates: counted
        _event(10, a, "/d/ledgers/M/0.seg", 6),  # another ledger, not fenced by b
        _event(11, 999, "/d/ledgers/L/x", 7),  # not a broker
        _event(12, b, "/d/ledgers/L/1.seg", 8),  # the fencer itself
        _event(13, a, "/d/ledgers/L/.fence.2", 9),  # a fences again (a newer epoch)
        _event(14, a, "/d/ledgers/L/2.seg", 10),  # then its writes are its own
    ]
    found = fenced_writes(events, {a, b})
    assert [(v.pid, v.fencer, v.path, v.what, v.after) for v in found] == [
        (a, b, "/d/ledgers/L/0.seg", "changed", 3),
        (a, b, "/d/ledgers/L/cursors.1/c.json", "created", 4)]
    assert [(pid, d) for pid, d, _ in fences(events)] == [
        (a, "/d/ledgers/L"), (b, "/d/ledgers/L"), (a, "/d/ledgers/L")]


def test_the_shared_directory_names_who_wrote(tmp_path: Path) -> None:
    """`SharedDir` attributes a write, a truncation and an empty file to the process
    that made them."""
    if netbed_missing_reason(needs_iptables=False):
        pytest.skip(str(netbed_missing_reason(needs_iptables=False)))
    with SharedDir(tmp_path / "shared", size_mb=8) as shared:
        mine = shared.path / "mine"
        mine.write_bytes(b"x")
        os.truncate(mine, 0)
        child = subprocess.run(["sh", "-c", f": > {shared.path / 'theirs'}; echo $$"],
                               capture_output=True, text=True, check=True)
        shared.settle(quiet=0.3)
        seen = {(e.pid, os.path.basename(e.path)) for e in shared.events}
    assert (os.getpid(), "mine") in seen
    assert (int(child.stdout), "theirs") in seen
    assert not os.path.ismount(tmp_path / "shared")
