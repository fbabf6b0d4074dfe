"""A factory closing many ledgers (a broker stopping with many loaded topics) writes their
segments' index sidecars on several threads at once (`factory.CLOSE_THREADS`): each ledger
still ends closed with its sidecar written, and reopens with every entry. (Segments past
`clean_stop.INDEX_MIN_BYTES`: a clean stop writes no sidecar for a smaller one, see
test_clean_stop.py.)"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import ManagedLedgerFactory, Position, StorageConfig
from magnetar.storage import segment as segment_module
from magnetar.storage.clean_stop import INDEX_MIN_BYTES

from .storage_testlib import append_all, run

LEDGERS = 40
PAD = b"x" * (INDEX_MIN_BYTES + 1)


def test_closing_many_ledgers_writes_every_sidecar_on_threads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    threads: set[str] = set()
    real = segment_module.Segment.write_index

    def write_index(seg: Any) -> None:
        threads.add(threading.current_thread().name)
        real(seg)

    monkeypatch.setattr(segment_module.Segment, "write_index", write_index)
    data = tmp_path / "data"
    f = ManagedLedgerFactory(StorageConfig(data))
    ledgers = [f.open(f"t{i}") for i in range(LEDGERS)]
    busy = f.open("busy")  # one with an append still buffered: its own close writes it

    async def append_then_close() -> None:
        for i, ml in enumerate(ledgers):
            await append_all(ml, [b"entry %d" % i + PAD])
        pending = busy.append(b"buffered" + PAD)
        f.close()  # (blocking, on the loop's thread as a broker's stop does)
        assert pending.done() and pending.exception() is None

    run(append_then_close())
    segments = [ml._segments[0] for ml in ledgers]
    assert any(name.startswith("magnetar-close") for name in threads)
    assert all(seg.index_written and os.path.exists(seg.idx_path) for seg in segments)
    assert busy._segments[0].index_written
    f = ManagedLedgerFactory(StorageConfig(data))
    try:
        for i in range(LEDGERS):
            got = f.open(f"t{i}").read_entries(Position(-1, -1), 10)
            assert [d for _, d in got] == [b"entry %d" % i + PAD]
        assert [d for _, d in f.open("busy").read_entries(Position(-1, -1), 10)] == [
            b"buffered" + PAD]
    finally:
        f.close()
