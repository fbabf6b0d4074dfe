#!/usr/bin/env python3
"""A broker stand-in that costs (almost) nothing, to measure consuming clients alone.

It answers the handshake, partition metadata, lookup and subscribe of any topic, and for
every Flow sends prebuilt batch entries (laid out as the official client batches: up to
128 KB per entry, each message's ``SingleMessageMetadata`` holding ``payload_size`` and
``sequence_id``, CRC32C over the payload part) until the consumer's permits are used up,
like a broker whose every read is a cache hit and whose dispatch takes no time. Acks are
accepted and ignored. Its CPU use is near zero, so a consume figure against it is bounded
by the client.

  python bench/replay_broker.py PORT [--size 1024] [--unbatched]  # "ready" once listening
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from magnetar.protocol import (
    FrameDecoder,
    build_payload_part,
    command,
    encode_batch,
    encode_command,
    pb,
)
from magnetar.protocol.fastpath import message_command, message_frame

T = pb.BaseCommand
BATCH_BYTES = 128 * 1024  # the official client's batching_max_allowed_size_in_bytes


def build_entries(size: int, count: int = 8, batched: bool = True) -> tuple[list[bytes], int]:
    """``count`` payload parts of one batch each, and the messages per batch (or of one
    message each, not batched)."""
    if not batched:
        return [build_payload_part(pb.MessageMetadata(
            producer_name="replay", sequence_id=e, publish_time=int(time.time() * 1000)),
            os.urandom(size)) for e in range(count)], 1
    per = max(1, min(1000, BATCH_BYTES // size))
    parts = []
    for e in range(count):
        seq = e * per
        batch = encode_batch([(pb.SingleMessageMetadata(sequence_id=seq + i), os.urandom(size))
                              for i in range(per)])
        meta = pb.MessageMetadata(producer_name="replay", sequence_id=seq,
                                  publish_time=int(time.time() * 1000),
                                  num_messages_in_batch=per, highest_sequence_id=seq + per - 1)
        parts.append(build_payload_part(meta, batch))
    return parts, per


class ReplayConnection(asyncio.Protocol):
    def __init__(self, parts: list[bytes], per: int) -> None:
        self.parts = parts
        self.per = per
        self.decoder = FrameDecoder()
        self.permits: dict[int, int] = {}
        self.next_entry: dict[int, int] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]

    def reply(self, kind: int, **fields: object) -> None:
        self.transport.write(encode_command(command(kind, **fields)))

    def data_received(self, data: bytes) -> None:
        for frame in self.decoder.feed(data):
            cmd = frame.command
            kind = cmd.type
            if kind == T.CONNECT:
                self.reply(T.CONNECTED, server_version="replay", protocol_version=21,
                           max_message_size=5 * 1024 * 1024)
            elif kind == T.PARTITIONED_METADATA:
                self.reply(T.PARTITIONED_METADATA_RESPONSE, partitions=0,
                           request_id=cmd.partitionMetadata.request_id,
                           response=pb.CommandPartitionedTopicMetadataResponse.Success)
            elif kind == T.LOOKUP:
                self.reply(T.LOOKUP_RESPONSE, request_id=cmd.lookupTopic.request_id,
                           response=pb.CommandLookupTopicResponse.Connect, authoritative=True,
                           brokerServiceUrl="", proxy_through_service_url=True)
            elif kind == T.SUBSCRIBE:
                cid = cmd.subscribe.consumer_id
                self.permits[cid] = 0
                self.next_entry[cid] = 0
                self.reply(T.SUCCESS, request_id=cmd.subscribe.request_id)
            elif kind == T.FLOW:
                self.flow(cmd.flow.consumer_id, cmd.flow.messagePermits)
            elif kind == T.CLOSE_CONSUMER:
                self.permits.pop(cmd.close_consumer.consumer_id, None)
                self.reply(T.SUCCESS, request_id=cmd.close_consumer.request_id)
            elif kind == T.PING:
                self.reply(T.PONG)

    def flow(self, cid: int, permits: int) -> None:
        if cid not in self.permits:
            return
        permits += self.permits[cid]
        entry = self.next_entry[cid]
        out = []
        while permits > 0:  # like a broker: whole entries while any permit is left
            out.append(message_frame(message_command(cid, 1, entry),
                                     self.parts[entry % len(self.parts)], None))
            entry += 1
            permits -= self.per
        self.permits[cid] = permits
        self.next_entry[cid] = entry
        self.transport.write(b"".join(out))


async def serve(port: int, size: int, batched: bool) -> None:
    parts, per = build_entries(size, batched=batched)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: ReplayConnection(parts, per), "127.0.0.1", port)
    print("ready", flush=True)
    await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--unbatched", action="store_true", help="one message per entry")
    args = ap.parse_args()
    asyncio.run(serve(args.port, args.size, not args.unbatched))


if __name__ == "__main__":
    main()
