"""What a connected peer understands, judged from its Connect command.

The protocol version a client announces is not the whole story: some clients announce a
recent version yet treat a few server-sent commands as invalid and drop the connection.
This module keeps those judgements in one place so the broker can leave such commands out.
"""

from __future__ import annotations

import re

__all__ = [
    "MAGNETAR_BROKER",
    "MAGNETAR_CLIENT",
    "ends_txn_after_sends",
    "orders_txn_adds",
    "orders_txn_ends",
    "understands_reached_end_of_topic",
]

#: How a Magnetar broker's ``server_version`` begins (``Magnetar-Broker-v0.1.0``).
MAGNETAR_BROKER = "Magnetar-Broker"

#: How Magnetar's Python client's ``client_version`` begins (``magnetar-python-0.1.0``).
MAGNETAR_CLIENT = "magnetar-python"

#: ReachedEndOfTopic first appeared in protocol version 9.
_END_OF_TOPIC_SINCE = 9

#: The C++ library (and the Python and Node wrappers on top of it) up to at least 4.2
#: closes the connection on ReachedEndOfTopic ("Received invalid message from server"),
#: then reconnects, meets the same command, and churns. pulsar-client 3.13 for Python
#: reports "Pulsar-CPP-v4.2.0". Releases after 4.2 are given the benefit of the doubt.
_CPP_CLIENT = re.compile(r"^Pulsar-CPP-v(\d+)\.(\d+)", re.IGNORECASE)
_CPP_LAST_NOT_UNDERSTANDING = (4, 2)


def understands_reached_end_of_topic(client_version: str, protocol_version: int) -> bool:
    """True when the peer handles CommandReachedEndOfTopic instead of dropping the link."""
    if protocol_version < _END_OF_TOPIC_SINCE:
        return False
    match = _CPP_CLIENT.match(client_version)
    if match is None:
        return True
    return (int(match.group(1)), int(match.group(2))) > _CPP_LAST_NOT_UNDERSTANDING


def orders_txn_adds(server_version: str) -> bool:
    """True when the broker handles a connection's AddPartitionToTxn before a Send of the
    same transaction that came after it on that connection (a Magnetar broker does, its
    coordinator here or elsewhere), so that a client may write the transaction's first
    send right behind the add instead of waiting for the add's answer. Other brokers are
    not assumed to: the client waits, as the Java and Go clients do."""
    return server_version.startswith(MAGNETAR_BROKER)


def ends_txn_after_sends(client_version: str) -> bool:
    """True for a client that may write a transaction's EndTxn (commit) right behind its
    last sends, without waiting for their receipts: Magnetar's client. For such a peer a
    Magnetar broker commits only once every Send read before the EndTxn on the same
    connection is answered, and refuses the commit (``NotAllowedError``, the transaction
    left open) if one of that transaction's was refused or dropped. Other clients wait
    for their receipts before they commit, and are served as Pulsar serves them."""
    return client_version.startswith(MAGNETAR_CLIENT)


def orders_txn_ends(server_version: str) -> bool:
    """True when the broker commits a transaction only once the Sends read before its
    EndTxn on the same connection are answered (see `ends_txn_after_sends`): a Magnetar
    broker. Other brokers are not assumed to: the client waits for its receipts first."""
    return server_version.startswith(MAGNETAR_BROKER)
