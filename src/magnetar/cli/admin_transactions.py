"""``magnetar admin transactions``: pulsar-admin's ``transactions`` commands over the
``/admin/v3/transactions`` REST paths (coordinator stats and list, a transaction's
metadata, slow transactions, aborting one, a topic's transaction buffer and a
subscription's pending acks). `add_commands` is handed ``admin.py``'s command builder and
groups."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from magnetar.cli.admin_ops import seconds, topic_name
from magnetar.cli.http import AdminClient
from magnetar.protocol.naming import url_segment

V3 = "/admin/v3/transactions"
Arg = tuple[tuple[str, ...], dict[str, Any]]
Groups = dict[str, "argparse._SubParsersAction[argparse.ArgumentParser]"]

EXAMPLE = ("magnetar admin transactions coordinator-stats\n"
           "  magnetar admin transactions transaction-metadata -m 0 -l 12\n"
           "  magnetar admin transactions slow-transactions --time 60s")


def _a(*flags: str, **kwargs: Any) -> Arg:
    return flags, kwargs


MOST = _a("-m", "--most-sig-bits", dest="most", type=int, required=True,
          help="the transaction id's most significant bits (its coordinator)")
LEAST = _a("-l", "--least-sig-bits", dest="least", type=int, required=True,
           help="the transaction id's least significant bits")


def _coordinator_stats(a: argparse.Namespace, api: AdminClient) -> Any:
    query = f"?coordinatorId={a.coordinator_id}" if a.coordinator_id is not None else ""
    return api.call("GET", f"{V3}/coordinatorStats{query}")


def _coordinators(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"{V3}/coordinators")


def _metadata(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("GET", f"{V3}/transactionMetadata/{a.most}/{a.least}")


def _slow(a: argparse.Namespace, api: AdminClient) -> Any:
    query = f"?coordinatorId={a.coordinator_id}" if a.coordinator_id is not None else ""
    return api.call("GET", f"{V3}/slowTransactions/{a.time * 1000}{query}")


def _abort(a: argparse.Namespace, api: AdminClient) -> Any:
    return api.call("POST", f"{V3}/abortTransaction/{a.most}/{a.least}")


def _buffer_stats(a: argparse.Namespace, api: AdminClient) -> Any:
    t = topic_name(a.topic)
    return api.call("GET", f"{V3}/transactionBufferStats/{t.namespace}/{url_segment(t.local_name)}")


def _pending_ack_stats(a: argparse.Namespace, api: AdminClient) -> Any:
    t = topic_name(a.topic)
    return api.call("GET", f"{V3}/pendingAckStats/{t.namespace}/{url_segment(t.local_name)}/"
                           f"{url_segment(a.subscription)}")


def add_commands(groups: Groups, cmd: Callable[..., None]) -> None:
    """Add the ``transactions`` commands through ``cmd`` (admin.py's ``_cmd``)."""
    g = groups["transactions"]
    ex = "magnetar admin transactions"
    coordinator = _a("-c", "--coordinator-id", dest="coordinator_id", type=int,
                     help="only this coordinator")
    cmd(g, "coordinator-stats", _coordinator_stats, "stats of the transaction coordinators "
        f"(GET {V3}/coordinatorStats)", f"{ex} coordinator-stats -c 0", coordinator)
    cmd(g, "coordinators-list", _coordinators, "which broker serves each coordinator "
        f"(GET {V3}/coordinators)", f"{ex} coordinators-list")
    cmd(g, "transaction-metadata", _metadata, "a transaction's state, timeout, partitions and "
        f"subscriptions (GET {V3}/transactionMetadata/MOST/LEAST)",
        f"{ex} transaction-metadata -m 0 -l 12", MOST, LEAST)
    cmd(g, "slow-transactions", _slow, "the transactions open longer than a time "
        f"(GET {V3}/slowTransactions/MS)", f"{ex} slow-transactions --time 1m", coordinator,
        _a("-t", "--time", type=seconds, required=True, help="e.g. 30s, 5m"))
    cmd(g, "abort-transaction", _abort, "abort an open transaction "
        f"(POST {V3}/abortTransaction/MOST/LEAST)", f"{ex} abort-transaction -m 0 -l 12",
        MOST, LEAST)
    cmd(g, "transaction-buffer-stats", _buffer_stats, "a topic's transaction buffer "
        f"(GET {V3}/transactionBufferStats/TENANT/NS/TOPIC)",
        f"{ex} transaction-buffer-stats my-topic",
        _a("topic", help="topic name (short names are persistent://public/default/NAME)"))
    cmd(g, "pending-ack-stats", _pending_ack_stats, "a subscription's acknowledgements held "
        f"by transactions (GET {V3}/pendingAckStats/TENANT/NS/TOPIC/SUB)",
        f"{ex} pending-ack-stats my-topic -s sub",
        _a("topic", help="topic name (short names are persistent://public/default/NAME)"),
        _a("-s", "--subscription", required=True, help="subscription name"))
