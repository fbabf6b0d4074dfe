"""One record per transaction in the metadata store, changed by compare-and-set (a
broker alone keeps the same records in its own log: `txnlog.py`; `TxnStore` is what both
offer the coordinators).

Paths: ``/magnetar/transactions/{tc}/txn/{sequence}`` holds a transaction's JSON record
(state, deadline, partitions, subscriptions); ``/magnetar/transactions/{tc}/sequence`` is
the coordinator's id counter, taken in blocks (`IdBlocks`), so a coordinator that moves
to another broker never hands out an id twice. A record's version (the store's ``Stat``)
is what every change is conditioned on: a stale owner's write fails with
`BadVersionError` instead of overwriting the new owner's.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from magnetar.metadata import BadVersionError, IdBlocks, MetadataStore, NotFoundError

ROOT = "/magnetar/transactions"

OPEN = "OPEN"
COMMITTING = "COMMITTING"
COMMITTED = "COMMITTED"
ABORTING = "ABORTING"
ABORTED = "ABORTED"
TIMEOUT = "TIMEOUT"  # never stored: a timed-out transaction is ABORTING, then ABORTED
ENDING = (COMMITTING, ABORTING)
ENDED = (COMMITTED, ABORTED)


@dataclass
class TxnRecord:
    """A transaction as stored (``version``: the store's, -1 before it is created)."""

    tc: int
    seq: int
    state: str = OPEN
    opened_ms: int = 0
    timeout_ms: int = 0
    deadline_ms: int = 0
    partitions: list[str] = field(default_factory=list)
    subscriptions: list[tuple[str, str]] = field(default_factory=list)
    ended_ms: int = 0
    timed_out: bool = False
    owner: str = ""  # the role that opened it ("" without authentication)
    version: int = -1

    def changed(self, **changes: Any) -> TxnRecord:
        """A copy with ``changes`` (what `dataclasses.replace` does, without its
        per-call field introspection: records change at every coordinator command)."""
        new = object.__new__(TxnRecord)
        new.__dict__.update(self.__dict__)
        new.__dict__.update(changes)
        return new

    @property
    def txn_id(self) -> str:
        return f"({self.tc},{self.seq})"

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "openedMs": self.opened_ms, "timeoutMs": self.timeout_ms,
                "deadlineMs": self.deadline_ms, "partitions": self.partitions,
                "subscriptions": [list(s) for s in self.subscriptions],
                "endedMs": self.ended_ms, "timedOut": self.timed_out, "ownerRole": self.owner}

    @staticmethod
    def from_json(tc: int, seq: int, data: dict[str, Any], version: int) -> TxnRecord:
        return TxnRecord(
            tc, seq, str(data.get("state", OPEN)), int(data.get("openedMs", 0)),
            int(data.get("timeoutMs", 0)), int(data.get("deadlineMs", 0)),
            [str(p) for p in data.get("partitions", [])],
            [(str(s[0]), str(s[1])) for s in data.get("subscriptions", [])],
            int(data.get("endedMs", 0)), bool(data.get("timedOut", False)),
            str(data.get("ownerRole", "")), version)


def txn_path(tc: int, seq: int) -> str:
    return f"{ROOT}/{tc}/txn/{seq}"


class IdCounter(Protocol):
    """A coordinator's id counter: blocks of ids never handed out twice (`IdBlocks`)."""

    async def reserve(self, count: int, floor: int = 0) -> int: ...


class TxnStore(Protocol):
    """Where coordinators keep their records: `TxnRecords` (a metadata store) or
    `TxnLog` (a broker alone; ``inline``: it is an `InlineTxnStore`)."""

    inline: bool

    def counter(self, tc: int) -> IdCounter: ...

    async def create(self, rec: TxnRecord) -> None: ...

    async def update(self, rec: TxnRecord) -> None: ...

    async def get(self, tc: int, seq: int) -> TxnRecord | None: ...

    async def load(self, tc: int) -> list[TxnRecord]: ...

    async def delete(self, rec: TxnRecord) -> None: ...


class InlineTxnStore(TxnStore, Protocol):
    """A store that writes at once, on the caller's thread (`TxnLog`): its writes have
    plain (not awaited) forms, so that a coordinator's commands run without an await."""

    def reserve(self, tc: int, count: int, floor: int = 0) -> int:
        """The first of ``count`` ids of coordinator ``tc`` nobody took (at least
        ``floor``), stored as taken."""
        ...

    def create_now(self, rec: TxnRecord) -> None:
        """`create`, written before it returns."""
        ...

    def update_now(self, rec: TxnRecord) -> None:
        """`update`, written before it returns."""
        ...


class TxnRecords:
    """The transaction records of every coordinator in one metadata store."""

    inline = False

    def __init__(self, store: MetadataStore) -> None:
        self.store = store

    def counter(self, tc: int) -> IdBlocks:
        return IdBlocks(self.store, f"{ROOT}/{tc}/sequence")

    async def create(self, rec: TxnRecord) -> None:
        stat = await self.store.put(txn_path(rec.tc, rec.seq), encode_record(rec), -1)
        rec.version = stat.version

    async def update(self, rec: TxnRecord) -> None:
        """Store ``rec`` if the stored one is still at ``rec.version`` (`BadVersionError`)."""
        stat = await self.store.put(txn_path(rec.tc, rec.seq), encode_record(rec), rec.version)
        rec.version = stat.version

    async def get(self, tc: int, seq: int) -> TxnRecord | None:
        got = await self.store.get(txn_path(tc, seq))
        if got is None:
            return None
        return TxnRecord.from_json(tc, seq, json.loads(got[0]), got[1].version)

    async def load(self, tc: int) -> list[TxnRecord]:
        """Every stored transaction of coordinator ``tc``."""
        out = []
        for name in await self.store.get_children(f"{ROOT}/{tc}/txn"):
            try:
                rec = await self.get(tc, int(name))
            except ValueError:
                continue
            if rec is not None:
                out.append(rec)
        return out

    async def delete(self, rec: TxnRecord) -> None:
        with contextlib.suppress(NotFoundError, BadVersionError):
            await self.store.delete(txn_path(rec.tc, rec.seq), rec.version)


#: JSON's own string escaping (C): a record is written with it by hand below, since an
#: encoder call builds its C encoder anew each time (a third of a record write's CPU)
_string = json.encoder.encode_basestring_ascii


def encode_record(rec: TxnRecord) -> bytes:
    """``rec.to_json()`` as compact JSON (what ``json.dumps`` with ``separators=(",",
    ":")`` writes, byte for byte)."""
    partitions = ",".join([_string(p) for p in rec.partitions])
    subs = ",".join([f"[{_string(t)},{_string(s)}]" for t, s in rec.subscriptions])
    return (f'{{"state":{_string(rec.state)},"openedMs":{int(rec.opened_ms)},'
            f'"timeoutMs":{int(rec.timeout_ms)},"deadlineMs":{int(rec.deadline_ms)},'
            f'"partitions":[{partitions}],"subscriptions":[{subs}],'
            f'"endedMs":{int(rec.ended_ms)},"timedOut":{"true" if rec.timed_out else "false"},'
            f'"ownerRole":{_string(rec.owner)}}}').encode()
