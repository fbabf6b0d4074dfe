"""A producer closes after its last receipt: when a topic is unloaded (or the client closes
its producer) while sends are still being stored, every SendReceipt for an accepted send
goes out BEFORE the CloseProducer (or the close's Success), and none names a producer id
the connection no longer has (the official client logged "invalid producer Id in
SendReceipt" during a bundle unload under load). Sends that arrive while the producer
closes, or after the broker closed it, are ignored without closing the connection: the
client sends them again where it reconnects.

The appends are held in flight deterministically: the flusher thread's fdatasync of the
broker's segments waits for an event (syncs on the event loop are turned off), so the
unload starts while the sends wait for their sync."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from magnetar.broker.service import BrokerService
from magnetar.protocol import pb
from magnetar.storage import segment as segment_module

from .conftest import ThreadedBroker
from .rawclient import RawClient

T = pb.BaseCommand
TOPIC = "persistent://public/default/closes-after-receipts"
SENDS = 5


class StalledSyncs:
    """fdatasync of files under ``prefix`` waits (at most 30 s) for ``release`` while
    ``armed``; ``entered`` is set once one waits."""

    def __init__(self) -> None:
        self.prefix = ""
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()


@pytest.fixture
def stalled_syncs(monkeypatch: pytest.MonkeyPatch) -> Iterator[StalledSyncs]:
    stall = StalledSyncs()
    real = os.fdatasync

    def fdatasync(fd: int) -> None:
        if stall.armed and os.readlink(f"/proc/self/fd/{fd}").startswith(stall.prefix):
            stall.entered.set()
            stall.release.wait(30)
        real(fd)

    monkeypatch.setattr(segment_module.os, "fdatasync", fdatasync)
    yield stall
    stall.release.set()


def _setup(make_broker: Callable[..., ThreadedBroker], stall: StalledSyncs
           ) -> tuple[ThreadedBroker, BrokerService, RawClient]:
    """A broker syncing on its flusher thread only, a raw client with producer 1 on TOPIC,
    ``SENDS`` sends of it stored but waiting for their (stalled) sync."""
    broker = make_broker(magnetarSyncOnLoopWhenIdle=False)
    service = broker.service
    assert service is not None
    stall.prefix = service.config.magnetarDataDir
    raw = RawClient.for_url(broker.url, timeout=10)
    raw.connect()
    assert raw.create_producer(TOPIC, producer_id=1).type == T.PRODUCER_SUCCESS
    stall.armed = True
    for seq in range(SENDS):
        raw.send_message(1, seq, b"m-%d" % seq)
    raw.send("PING")  # answered in order: once it is, the broker has taken every send
    assert raw.read_reply().type == T.PONG
    assert stall.entered.wait(10), "no sync of the sends began"
    return broker, service, raw


def _frames_until(raw: RawClient, last: int, got: list[pb.BaseCommand] | None = None
                  ) -> list[pb.BaseCommand]:
    """``got`` and the commands the broker sends next (Pings answered), until one of type
    ``last`` and ``SENDS`` receipts (for PONG: one PONG) are among them."""
    got = [] if got is None else got
    receipts = 0 if last == T.PONG else SENDS

    def seen() -> bool:
        return (any(f.type == last for f in got)
                and sum(f.type == T.SEND_RECEIPT for f in got) >= receipts)

    while not seen():
        got.append(raw.read_reply())
    return got


def _answers_after_release(raw: RawClient, stall: StalledSyncs, last: int
                           ) -> tuple[list[Any], pb.BaseCommand]:
    """Let the broker take what was sent (a Ping answered), release the syncs, and read up
    to the answer of type ``last``: the answers in order as (type, receipt's sequence id),
    Pongs left out, and that last command."""
    raw.send("PING")
    before_release = _frames_until(raw, T.PONG)
    stall.release.set()
    frames = _frames_until(raw, last, before_release)
    names = [(T.Type.Name(f.type), f.send_receipt.sequence_id if f.type == T.SEND_RECEIPT
              else None) for f in frames if f.type != T.PONG]
    return names, frames[-1]


def _receipts_then(last: str) -> list[Any]:
    return [("SEND_RECEIPT", seq) for seq in range(SENDS)] + [(last, None)]


def test_unload_sends_every_receipt_before_close_producer(
        make_broker: Callable[..., ThreadedBroker], stalled_syncs: StalledSyncs) -> None:
    broker, service, raw = _setup(make_broker, stalled_syncs)
    with raw:
        def unload() -> None:  # the close goes on off the loop (the sync is stalled)
            service.unload_topic(service.topics[TOPIC])

        broker.call(unload)
        names, _ = _answers_after_release(raw, stalled_syncs, T.CLOSE_PRODUCER)
        assert names == _receipts_then("CLOSE_PRODUCER")
        # a Send written before the client read the CloseProducer: ignored, connection kept
        raw.send_message(1, SENDS, b"late")
        assert raw.is_alive(5)
        # the producer comes back on the same connection with the same id and is served
        assert raw.create_producer(TOPIC, producer_id=1).type == T.PRODUCER_SUCCESS
        raw.send_message(1, SENDS, b"late")
        receipt = raw.expect(T.SEND_RECEIPT).send_receipt
        assert (receipt.producer_id, receipt.sequence_id) == (1, SENDS)


def test_sends_reaching_a_closing_producer_are_dropped(
        make_broker: Callable[..., ThreadedBroker], stalled_syncs: StalledSyncs) -> None:
    """While its last sends are stored, the closing producer's new sends get no answer
    (the client sends them again where it reconnects) and the connection stays."""
    broker, service, raw = _setup(make_broker, stalled_syncs)
    with raw:
        broker.call(lambda: service.unload_topic(service.topics[TOPIC]) and None)
        raw.send_message(1, SENDS, b"late")
        names, _ = _answers_after_release(raw, stalled_syncs, T.CLOSE_PRODUCER)
        assert names == _receipts_then("CLOSE_PRODUCER")
        assert raw.is_alive(5)


def test_client_close_is_answered_after_the_last_receipt(
        make_broker: Callable[..., ThreadedBroker], stalled_syncs: StalledSyncs) -> None:
    _, _, raw = _setup(make_broker, stalled_syncs)
    with raw:
        raw.send("CLOSE_PRODUCER", producer_id=1, request_id=77)
        names, success = _answers_after_release(raw, stalled_syncs, T.SUCCESS)
        assert names == _receipts_then("SUCCESS")
        assert success.success.request_id == 77
