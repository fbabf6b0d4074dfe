"""kill -9 during group-committed appends: every acknowledged entry survives, intact and
in order, and nothing but whole entries follows it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import magnetar
from magnetar.storage import ManagedLedgerFactory, Position, StorageConfig

CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from magnetar.storage import ManagedLedgerFactory, StorageConfig

    def payload(j):
        return b"m%07d" % j + b"." * (j % 300)

    async def main():
        f = ManagedLedgerFactory(StorageConfig(sys.argv[1], segment_max_entries=700))
        ml = f.open("t")
        j = ml.entry_count()
        out = sys.stdout
        def acked(fut, j):
            p = fut.result()
            out.write(f"{j} {p.ledger_id} {p.entry_id}\\n")
        while True:
            for _ in range(200):
                ml.append(payload(j)).add_done_callback(lambda fu, j=j: acked(fu, j))
                j += 1
            await asyncio.sleep(0)
            out.flush()

    asyncio.run(main())
    """
)


def _payload(j: int) -> bytes:
    return b"m%07d" % j + b"." * (j % 300)


def test_acknowledged_entries_survive_kill_9(tmp_path: Path):
    data = tmp_path / "data"
    env = dict(os.environ, PYTHONPATH=str(Path(magnetar.__file__).parents[1]))
    acked_total: dict[int, Position] = {}
    for _round in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(data)], stdout=subprocess.PIPE, env=env
        )
        assert proc.stdout is not None
        acked: dict[int, Position] = {}
        for line in proc.stdout:
            j, lid, eid = map(int, line.split())
            acked[j] = Position(lid, eid)
            if len(acked) >= 3000:
                break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        acked_total.update(acked)

        f = ManagedLedgerFactory(StorageConfig(data))
        ml = f.open("t")
        entries = list(ml.read_range(Position(-1, -1), Position(2**62, 0)))
        f.close()
        # the ledger is exactly payloads 0..n-1, in order: no hole, no phantom, no garbage
        assert [d for _, d in entries] == [_payload(j) for j in range(len(entries))]
        positions = [p for p, _ in entries]
        for j, pos in acked_total.items():
            assert j < len(entries), f"acknowledged entry {j} lost"
            assert positions[j] == pos
