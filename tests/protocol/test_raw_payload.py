"""The client's use of the frame decoder (``raw_payload``): any chunking of the stream, and
``split_message`` on payloads with and without checksums and broker entry metadata."""

from __future__ import annotations

import random
import struct

import pytest

from magnetar.protocol import (
    ChecksumMismatch,
    FrameDecoder,
    FrameTooLarge,
    build_payload_part,
    command,
    encode_command,
    encode_payload_command,
    pb,
)
from magnetar.protocol.frames import split_message as split_payload

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
    decoder = FrameDecoder(1 << 24, raw_payload=True)
    out = []
    pos = 0
    while pos < len(stream):
        n = rng.choice([1, 2, 7, 100, 65536, 400_000])
        out += decoder.feed(stream[pos:pos + n])
        pos += n
    assert [f.command.type for f in out] == [pb.BaseCommand.PING, pb.BaseCommand.MESSAGE,
                                        pb.BaseCommand.PONG] * 4
    meta, payload = split_payload(out[1].payload_part)
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
        FrameDecoder(100, raw_payload=True).feed(struct.pack(">II", 1000, 4) + b"xxxx")
