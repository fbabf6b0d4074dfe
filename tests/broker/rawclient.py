"""A raw-socket Pulsar peer for tests the official client cannot express.

It speaks through ``magnetar.protocol`` only: build commands, write them (or any bytes) to a
blocking socket, and read decoded frames back with a timeout. ``read`` returns ``None``
once the broker has closed the connection, so "the broker hung up" is a plain assertion.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from magnetar.protocol import pb
from magnetar.protocol.commands import command
from magnetar.protocol.frames import (
    Frame,
    FrameDecoder,
    build_payload_part,
    encode_command,
    encode_payload_command,
)
from magnetar.protocol.version import PROTOCOL_VERSION

T = pb.BaseCommand


class RawClient:
    """One TCP connection to a broker, driven frame by frame."""

    def __init__(self, host: str, port: int, timeout: float = 5.0) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.timeout = timeout
        self.decoder = FrameDecoder(max_frame_size=64 * 1024 * 1024)
        self.pending: list[Frame] = []
        self.eof = False
        self._request_ids = iter(range(1, 1 << 62))

    @classmethod
    def for_url(cls, url: str, timeout: float = 5.0) -> RawClient:
        host, _, port = url.removeprefix("pulsar://").rpartition(":")
        return cls(host, int(port), timeout)

    def next_request_id(self) -> int:
        return next(self._request_ids)

    # ------------------------------------------------------------------ output

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, kind: int | str | pb.BaseCommand, /, **fields: Any) -> None:
        cmd = kind if isinstance(kind, pb.BaseCommand) else command(kind, **fields)
        self.send_bytes(encode_command(cmd))

    def send_message(
        self,
        producer_id: int,
        sequence_id: int,
        payload: bytes,
        producer_name: str = "raw",
        corrupt_checksum: bool = False,
    ) -> None:
        """A SEND frame carrying one unbatched message (optionally with a wrong CRC32C)."""
        metadata = pb.MessageMetadata(
            producer_name=producer_name,
            sequence_id=sequence_id,
            publish_time=int(time.time() * 1000),
        )
        part = bytearray(build_payload_part(metadata, payload))
        if corrupt_checksum:
            part[2] ^= 0xFF  # the first byte of the 4-byte checksum after the magic
        cmd = command("SEND", producer_id=producer_id, sequence_id=sequence_id, num_messages=1)
        self.send_bytes(encode_payload_command(cmd, bytes(part)))

    # ------------------------------------------------------------------ input

    def read(self, timeout: float | None = None) -> Frame | None:
        """The next frame, ``None`` once the peer closed; ``TimeoutError`` if none came."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self.pending:
            if self.eof:
                return None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame from the broker in time")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise TimeoutError("no frame from the broker in time") from None
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
                continue
            self.pending.extend(self.decoder.feed(data))
        return self.pending.pop(0)

    def expect(self, kind: int, timeout: float | None = None, answer_pings: bool = True) -> pb.BaseCommand:
        """Read until a command of type ``kind`` arrives (answering the broker's Pings)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self.read(max(0.0, deadline - time.monotonic()))
            if frame is None:
                raise ConnectionError(f"broker closed the connection while {T.Type.Name(kind)} was awaited")
            if frame.command.type == kind:
                return frame.command
            if frame.command.type == T.PING and answer_pings:
                self.send("PONG")
                continue
            raise AssertionError(
                f"expected {T.Type.Name(kind)}, got {T.Type.Name(frame.command.type)}: {frame.command}"
            )

    def wait_closed(self, timeout: float | None = None) -> bool:
        """True once the broker closed the connection (frames before that are dropped)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                if self.read(max(0.0, deadline - time.monotonic())) is None:
                    return True
            except TimeoutError:
                return False

    # ------------------------------------------------------------------ conversations

    def connect(self, protocol_version: int = PROTOCOL_VERSION, **fields: Any) -> pb.CommandConnected:
        self.send("CONNECT", client_version="raw-test", protocol_version=protocol_version, **fields)
        return self.expect(T.CONNECTED).connected

    def create_producer(self, topic: str, producer_id: int = 1, **fields: Any) -> pb.BaseCommand:
        """Send a Producer command; returns the broker's answer (ProducerSuccess or Error)."""
        self.send("PRODUCER", topic=topic, producer_id=producer_id,
                  request_id=self.next_request_id(), **fields)
        return self.read_reply()

    def read_reply(self, timeout: float | None = None) -> pb.BaseCommand:
        """The next command other than a Ping (which is answered)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self.read(max(0.0, deadline - time.monotonic()))
            if frame is None:
                raise ConnectionError("broker closed the connection")
            if frame.command.type == T.PING:
                self.send("PONG")
                continue
            return frame.command

    def is_alive(self, timeout: float | None = None) -> bool:
        """Ping the broker; True when a Pong comes back."""
        self.send("PING")
        try:
            self.expect(T.PONG, timeout)
        except ConnectionError:
            return False
        return True

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
