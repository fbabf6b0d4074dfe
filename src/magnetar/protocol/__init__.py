"""Sans-IO codec for the Apache Pulsar binary protocol.

Owns the wire schema (``pb``, generated from ``pulsar.proto``), framing, checksums,
batches, compression and key hashing. No sockets, no asyncio: bytes in, commands out.
"""

from magnetar.protocol import pulsar_pb2 as pb

__all__ = ["pb"]
