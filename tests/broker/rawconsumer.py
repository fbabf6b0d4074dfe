"""Consumer-side conversations over ``RawClient``: subscribe, flow, poll for one kind of frame.

For the subscription and acknowledgement tests that must see what the official client hides
(ActiveConsumerChange, AckResponse, exact Flow accounting). Frames that do not match a poll
stay queued in the client for a later poll; Pings are answered.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from magnetar.protocol import pb
from magnetar.protocol.batch import encode_batch
from magnetar.protocol.commands import command
from magnetar.protocol.frames import Frame, build_payload_part, encode_payload_command

from .rawclient import RawClient

T = pb.BaseCommand
Sub = pb.CommandSubscribe


def connected(url: str) -> RawClient:
    raw = RawClient.for_url(url)
    raw.connect()
    return raw


def poll(raw: RawClient, predicate: Callable[[Frame], bool], timeout: float) -> Frame | None:
    """The first frame (already queued or arriving within ``timeout``) matching ``predicate``."""
    deadline = time.monotonic() + timeout
    skipped: list[Frame] = []
    try:
        while True:
            try:
                frame = raw.read(max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                return None
            if frame is None:
                raise ConnectionError("broker closed the connection")
            if frame.command.type == T.PING:
                raw.send("PONG")
            elif predicate(frame):
                return frame
            else:
                skipped.append(frame)
    finally:
        raw.pending[:0] = skipped


def expect(raw: RawClient, predicate: Callable[[Frame], bool], timeout: float = 5.0) -> Frame:
    frame = poll(raw, predicate, timeout)
    assert frame is not None, f"no matching frame within {timeout}s"
    return frame


def reply_to(raw: RawClient, request_id: int, timeout: float = 5.0) -> pb.BaseCommand:
    """The response (Success, Error, AckResponse, ...) that carries ``request_id``."""

    def match(frame: Frame) -> bool:
        return any(
            getattr(value, "request_id", None) == request_id
            for desc, value in frame.command.ListFields()
            if desc.name != "type"
        )

    return expect(raw, match, timeout).command


def subscribe(
    raw: RawClient,
    topic: str,
    subscription: str,
    consumer_id: int,
    sub_type: int = Sub.Exclusive,
    *,
    consumer_name: str = "",
    priority_level: int | None = None,
    earliest: bool = False,
) -> pb.BaseCommand:
    rid = raw.next_request_id()
    fields: dict[str, object] = {
        "topic": topic, "subscription": subscription, "subType": sub_type,
        "consumer_id": consumer_id, "request_id": rid,
        "consumer_name": consumer_name or f"raw-{consumer_id}",
        "initialPosition": Sub.Earliest if earliest else Sub.Latest,
    }
    if priority_level is not None:
        fields["priority_level"] = priority_level
    raw.send("SUBSCRIBE", **fields)
    return reply_to(raw, rid)


def flow(raw: RawClient, consumer_id: int, permits: int) -> None:
    raw.send("FLOW", consumer_id=consumer_id, messagePermits=permits)


def close_consumer(raw: RawClient, consumer_id: int) -> pb.BaseCommand:
    rid = raw.next_request_id()
    raw.send("CLOSE_CONSUMER", consumer_id=consumer_id, request_id=rid)
    return reply_to(raw, rid)


def message(raw: RawClient, consumer_id: int, timeout: float = 5.0) -> Frame | None:
    """The next MESSAGE frame for ``consumer_id`` within ``timeout``, or None."""
    return poll(
        raw, lambda f: f.command.type == T.MESSAGE and f.command.message.consumer_id == consumer_id, timeout
    )


def publish_batch(raw: RawClient, producer_id: int, sequence_id: int, payloads: list[bytes]) -> pb.BaseCommand:
    """One entry holding ``payloads`` as a batch; returns the SendReceipt (or SendError)."""
    singles = [(pb.SingleMessageMetadata(payload_size=len(p)), p) for p in payloads]
    metadata = pb.MessageMetadata(
        producer_name=f"raw-{producer_id}", sequence_id=sequence_id,
        publish_time=int(time.time() * 1000), num_messages_in_batch=len(payloads),
    )
    part = build_payload_part(metadata, encode_batch(singles))
    cmd = command("SEND", producer_id=producer_id, sequence_id=sequence_id, num_messages=len(payloads))
    raw.send_bytes(encode_payload_command(cmd, part))
    return expect(raw, lambda f: f.command.type in (T.SEND_RECEIPT, T.SEND_ERROR)).command
