"""What a connected peer understands, judged from its Connect command.

The protocol version a client announces is not the whole story: some clients announce a
recent version yet treat a few server-sent commands as invalid and drop the connection.
This module keeps those judgements in one place so the broker can leave such commands out.
"""

from __future__ import annotations

import re

__all__ = ["understands_reached_end_of_topic"]

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
