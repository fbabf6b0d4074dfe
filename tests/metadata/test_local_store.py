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
