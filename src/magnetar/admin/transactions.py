"""Transaction coordinators over REST: Pulsar's ``/admin/v3/transactions/...`` paths that
``pulsar-admin transactions`` calls (coordinator stats, a transaction's metadata, slow
transactions, aborting one), and the coordinators' list (which broker serves each).

The JSON is Pulsar's: ``TransactionCoordinatorStats`` (``state``, ``leastSigBits``,
``lowWaterMark``, ``ongoingTxnSize``...), ``TransactionMetadata`` (``txnId``, ``status``,
``openTimestamp``, ``timeoutAt``, ``producedPartitions``, ``ackedPartitions``). Stats cover
the coordinators this broker serves (in a cluster, ask each broker, or give
``coordinatorId`` to the one serving it); a transaction's metadata is read from its
coordinator here or from the metadata store. The participants' stats
(``transactionBufferStats``, ``pendingAckStats``) are in ``transaction_participants.py``.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from magnetar.admin.routing import SERVICE, RestError, RouteTable, int_param
from magnetar.broker.transactions.coordinator import LATENCY_BUCKETS_MS
from magnetar.broker.transactions.manager import ASSIGN_TOPIC, assign_partition
from magnetar.broker.transactions.records import ENDED, TxnRecord

routes = RouteTable("transactions")

V3 = "/admin/v3/transactions"


def metadata_doc(rec: TxnRecord) -> dict[str, Any]:
    """Pulsar's ``TransactionMetadata`` of a record."""
    acked: dict[str, dict[str, Any]] = {}
    for topic, sub in rec.subscriptions:
        acked.setdefault(topic, {})[sub] = {}
    return {
        "txnId": f"({rec.tc},{rec.seq})",
        "status": rec.state,
        "openTimestamp": rec.opened_ms,
        "timeoutAt": rec.timeout_ms,
        "producedPartitions": {p: {} for p in rec.partitions},
        "ackedPartitions": acked,
        "timedOut": rec.timed_out,
    }


def _enabled(request: web.Request) -> Any:
    transactions = request.app[SERVICE].transactions
    if not transactions.enabled:
        raise RestError(503, "transactions are not enabled on this broker "
                             "(transactionCoordinatorEnabled=false)")
    return transactions


@routes.route("GET", V3 + "/coordinatorStats",
              "Stats of the transaction coordinators this broker serves (or of ?coordinatorId=N).")
async def coordinator_stats(request: web.Request) -> web.Response:
    transactions = _enabled(request)
    wanted = request.query.get("coordinatorId")
    if wanted is not None:
        try:
            tc = int(wanted)
        except ValueError:
            raise RestError(412, f"coordinatorId must be an integer, not {wanted!r}") from None
        await transactions.get(tc)
        return web.json_response(transactions.coordinator_stats(tc))
    return web.json_response({str(tc): transactions.coordinator_stats(tc)
                              for tc in sorted(transactions.coordinators)})


@routes.route("GET", V3 + "/coordinators",
              "Which broker serves each coordinator (a partition of the assign topic).")
async def coordinators(request: web.Request) -> web.Response:
    transactions = _enabled(request)
    service = request.app[SERVICE]
    out: dict[str, str] = {}
    for tc in range(await transactions.count()):
        cluster = service.cluster
        if cluster is None:
            out[str(tc)] = f"pulsar://{service.config.advertisedAddress or 'localhost'}:{service.port}"
            continue
        result = await cluster.lookup(assign_partition(tc))
        out[str(tc)] = result.owner.service_url
    return web.json_response(out)


@routes.route("GET", V3 + "/transactionMetadata/{mostSigBits}/{leastSigBits}",
              "One transaction's state, timeout, partitions and subscriptions.")
async def transaction_metadata(request: web.Request) -> web.Response:
    transactions = _enabled(request)
    most, least = int_param(request, "mostSigBits"), int_param(request, "leastSigBits")
    rec = await transactions.record(most, least)
    if rec is None:
        raise RestError(404, f"transaction ({most},{least}) not found")
    return web.json_response(metadata_doc(rec))


@routes.route("GET", V3 + "/slowTransactions/{timeout}",
              "The transactions open longer than {timeout} ms (?coordinatorId=N: one coordinator's).")
async def slow_transactions(request: web.Request) -> web.Response:
    transactions = _enabled(request)
    timeout = int_param(request, "timeout")
    wanted = request.query.get("coordinatorId")
    now = _now_ms()
    out: dict[str, Any] = {}
    for tc, coordinator in sorted(transactions.coordinators.items()):
        if wanted is not None and str(tc) != wanted:
            continue
        for rec in coordinator.txns.values():
            if rec.state not in ENDED and now - rec.opened_ms > timeout:
                out[f"({rec.tc},{rec.seq})"] = metadata_doc(rec)
    return web.json_response(out)


@routes.route("POST", V3 + "/abortTransaction/{mostSigBits}/{leastSigBits}",
              "Abort an open transaction (its coordinator must be served here).")
async def abort_transaction(request: web.Request) -> web.Response:
    transactions = _enabled(request)
    most, least = int_param(request, "mostSigBits"), int_param(request, "leastSigBits")
    coordinator = await transactions.get(most)
    await coordinator.end(least, commit=False)
    return web.Response(status=204)


_COUNTERS = (
    ("pulsar_txn_created_total", "Transactions created by the coordinator.", "created"),
    ("pulsar_txn_committed_total", "Transactions committed by the coordinator.", "committed"),
    ("pulsar_txn_aborted_total", "Transactions aborted by the coordinator (timed out included).",
     "aborted"),
    ("pulsar_txn_timeout_total", "Transactions aborted because they timed out.", "timed_out"),
)


def txn_metrics(service: Any) -> str:
    """The ``pulsar_txn_*`` families of the coordinators served here (Prometheus text):
    active transactions, created, committed, aborted and timed-out counts, and the latency
    of writing a transaction's record (``pulsar_txn_append_log``, milliseconds)."""
    transactions = service.transactions
    if not transactions.enabled or not transactions.coordinators:
        return ""
    cluster = service.config.clusterName.replace("\\", "\\\\").replace('"', '\\"')
    items = sorted(transactions.coordinators.items())
    out = ["# HELP pulsar_txn_active_count Transactions open or ending at the coordinator.\n"
           "# TYPE pulsar_txn_active_count gauge\n"]
    out += [f'pulsar_txn_active_count{{cluster="{cluster}",coordinator_id="{tc}"}} {c.active()}\n'
            for tc, c in items]
    for name, doc, field in _COUNTERS:
        out.append(f"# HELP {name} {doc}\n# TYPE {name} counter\n")
        out += [f'{name}{{cluster="{cluster}",coordinator_id="{tc}"}} '
                f"{getattr(c.stats, field)}\n" for tc, c in items]
    name = "pulsar_txn_append_log"
    out.append(f"# HELP {name} Latency of storing a transaction record in the metadata store, "
               f"in milliseconds.\n# TYPE {name} histogram\n")
    for tc, c in items:
        labels = f'cluster="{cluster}",coordinator_id="{tc}"'
        total = 0
        for bound, count in zip((*LATENCY_BUCKETS_MS, "+Inf"), c.stats.append_buckets,
                                strict=True):
            total += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {total}\n')
        out.append(f"{name}_count{{{labels}}} {c.stats.append_count}\n"
                   f"{name}_sum{{{labels}}} {c.stats.append_sum_ms:.3f}\n")
    return "".join(out)


def _now_ms() -> int:
    return int(time.time() * 1000)


__all__ = ["ASSIGN_TOPIC", "metadata_doc", "routes", "txn_metrics"]
