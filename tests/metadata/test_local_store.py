"""The SQLite backend's own promises: keys survive a reopen, and ephemeral keys live only
as long as the process that made them (a crashed process's are gone at the next open)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

from magnetar.metadata import LocalMetadataStore


def test_a_crashed_process_leaves_no_ephemeral_keys(tmp_path: Path) -> None:
    db = tmp_path / "metadata.db"
    crash = textwrap.dedent(f"""
        import asyncio, os
        from magnetar.metadata import LocalMetadataStore

        async def main():
            store = LocalMetadataStore({str(db)!r})
            await store.start()
            await store.put("/kept", b"persistent")
            await store.put("/brokers/b1", b"ephemeral", ephemeral=True)
            os._exit(0)  # no close: as a crash

        asyncio.run(main())
    """)
    subprocess.run([sys.executable, "-c", crash], check=True, timeout=60)

    async def main() -> None:
        store = LocalMetadataStore(str(db))
        await store.start()
        try:
            got = await store.get("/kept")
            assert got is not None and got[0] == b"persistent" and got[1].version == 0
            assert await store.get("/brokers/b1") is None
            assert await store.get_children("/brokers") == []
        finally:
            await store.close()

    asyncio.run(main())


def test_an_inline_store_keeps_its_writes_across_a_crash(tmp_path: Path) -> None:
    """``inline=True`` (SQL on the loop, checkpoints on the store's thread): every write
    answered before the process died is there at the next open, past several checkpoints,
    and a stale version is still refused."""
    db = tmp_path / "transactions.db"
    crash = textwrap.dedent(f"""
        import asyncio, os
        from magnetar.metadata import BadVersionError, LocalMetadataStore
        from magnetar.metadata.local import INLINE_CHECKPOINT_EVERY

        async def main():
            store = LocalMetadataStore({str(db)!r}, inline=True)
            await store.start()
            stat = await store.put("/t/0/txn/1", b"v0", -1)
            for i in range(1, 2 * INLINE_CHECKPOINT_EVERY + 7):
                stat = await store.put("/t/0/txn/1", b"v%d" % i, stat.version)
                await store.put(f"/t/0/txn/k{{i}}", b"x", -1)
            try:
                await store.put("/t/0/txn/1", b"stale", 0)
            except BadVersionError:
                pass
            else:
                raise SystemExit("a stale version was accepted")
            print(stat.version, flush=True)
            os._exit(0)  # no close: as a kill -9

        asyncio.run(main())
    """)
    done = subprocess.run([sys.executable, "-c", crash], check=True, timeout=120,
                          capture_output=True, text=True)
    last = int(done.stdout.split()[-1])

    async def main() -> None:
        store = LocalMetadataStore(str(db), inline=True)
        await store.start()
        try:
            got = await store.get("/t/0/txn/1")
            assert got is not None and got[0] == b"v%d" % last and got[1].version == last
            assert len(await store.get_children("/t/0/txn")) == last + 1
        finally:
            await store.close()

    asyncio.run(main())
