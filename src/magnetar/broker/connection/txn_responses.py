"""The failure answers of the transaction coordinator's commands: each request is answered
by its own response command carrying ``error`` and ``message`` (clients match them by type
and request id, never by a generic Error)."""

from __future__ import annotations

from typing import Any

from magnetar.protocol import pb

T = pb.BaseCommand

#: each request and its response's field, answered with ``error``/``message`` on failure
TXN_RESPONSES: dict[int, tuple[str, Any, str, Any]] = {
    T.TC_CLIENT_CONNECT_REQUEST: ("tcClientConnectRequest", T.TC_CLIENT_CONNECT_RESPONSE,
                                  "tcClientConnectResponse", pb.CommandTcClientConnectResponse),
    T.NEW_TXN: ("newTxn", T.NEW_TXN_RESPONSE, "newTxnResponse", pb.CommandNewTxnResponse),
    T.ADD_PARTITION_TO_TXN: ("addPartitionToTxn", T.ADD_PARTITION_TO_TXN_RESPONSE,
                             "addPartitionToTxnResponse", pb.CommandAddPartitionToTxnResponse),
    T.ADD_SUBSCRIPTION_TO_TXN: ("addSubscriptionToTxn", T.ADD_SUBSCRIPTION_TO_TXN_RESPONSE,
                                "addSubscriptionToTxnResponse",
                                pb.CommandAddSubscriptionToTxnResponse),
    T.END_TXN: ("endTxn", T.END_TXN_RESPONSE, "endTxnResponse", pb.CommandEndTxnResponse),
}


def txn_error_response(cmd: pb.BaseCommand, code: int, message: str) -> pb.BaseCommand | None:
    """The failure answer of a coordinator command (None for other commands)."""
    entry = TXN_RESPONSES.get(cmd.type)
    if entry is None:
        return None
    field, kind, out_field, cls = entry
    req = getattr(cmd, field)
    body = cls(request_id=req.request_id, error=code, message=message)
    if kind != T.TC_CLIENT_CONNECT_RESPONSE:
        body.txnid_most_bits = getattr(req, "txnid_most_bits", 0)
        body.txnid_least_bits = getattr(req, "txnid_least_bits", 0)
    out = T(type=kind)
    getattr(out, out_field).CopyFrom(body)
    return out
