"""Model-based test: random walks of the official client against a plain model of one subscription.

Each walk drives ``pulsar-client`` (one producer sending unbatched, one sending batches, one
consumer at a time) through a seeded random sequence of sends, receives, individual,
cumulative and batch-index acks, negative acks, redelivery requests, seeks, consumer close
and reopen, clean broker restarts and kill -9, on a broker that rolls its ledger every 2 or 3
entries. The model knows every message produced (payloads are unique), where it was stored
(the send receipts), and what the BROKER has been told about it:

* ``U``: certainly unacknowledged on the broker: it must come back when a consumer drains;
* ``A``: certainly acknowledged (the ack was flushed by a consumer close, or a seek moved
  past it): it must never be received again;
* ``M``: either (an ack the client still holds, an ack the client may drop, a state a kill -9
  may have reverted to): anything goes.

What the broker is told follows the official client's rules, not the application's: with
batch-index acks off an individual ack inside a batch reaches the broker only once every
message of that delivery is acknowledged, and a cumulative ack inside a batch is sent as "the
entry before this one" (defect 1 of issue 7 read that as the whole topic). Acks sit in the
client's grouping tracker (100 ms) until flushed, so they count only after a consumer close;
a broker restart may drop them (``M``). A kill -9 may revert any acknowledgement since the
last clean stop to any state the message had meanwhile, so such messages become ``M``.

Checks: a received payload was produced and carries its receipt's message id; an ``A``
message never comes back; and after the walk (consumer closed, clean restart) a fresh
consumer gets every ``U`` message.

A failure names the walk (seed and configuration) and lists its steps. The fixed walks below
run in CI (about 35 s together); ``MAGNETAR_MODEL_SEED=<seed>`` adds one walk whose
configuration is drawn from the seed (``MAGNETAR_MODEL_STEPS``, default 60), and
``MAGNETAR_MODEL_WALKS=<n>`` adds n walks of 80 steps from seed ``MAGNETAR_MODEL_FIRST_SEED``
(default 1000; marked slow, skipped unless set).
"""

from __future__ import annotations

import os
import random
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
import pytest

from .brokerproc import SILENT, BrokerProcess, wait_until

U, A, M = "U", "A", "M"
Pos = tuple[int, int]


@dataclass
class Msg:
    payload: bytes
    mid: pulsar.MessageId
    pos: Pos
    index: int  # batch index, -1 when sent unbatched
    size: int = 1  # messages in its entry
    state: str = U
    seen: set[str] = field(default_factory=lambda: {U})  # states since the last clean stop

    def set(self, state: str) -> None:
        self.state = state
        self.seen.add(state)


@dataclass(frozen=True)
class WalkConfig:
    seed: int
    sub_type: pulsar.ConsumerType
    batch_index_ack: bool
    entries_per_ledger: int
    kills: bool
    steps: int = 60

    def __str__(self) -> str:
        return (f"seed={self.seed} {self.sub_type.name} batch_index_ack={self.batch_index_ack} "
                f"entries_per_ledger={self.entries_per_ledger} kills={self.kills} steps={self.steps}")


class WalkFailure(AssertionError):
    pass


class Session:
    """One consumer instance and what the model knows of its client-side state."""

    def __init__(self, consumer: pulsar.Consumer) -> None:
        self.consumer = consumer
        self.held: list[tuple[Msg, pulsar.Message]] = []  # received in this epoch, not acked
        self.stale: list[tuple[Msg, pulsar.Message]] = []  # received before, not acked
        self.pending: list[tuple[list[Msg], bool]] = []  # acks the client may still hold
        self.max_sent: tuple[int, int, int] | None = None  # the tracker's cumulative id
        self.prev_sent: set[Pos] = set()
        self.ever_acked: dict[Pos, set[int]] = {}  # batch indexes acked, any delivery
        self.new_epoch()

    def new_epoch(self) -> None:
        """After anything that makes the client drop what it holds (seek, redeliver,
        reconnect): per-entry receive counts and batch acks start again; what it held is
        still acknowledgeable (an older delivery)."""
        self.stale = (self.stale + self.held)[-50:]
        self.held = []
        self.received: dict[Pos, Counter[int]] = {}
        self.acked: dict[Pos, set[int]] = {}


class Walk:
    def __init__(self, cfg: WalkConfig, root: Path) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.broker = BrokerProcess(root, {
            "managedLedgerMaxEntriesPerLedger": str(cfg.entries_per_ledger),
            "magnetarTopicUnloadIdleSeconds": "0",
            "magnetarIdleTopicSweepIntervalSeconds": "0",
        })
        self.topic = f"persistent://public/default/model-{cfg.seed}"
        self.log: list[str] = []
        self.produced: dict[bytes, Msg] = {}
        self.entries: dict[Pos, list[Msg]] = {}
        self.counter = 0
        self.restarts = 0
        self.kills = 0

    # -- reporting ------------------------------------------------------------------------

    def fail(self, what: str) -> None:
        steps = "\n".join(f"  {i:3d} {s}" for i, s in enumerate(self.log))
        raise WalkFailure(f"model walk {self.cfg}: {what}\nsteps:\n{steps}")

    def step(self, text: str) -> None:
        self.log.append(text)

    # -- setup ----------------------------------------------------------------------------

    def open(self) -> None:
        self.broker.start()
        self.client = pulsar.Client(self.broker.url, operation_timeout_seconds=15, logger=SILENT)
        self.plain = self.client.create_producer(self.topic, batching_enabled=False)
        self.batched = self.client.create_producer(
            self.topic, batching_enabled=True, batching_max_messages=5,
            batching_max_publish_delay_ms=60_000,
        )
        self.session = self.subscribe()

    def subscribe(self) -> Session:
        consumer = self.client.subscribe(
            self.topic, "model", consumer_type=self.cfg.sub_type,
            initial_position=pulsar.InitialPosition.Earliest,
            batch_index_ack_enabled=self.cfg.batch_index_ack,
            negative_ack_redelivery_delay_ms=100,
        )
        return Session(consumer)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.broker.stop()

    # -- model helpers --------------------------------------------------------------------

    def msgs_through(self, pos: Pos, inclusive: bool) -> list[Msg]:
        return [m for m in self.produced.values() if (m.pos <= pos if inclusive else m.pos < pos)]

    def note_ack(self, session: Session, msgs: list[Msg], certain: bool) -> None:
        """The client was asked to tell the broker these are acknowledged."""
        for m in msgs:
            if m.state != A:
                m.set(M)
        session.pending.append((msgs, certain))

    def resent_ack_set(self, session: Session, m: Msg, now: set[int]) -> None:
        """A batch-index ack carries its acker's whole bit set: indexes acknowledged
        earlier through the same delivery (perhaps before a seek reset them) are sent
        again. Which delivery each earlier ack went through is not tracked: any index
        this consumer acknowledged before may be acknowledged again."""
        acked = session.ever_acked.setdefault(m.pos, set())
        for e in self.entries[m.pos]:
            if e.index in acked and e.index not in now and e.state == U:
                e.set(M)
        acked.update(now)

    def drop_pending(self, session: Session) -> None:
        """Acks the client held when its connection went away may or may not arrive."""
        session.pending = []

    def flushed(self, session: Session) -> None:
        for msgs, certain in session.pending:
            if certain:
                for m in msgs:
                    m.set(A)
        session.pending = []

    def on_receive(self, msg: pulsar.Message, where: str) -> Msg:
        payload = msg.data()
        m = self.produced.get(payload)
        if m is None:
            self.fail(f"{where}: received {payload!r}, which was never produced")
        mid = msg.message_id()
        got = ((mid.ledger_id(), mid.entry_id()), mid.batch_index())
        if got != (m.pos, m.index):
            self.fail(f"{where}: {payload!r} arrived as {got}, stored at {(m.pos, m.index)}")
        if m.state == A:
            self.fail(f"{where}: {payload!r} at {m.pos}/{m.index} was acknowledged "
                      f"(and flushed) but came back")
        return m

    # -- actions --------------------------------------------------------------------------

    def next_payload(self) -> bytes:
        self.counter += 1
        return f"s{self.cfg.seed}-{self.counter}".encode()

    def send_plain(self) -> None:
        n = self.rng.randint(1, 3)
        sent = []
        for _ in range(n):
            payload = self.next_payload()
            self.record(payload, self.plain.send(payload))
            sent.append(f"{payload.decode()} at {self.produced[payload].pos}")
        self.step(f"send unbatched: {', '.join(sent)}")

    def send_batch(self) -> None:
        k = self.rng.randint(1, 5)
        done: dict[bytes, pulsar.MessageId] = {}
        errors: list[str] = []
        lock = threading.Lock()

        def callback(payload: bytes):
            def cb(res: pulsar.Result, mid: pulsar.MessageId) -> None:
                with lock:
                    if res == pulsar.Result.Ok:
                        done[payload] = mid
                    else:
                        errors.append(f"{payload!r}: {res}")
            return cb

        payloads = [self.next_payload() for _ in range(k)]
        for p in payloads:
            self.batched.send_async(p, callback(p))
        self.batched.flush()
        wait_until(lambda: len(done) + len(errors) == k, 30, "batch receipts")
        if errors:
            self.fail(f"batched send failed: {errors}")
        for p in payloads:
            self.record(p, done[p])
        first = self.produced[payloads[0]]
        self.step(f"send batch of {k}: {first.payload.decode()}.. at {first.pos}")

    def record(self, payload: bytes, mid: pulsar.MessageId) -> None:
        pos = (mid.ledger_id(), mid.entry_id())
        m = Msg(payload, mid, pos, mid.batch_index())
        self.produced[payload] = m
        entry = self.entries.setdefault(pos, [])
        entry.append(m)
        for e in entry:
            e.size = len(entry)

    def receive(self) -> None:
        s = self.session
        want = self.rng.randint(1, 6)
        got = []
        for _ in range(want):
            try:
                msg = s.consumer.receive(timeout_millis=150)
            except pulsar.Timeout:
                break
            m = self.on_receive(msg, f"step {len(self.log)} receive")
            s.received.setdefault(m.pos, Counter())[m.index] += 1
            s.held.append((m, msg))
            got.append(m.payload.decode())
        self.step(f"receive {want}: {got}")

    def pick_held(self) -> tuple[Msg, pulsar.Message] | None:
        s = self.session
        if not s.held:
            return None
        return s.held.pop(self.rng.randrange(len(s.held)))

    def ack_stale(self) -> None:
        """Acknowledge a message from an earlier delivery (before a reconnect, seek or
        redelivery): its acker is an old one."""
        s = self.session
        if not s.stale:
            return
        m, msg = s.stale.pop(self.rng.randrange(len(s.stale)))
        s.consumer.acknowledge(msg)
        self.step(f"ack earlier delivery {m.payload.decode()} {m.pos}/{m.index} of {m.size}")
        if m.index < 0 or self.cfg.batch_index_ack:
            if m.index >= 0:
                self.resent_ack_set(s, m, {m.index})
            self.note_ack(s, [m], True)
        else:
            # completes an old acker, or not: the whole entry may or may not be acknowledged
            self.note_ack(s, self.entries[m.pos], False)

    def ack(self) -> None:
        s = self.session
        picked = self.pick_held()
        if picked is None:
            return
        m, msg = picked
        s.consumer.acknowledge(msg)
        self.step(f"ack {m.payload.decode()} {m.pos}/{m.index} of {m.size}")
        if m.index >= 0 and self.cfg.batch_index_ack:
            self.resent_ack_set(s, m, {m.index})
        if m.index < 0 or self.cfg.batch_index_ack:
            # unbatched, or the index is sent with its ack set (a full set: the whole entry)
            self.note_ack(s, [m], True)
            return
        acked = s.acked.setdefault(m.pos, set())
        acked.add(m.index)
        if len(acked) == m.size:
            # the entry is acknowledged when one delivery's acker is complete: certain only if
            # every index came exactly once in this epoch (one delivery)
            counts = s.received.get(m.pos, Counter())
            certain = all(counts[i] == 1 for i in range(m.size))
            self.note_ack(s, self.entries[m.pos], certain)

    def ack_cumulative(self) -> None:
        s = self.session
        picked = self.pick_held()
        if picked is None:
            return
        m, msg = picked
        s.consumer.acknowledge_cumulative(msg)
        self.step(f"ack_cumulative {m.payload.decode()} {m.pos}/{m.index} of {m.size}")
        key = (m.pos, max(m.index, 0))
        s.held = [(h, hm) for (h, hm) in s.held if (h.pos, max(h.index, 0)) > key]
        for i in range(max(m.index, 0) + 1):
            s.acked.setdefault(m.pos, set()).add(i)
        if m.index >= 0 and self.cfg.batch_index_ack:
            self.resent_ack_set(s, m, set(range(m.index + 1)))
        whole_entry = m.index < 0 or m.index == m.size - 1
        if not whole_entry and len(s.acked[m.pos]) == m.size:
            # the acker may be complete (earlier individual acks): the whole entry, maybe
            self.note_ack(s, self.msgs_through(m.pos, True), False)
            return
        if whole_entry:
            sent = (m.pos[0], m.pos[1], -1)
            covered = self.msgs_through(m.pos, True)
        elif self.cfg.batch_index_ack:
            sent = (m.pos[0], m.pos[1], m.index)
            covered = self.msgs_through(m.pos, False) + [
                e for e in self.entries[m.pos] if e.index <= m.index]
        else:
            # "the entry before this one", once per acker (entry id -1 at a ledger's start)
            covered = self.msgs_through(m.pos, False)
            if m.pos in s.prev_sent:
                self.note_ack(s, covered, False)
                return
            s.prev_sent.add(m.pos)
            sent = (m.pos[0], m.pos[1] - 1, -1)
        # the grouping tracker keeps only a cumulative id greater than the last one
        certain = s.max_sent is None or sent > s.max_sent
        if certain:
            s.max_sent = sent
        self.note_ack(s, covered, certain)

    def nack(self) -> None:
        picked = self.pick_held()
        if picked is None:
            return
        m, msg = picked
        self.session.consumer.negative_acknowledge(msg)
        self.step(f"nack {m.payload.decode()} {m.pos}/{m.index}")

    def redeliver(self) -> None:
        self.session.consumer.redeliver_unacknowledged_messages()
        self.session.new_epoch()
        self.step("redeliver_unacknowledged_messages")

    def seek(self) -> None:
        s = self.session
        if not self.produced or self.rng.random() < 0.25:
            mid, target, index = pulsar.MessageId.earliest, (-1, -1), -1
            self.step("seek earliest")
        else:
            m = self.rng.choice(list(self.produced.values()))
            mid, target, index = m.mid, m.pos, m.index
            self.step(f"seek {m.payload.decode()} {m.pos}/{m.index}")
        try:
            s.consumer.seek(mid)
        except pulsar.NotConnected:
            # the client refuses to seek while it reconnects: wait, and seek once more
            self.log[-1] += " (NotConnected: retried once reconnected)"
            wait_until(s.consumer.is_connected, 30, "consumer reconnection")
            s.consumer.seek(mid)
        pending = {id(p) for msgs, _ in s.pending for p in msgs}
        for p in self.produced.values():
            if p.pos < target:
                p.set(A)
            elif p.pos == target and p.index < index:
                p.set(M)  # before the sought index: the broker may or may not skip them
            elif id(p) in pending:
                p.set(M)  # a held ack may reach the broker after the reset
            else:
                p.set(U)
        s.pending = []
        s.new_epoch()

    def reopen(self) -> None:
        """Close (flushing the acks) and subscribe again; the new consumer must get every
        message the broker was not told is acknowledged."""
        self.session.consumer.close()
        self.flushed(self.session)
        self.session = self.subscribe()
        got = self.drain_check(self.session, f"step {len(self.log)} reopen")
        self.step(f"close consumer, subscribe again, drain: {len(got)} messages")

    def clean_restart(self) -> None:
        self.restart(kill=False)

    def kill_restart(self) -> None:
        self.kills += 1
        self.restart(kill=True)

    def restart(self, kill: bool) -> None:
        self.drop_pending(self.session)
        if kill:
            self.broker.kill9()
            for m in self.produced.values():
                # the cursor on disk may hold any state the message had since the last clean stop
                m.state = m.state if len(m.seen) == 1 else M
        else:
            self.broker.stop()
        for m in self.produced.values():
            m.seen = {m.state}
        self.broker.start()
        wait_until(lambda: self.session.consumer.is_connected() and self.plain.is_connected()
                   and self.batched.is_connected(), 30, "client reconnection")
        self.session.new_epoch()
        self.restarts += 1
        self.step("kill -9 broker, restart" if kill else "stop broker, restart")

    # -- the walk -------------------------------------------------------------------------

    def run(self) -> None:
        cumulative = self.cfg.sub_type != pulsar.ConsumerType.Shared
        actions = [
            (self.send_plain, 10), (self.send_batch, 10), (self.receive, 22), (self.ack, 14),
            (self.ack_cumulative, 12 if cumulative else 0), (self.nack, 3), (self.ack_stale, 3),
            (self.redeliver, 2), (self.seek, 3), (self.reopen, 5),
            (self.clean_restart, 2), (self.kill_restart, 3 if self.cfg.kills else 0),
        ]
        funcs = [f for f, w in actions if w]
        weights = [w for _, w in actions if w]
        # restarts cost about a second each: at most one clean one and two kills per walk,
        # and a walk with kills has at least one, somewhere in its middle third
        forced_kill = self.rng.randint(self.cfg.steps // 3, 2 * self.cfg.steps // 3)
        while len(self.log) < self.cfg.steps:
            if self.cfg.kills and not self.kills and len(self.log) >= forced_kill:
                self.kill_restart()
                continue
            action = self.rng.choices(funcs, weights)[0]
            if action == self.clean_restart and self.restarts - self.kills >= 1:
                continue
            if action == self.kill_restart and self.kills >= 2:
                continue
            action()
        self.final_check()

    def final_check(self) -> None:
        self.session.consumer.close()
        self.flushed(self.session)
        self.step("close consumer")
        self.restart_idle()
        session = self.subscribe()
        self.drain_check(session, "final drain")
        session.consumer.close()

    def drain_check(self, session: Session, where: str) -> list[bytes]:
        """Receive everything a fresh consumer gets (bounded); every ``U`` message must come."""
        must = {p for p, m in self.produced.items() if m.state == U}
        got: list[bytes] = []
        idle = 0.0
        while len(got) <= 3 * len(self.produced):
            done = must.issubset(got)
            try:
                msg = session.consumer.receive(timeout_millis=200 if done else 500)
            except pulsar.Timeout:
                if done:
                    break
                idle += 0.5
                if idle >= 5:
                    break
                continue
            idle = 0.0
            m = self.on_receive(msg, where)
            session.received.setdefault(m.pos, Counter())[m.index] += 1
            session.held.append((m, msg))
            got.append(m.payload)
        lost = must.difference(got)
        if lost:
            detail = [f"{p.decode()} at {self.produced[p].pos}/{self.produced[p].index}"
                      for p in sorted(lost, key=lambda p: int(p.split(b"-")[1]))]
            self.fail(f"{where}: {len(lost)} unacknowledged messages never came back: {detail}")
        return got

    def restart_idle(self) -> None:
        """A clean stop with no consumer: what the broker was told must survive it."""
        self.broker.stop()
        for m in self.produced.values():
            m.seen = {m.state}
        self.broker.start()
        wait_until(lambda: self.plain.is_connected() and self.batched.is_connected(), 30,
                   "producer reconnection")
        self.step("stop broker, restart")


def walk_configs() -> Iterator[WalkConfig]:
    """The walks CI runs (about 5 s each). On the code before issue 7's fixes, 12, 17 and 18
    lose messages through defect 1 (a cumulative ack inside a ledger's first batch), and 15
    and 20 see an acknowledged message come back after a seek."""
    Exc, Fail, Sh = pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover, pulsar.ConsumerType.Shared
    yield WalkConfig(12, Exc, False, 2, True)
    yield WalkConfig(17, Exc, False, 3, False)
    yield WalkConfig(18, Fail, False, 2, True)
    yield WalkConfig(20, Exc, True, 2, False)
    yield WalkConfig(14, Sh, False, 3, True)
    yield WalkConfig(15, Sh, True, 2, False)


def random_config(seed: int, steps: int = 60) -> WalkConfig:
    rng = random.Random(seed * 7919)
    kinds = [pulsar.ConsumerType.Exclusive, pulsar.ConsumerType.Failover, pulsar.ConsumerType.Shared]
    return WalkConfig(seed, rng.choice(kinds), rng.random() < 0.5, rng.choice([2, 3]),
                      rng.random() < 0.5, steps)


def run_walk(cfg: WalkConfig, root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    walk = Walk(cfg, root)
    try:
        walk.open()
        walk.run()
    except WalkFailure:
        raise
    except Exception as exc:  # an error from the client: report it with the walk
        walk.fail(f"{type(exc).__name__}: {exc}\nbroker log:\n{walk.broker.log()}")
    finally:
        walk.close()


@pytest.mark.parametrize("cfg", list(walk_configs()), ids=str)
def test_model_walk(cfg: WalkConfig, tmp_path: Path) -> None:
    run_walk(cfg, tmp_path)


@pytest.mark.skipif("MAGNETAR_MODEL_SEED" not in os.environ, reason="MAGNETAR_MODEL_SEED not set")
def test_model_walk_from_env(tmp_path: Path) -> None:
    seed = int(os.environ["MAGNETAR_MODEL_SEED"])
    run_walk(random_config(seed, int(os.environ.get("MAGNETAR_MODEL_STEPS", "60"))), tmp_path)


EXTRA_WALKS = int(os.environ.get("MAGNETAR_MODEL_WALKS", "0"))
FIRST_EXTRA_SEED = int(os.environ.get("MAGNETAR_MODEL_FIRST_SEED", "1000"))


@pytest.mark.slow
@pytest.mark.skipif(not EXTRA_WALKS, reason="MAGNETAR_MODEL_WALKS not set")
@pytest.mark.parametrize("seed", range(FIRST_EXTRA_SEED, FIRST_EXTRA_SEED + max(EXTRA_WALKS, 1)))
def test_model_more_walks(seed: int, tmp_path: Path) -> None:
    run_walk(random_config(seed, 80), tmp_path)
