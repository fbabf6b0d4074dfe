"""A persistent topic's next broker entry index (broker entry metadata), read from the last
stored entry when the topic is loaded: entries carry the index of their last message."""

from __future__ import annotations

from magnetar.broker.entries import entry_index_after
from magnetar.storage import ManagedLedger, StorageError


def load_entry_index(ledger: ManagedLedger) -> int:
    """The next broker entry index of a ledger (entries carry the index of their last
    message). Reads the last entry on the calling thread: for `BrokerService.get_topic`'s
    blocking load (tests, tools); topic loads use `load_entry_index_async`."""
    last = ledger.last_confirmed()
    return 0 if last is None else entry_index_after(ledger.read(last))


async def load_entry_index_async(ledger: ManagedLedger) -> int:
    """`load_entry_index`, reading the last entry from the cache or on the reader threads
    (StorageError if it cannot be read)."""
    last = ledger.last_confirmed()
    if last is None:
        return 0
    data = ledger.cached_entry(last)
    if data is None:
        read = await ledger.read_positions_cold([last])
        if not read.entries:
            raise read.failed.get(last) or StorageError(f"{ledger.name}: cannot read {last}")
        data = read.entries[0][1]
    return entry_index_after(data)
