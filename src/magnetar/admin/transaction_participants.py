"""Transactions, the participant side of ``/admin/v3/transactions`` (Pulsar's
``TransactionsBase``; the coordinator's paths are in ``transactions.py``): a topic's
transaction buffer stats, a subscription's pending-ack stats, and one transaction in
either. Topics are persistent (the path names none); a topic or subscription that never
saw a transaction answers its empty stats."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from itertools import chain, repeat
from operator import attrgetter, is_not, methodcaller
from typing import Any

from aiohttp import web

from magnetar.admin.routing import SERVICE, RestError, RouteTable, query_flag
from magnetar.admin.topics import persistent
from magnetar.broker.subscriptions.subscription import PersistentSubscription
from magnetar.broker.topics.topic import PersistentTopic
from magnetar.broker.topics.transaction_buffer import ends_settled

routes = RouteTable("transactions")

_NOT_NONE = partial(is_not, None)
_SUBSCRIPTIONS = attrgetter("subscriptions")
_VALUES = methodcaller("values")

V3 = "/admin/v3/transactions"
TOPIC = "/{tenant}/{namespace}/{topic}"
TXN = "/{mostSigBits:[0-9]+}/{leastSigBits:[0-9]+}"


async def _topic(request: web.Request) -> PersistentTopic:
    """The topic asked about, once the transactions ending on it are ended there (a
    commit's marker may linger: `ends_settled`), so that stats asked for after an EndTxn
    was answered show it ended."""
    m = request.match_info
    topic = await persistent(request.app[SERVICE],
                             f"persistent://{m['tenant']}/{m['namespace']}/{m['topic']}")
    await ends_settled(topic)
    return topic


def _subscription(topic: PersistentTopic, name: str) -> PersistentSubscription:
    sub = topic.subscriptions.get(name)
    if not isinstance(sub, PersistentSubscription):
        raise RestError(404, f"Subscription {name} not found on {topic.name}")
    return sub


def _txn(request: web.Request) -> tuple[int, int]:
    m = request.match_info
    return int(m["mostSigBits"]), int(m["leastSigBits"])


def buffer_stats(topic: PersistentTopic, low_water_marks: bool = False) -> dict[str, Any]:
    """A topic's ``TransactionBufferStats``."""
    buf = topic.txn_buffer
    if buf is not None:
        return buf.stats(low_water_marks)
    last = topic.ledger.last_confirmed()
    return {"state": "NoSnapshot", "maxReadPosition": str(last) if last is not None else None,
            "lastSnapshotTimestamps": 0, "ongoingTxnSize": 0, "recoverStartTime": 0,
            "recoverEndTime": 0, "committedTxnCount": 0, "abortedTxnCount": 0,
            "abortedIndexSize": 0}


@routes.route("GET", V3 + "/transactionBufferStats" + TOPIC,
              "A topic's transaction buffer: state, maxReadPosition, open transactions.")
async def transaction_buffer_stats(request: web.Request) -> web.Response:
    topic = await _topic(request)
    return web.json_response(buffer_stats(topic, query_flag(request, "lowWaterMarks")))


@routes.route("GET", V3 + "/pendingAckStats" + TOPIC + "/{subscription}",
              "A subscription's acknowledgements held in transactions.")
async def pending_ack_stats(request: web.Request) -> web.Response:
    sub = _subscription(await _topic(request), request.match_info["subscription"])
    acks = sub.pending_acks
    stats = acks.stats() if acks is not None else {
        "state": "None", "lowWaterMarks": {}, "ongoingTxnSize": 0,
        "committedTxnCount": 0, "abortedTxnCount": 0}
    if not query_flag(request, "lowWaterMarks"):
        stats.pop("lowWaterMarks", None)
    return web.json_response(stats)


@routes.route("GET", V3 + "/transactionInBufferStats" + TOPIC + TXN,
              "One transaction in a topic's buffer: its first position, whether aborted.")
async def transaction_in_buffer_stats(request: web.Request) -> web.Response:
    topic = await _topic(request)
    txn = _txn(request)
    buf = topic.txn_buffer
    start = None
    aborted = False
    if buf is not None:
        entry = buf.open.get(txn)
        start = str(entry.first) if entry is not None else None
        aborted = txn in buf.aborted
    return web.json_response({"startPosition": start, "aborted": aborted})


@routes.route("GET", V3 + "/transactionInPendingAckStats" + TOPIC + "/{subscription}" + TXN,
              "One transaction's acknowledgements held on a subscription.")
async def transaction_in_pending_ack_stats(request: web.Request) -> web.Response:
    sub = _subscription(await _topic(request), request.match_info["subscription"])
    acks = sub.pending_acks
    held = acks.txns.get(_txn(request)) if acks is not None else None
    cumulative = None
    if held is not None and held.cumulative is not None:
        cumulative = str(held.cumulative[0])
    return web.json_response({
        "cumulativeAckPosition": cumulative,
        "individualAckPositions": [str(p) for p in held.individual] if held is not None else [],
    })


def participant_totals(service: Any) -> dict[str, float]:
    """Broker-wide sums over the loaded topics' transaction buffers and pending acks (the
    ``pulsar_txn_tb_*`` / ``pulsar_txn_tp_*`` metrics), in one go (`add_participants`)."""
    totals = no_participants()
    add_participants(totals, list(service.topics.values()))
    return totals


def no_participants() -> dict[str, float]:
    """`participant_totals` of no topic."""
    return dict.fromkeys(("tb_active", "tb_committed", "tb_aborted", "tp_active",
                          "tp_committed", "tp_aborted"), 0.0)


def add_participants(totals: dict[str, float], topics: list[Any]) -> None:
    """Add the transaction buffers and pending acks of ``topics`` to ``totals``: topics and
    subscriptions without any are passed over in C-level loops (no Python frame each)."""
    buffers: Iterator[Any] = filter(_NOT_NONE, map(getattr, topics, repeat("txn_buffer"),
                                                   repeat(None)))
    for buf in buffers:
        totals["tb_active"] += len(buf.open)
        totals["tb_committed"] += buf.committed_count
        totals["tb_aborted"] += buf.aborted_count
    subs = chain.from_iterable(map(_VALUES, filter(None, map(_SUBSCRIPTIONS, topics))))
    held: Iterator[Any] = filter(_NOT_NONE, map(getattr, subs, repeat("pending_acks"), repeat(None)))
    for acks in held:
        totals["tp_active"] += len(acks.txns)
        totals["tp_committed"] += acks.committed_count
        totals["tp_aborted"] += acks.aborted_count
