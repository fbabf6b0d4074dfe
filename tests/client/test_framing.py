"""The client's frame splitter: any chunking of the stream, frames with and without
checksums, broker entry metadata."""

from __future__ import annotations

import random
import struct

import pytest

from magnetar.client.framing import ClientFrameDecoder, split_payload
from magnetar.protocol import (
    ChecksumMismatch,
    FrameTooLarge,
    build_payload_part,
    command,
    encode_command,
    encode_payload_command,
    pb,
)

META = pb.MessageMetadata(producer_name="p", sequence_id=1, publish_time=1)


def _stream() -> bytes:
    big = encode_payload_command(command("MESSAGE", consumer_id=1,
                                         message_id=pb.MessageIdData(ledgerId=1, entryId=2)),
                                 build_payload_part(META, b"x" * 300_000))
    return b"".join([encode_command(command("PING")), big, encode_command(command("PONG"))] * 4)


@pytest.mark.parametrize("seed", range(5))
def test_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    stream = _stream()
    decoder = ClientFrameDecoder(1 << 24)
    out = []
    pos = 0
    while pos < len(stream):
        n = rng.choice([1, 2, 7, 100, 65536, 400_000])
        out += decoder.feed(stream[pos:pos + n])
        pos += n
    assert [c.type for c, _ in out] == [pb.BaseCommand.PING, pb.BaseCommand.MESSAGE,
                                        pb.BaseCommand.PONG] * 4
    meta, payload = split_payload(out[1][1])
    assert meta.producer_name == "p" and payload == b"x" * 300_000


def test_without_checksum_and_with_entry_metadata() -> None:
    meta = META.SerializeToString()
    bare = struct.pack(">I", len(meta)) + meta + b"body"
    assert split_payload(bare)[1] == b"body"
    bem = pb.BrokerEntryMetadata(index=5).SerializeToString()
    with_bem = b"\x0e\x02" + struct.pack(">I", len(bem)) + bem + build_payload_part(META, b"b2")
    assert split_payload(with_bem)[1] == b"b2"
    corrupt = bytearray(build_payload_part(META, b"b3"))
    corrupt[-1] ^= 1
    with pytest.raises(ChecksumMismatch):
        split_payload(bytes(corrupt))


def test_frame_too_large() -> None:
    with pytest.raises(FrameTooLarge):
        ClientFrameDecoder(100).feed(struct.pack(">II", 1000, 4) + b"xxxx")
