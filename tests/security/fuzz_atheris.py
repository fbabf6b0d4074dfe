"""Atheris (coverage-guided, libFuzzer) fuzz target over the frame decoder and the broker's
command handlers.

Each input is turned, through hypothesis's ``fuzz_one_input``, into what the hypothesis
fuzzer of ``test_hostile`` sends: a list of command frames of every type the broker handles
with random field values, then random trailing bytes. Atheris mutates those bytes guided by
the coverage of ``magnetar`` (the only package instrumented). Per input:

- **decoder**: the stream goes through a ``FrameDecoder`` whole and cut at random points;
  only ``ProtocolError`` may escape, and both ways give the same frames (or the same error);
- **handlers**: the frames go to a ``ServerCnx`` in this process, after a valid Connect, on a
  transport that swallows the answers, inside a real ``BrokerService`` on a temporary data
  directory. A handler may refuse or hang up; nothing may raise out of ``data_received``, and
  the broker may log no error ("failed to handle") and leave no failed task behind.

A failure is a crash for libFuzzer, which writes the input to ``<artifact_prefix>crash-*``.
Run (libFuzzer flags after the module; a corpus directory is optional)::

    pip install -e '.[fuzz]'
    python -m tests.security.fuzz_atheris -max_total_time=300 fuzz-corpus/

``test_atheris.py`` runs it for a few hundred inputs when atheris is installed.
``MAGNETAR_FUZZ_SELF_TEST=1`` makes every LOOKUP handler fail, to show a failure is caught.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
import tempfile
from typing import Any

import atheris

with atheris.instrument_imports(include=["magnetar"]):
    from magnetar.broker.config import BrokerConfig
    from magnetar.broker.connection.server_cnx import ServerCnx
    from magnetar.broker.service import BrokerService
    from magnetar.protocol.commands import command
    from magnetar.protocol.errors import ProtocolError
    from magnetar.protocol.frames import Frame, FrameDecoder, encode_command

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.security.test_hostile import commands

CONNECT = encode_command(command("CONNECT", client_version="atheris", protocol_version=21))


class SwallowingTransport(asyncio.Transport):
    """Takes the broker's answers and drops them; remembers whether it was closed."""

    def __init__(self) -> None:
        super().__init__()
        self.closing = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 6650)}.get(name, default)

    def write(self, data: Any) -> None:
        pass

    def close(self) -> None:
        self.closing = True

    def abort(self) -> None:
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def _decode(pieces: list[bytes]) -> tuple[list[tuple[bytes, bytes | None]], str | None]:
    decoder = FrameDecoder()
    frames: list[Frame] = []
    try:
        for piece in pieces:
            frames.extend(decoder.feed(piece))
    except ProtocolError as exc:
        return [], type(exc).__name__
    return [(f.command.SerializeToString(), f.payload_part) for f in frames], None


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    pieces, start = [], 0
    for size in cuts:
        pieces.append(data[start:start + size])
        start += size
    pieces.append(data[start:])
    return pieces


class Target:
    def __init__(self) -> None:
        self.data_dir = os.environ.get("MAGNETAR_FUZZ_DIR") or tempfile.mkdtemp(prefix="fuzz-")
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.task_errors: list[str] = []
        self.loop.set_exception_handler(
            lambda _loop, ctx: self.task_errors.append(str(ctx.get("message"))))
        config = BrokerConfig.load(None, magnetarDataDir=self.data_dir, brokerServicePort=0,
                                   bindAddress="127.0.0.1", magnetarFsyncPolicy="never")
        self.service = BrokerService(config)
        self.loop.run_until_complete(self.service.start())
        self.errors = Errors()
        logging.getLogger("magnetar").addHandler(self.errors)
        logging.getLogger("magnetar").setLevel(logging.ERROR)  # refusals log at INFO/WARNING
        if os.environ.get("MAGNETAR_FUZZ_SELF_TEST"):
            def broken(self: ServerCnx, cmd: Any, frame: Any) -> None:
                raise RuntimeError("self test: a broken handler")
            ServerCnx.handle_lookup = broken  # type: ignore[method-assign]

    async def _drive(self, frames: list[bytes], tail: bytes) -> None:
        cnx = ServerCnx(self.service)
        cnx.connection_made(SwallowingTransport())
        cnx.data_received(CONNECT)
        for data in [*frames, tail]:
            if cnx.closed:
                break
            cnx.data_received(data)
        for _ in range(3):  # let the flushes, callbacks and short tasks run
            await asyncio.sleep(0)
        cnx.connection_lost(None)
        await asyncio.sleep(0)

    def run(self, frames: list[bytes], tail: bytes, cuts: list[int]) -> None:
        stream = b"".join(frames) + tail
        whole = _decode([stream])
        assert _decode(_cut(stream, cuts)) == whole, "decoding depends on where reads end"
        self.loop.run_until_complete(self._drive(frames, tail))
        failures = [m for m in self.errors.messages if "failed to handle" in m] + self.task_errors
        self.errors.messages.clear()
        self.task_errors.clear()
        assert not failures, failures


def main() -> None:
    target = Target()

    @settings(database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(commands(), min_size=1, max_size=6), st.binary(max_size=64),
           st.lists(st.integers(0, 80), max_size=4))
    def one_input(frames: list[bytes], tail: bytes, cuts: list[int]) -> None:
        target.run(frames, tail, cuts)

    if "MAGNETAR_FUZZ_DIR" not in os.environ:
        import atexit

        atexit.register(shutil.rmtree, target.data_dir, True)
    argv = list(sys.argv)
    # hypothesis needs inputs of some length to build an example from: start at full length
    for flag in ("-max_len=4096", "-len_control=0"):
        if not any(a.startswith(flag.split("=")[0] + "=") for a in argv):
            argv.append(flag)
    atheris.Setup(argv, one_input.hypothesis.fuzz_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
