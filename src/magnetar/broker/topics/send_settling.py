"""The moment a connection's Sends read so far are all answered (`after_sends_settle`).

Magnetar's client writes a transaction's EndTxn (commit) right behind its last sends
instead of waiting for their receipts; the broker then commits only once every Send read
before that EndTxn on the connection has its outcome: stored and answered, refused, or
dropped (its producer closing). A producer settles its sends in the order it read them
(a transactional one waiting for its check holds the later ones in ``Producer.deferred``;
one topic's appends complete in order), so the point is, per producer, a count:
``Producer.settled`` reaching what it was plus what it held unanswered when the EndTxn
was read (``in_flight`` and the deferred sends).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from magnetar.broker.topics.producer import Producer


class SendsSettled:
    """One wait: ``then`` is called soon (a later callback of the loop, not inside the
    storage's completion that settled the last send) once ``left`` producers settled;
    ``flush_after`` (the connection's `flush_soon`) right after it is scheduled, so that
    the receipts the completion queued leave in one write with what ``then`` answers."""

    __slots__ = ("flush_after", "left", "loop", "then")

    def __init__(self, then: Callable[[], None],
                 flush_after: Callable[[], None] | None = None,
                 loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.left = 0
        self.then = then
        self.flush_after = flush_after
        # (asked once here if not given: asking the running loop costs a getpid)
        self.loop = loop if loop is not None else asyncio.get_running_loop()

    def one_done(self) -> None:
        self.left -= 1
        if not self.left:
            self.loop.call_soon(self.then)
            if self.flush_after is not None:
                self.flush_after()


def unanswered(producer: Producer) -> int:
    """The sends ``producer`` read and has not settled yet."""
    deferred = producer.deferred
    return producer.in_flight + (len(deferred) if deferred is not None else 0)


def after_sends_settle(producers: Iterable[Producer], then: Callable[[], None],
                       flush_after: Callable[[], None] | None = None,
                       loop: asyncio.AbstractEventLoop | None = None) -> bool:
    """Arrange for ``then`` to be called once each of ``producers`` settled every send it
    holds unanswered now (and ``flush_after`` right after it is scheduled: see
    `SendsSettled`), on ``loop`` (the running one if not given). False when none holds
    one: ``then`` is not called (the caller goes on at once)."""
    wait: SendsSettled | None = None
    for producer in producers:
        held = unanswered(producer)
        if not held:
            continue
        if wait is None:
            wait = SendsSettled(then, flush_after, loop)
        wait.left += 1
        producer.watch_settled(producer.settled + held, wait)
    return wait is not None


__all__ = ["SendsSettled", "after_sends_settle", "unanswered"]
