"""Protocol version constants."""

from __future__ import annotations

from magnetar.protocol import pulsar_pb2 as pb

__all__ = ["PROTOCOL_VERSION"]

#: The Pulsar protocol revision Magnetar speaks (``ProtocolVersion.v21``). Peers agree on
#: ``min(ours, theirs)`` during CONNECT / CONNECTED.
PROTOCOL_VERSION: int = pb.v21
