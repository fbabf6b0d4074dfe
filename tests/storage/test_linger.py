"""`append_then`'s ``linger_s``: an entry that may wait in the write buffer for the next
append (a transaction's marker) is written, synced and completed with that append's
batch, or alone once its time is up, or when the ledger closes; never confirmed before
it is durable."""

from __future__ import annotations

import asyncio
from typing import Any

from magnetar.storage import Position

from .storage_testlib import run
from .test_append_then import Outcomes, settle


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_lingering_entry_waits_for_the_next_append_and_shares_its_batch(make_factory: Any) -> None:
    f = make_factory(fsync="group")
    ml = f.open("t")
    seen = Outcomes()
    ml.after_appends = seen.after

    async def go() -> None:
        ml.append_then(b"plain-0", seen.callback(0))
        await settle(ml, seen, 1)
        before = ml.last_confirmed()
        ml.append_then(b"marker", seen.callback(1), linger_s=60.0)
        await turns()
        assert seen.outcomes()[1:] == []  # not written, not confirmed
        assert ml.last_confirmed() == before
        ml.append_then(b"plain-2", seen.callback(2))
        await settle(ml, seen, 3)

    run(go())
    outcomes = seen.outcomes()
    assert [tag for tag, _, _ in outcomes] == [0, 1, 2]
    assert all(exc is None for _, _, exc in outcomes)
    positions = [pos for _, pos, _ in outcomes]
    assert positions == [Position(positions[0].ledger_id, i) for i in range(3)]
    assert [ml.read(p) for p in positions] == [b"plain-0", b"marker", b"plain-2"]
    # the marker and the next append were one batch: one after_appends for both
    assert seen.events == [outcomes[0], "after", outcomes[1], outcomes[2], "after"]


def test_a_lingering_entry_is_written_alone_once_its_time_is_up(make_factory: Any) -> None:
    f = make_factory(fsync="group")
    ml = f.open("t")
    seen = Outcomes()

    async def go() -> None:
        ml.append_then(b"marker", seen.callback(0), linger_s=0.02)
        await settle(ml, seen, 1)

    run(go())
    [(_, pos, exc)] = seen.outcomes()
    assert exc is None and ml.read(pos) == b"marker"
    assert ml.last_confirmed() == pos


def test_closing_the_ledger_stores_a_lingering_entry(make_factory: Any) -> None:
    f = make_factory(fsync="group")
    ml = f.open("t")
    seen = Outcomes()

    async def go() -> None:
        ml.append_then(b"marker", seen.callback(0), linger_s=60.0)
        await turns()
        ml.close()
        await settle(ml, seen, 1)

    run(go())
    [(_, pos, exc)] = seen.outcomes()
    assert exc is None
    f.close()
    again = make_factory(fsync="group").open("t")
    assert again.read(pos) == b"marker"


def test_a_timer_armed_for_an_entry_written_early_lets_the_next_one_linger_its_time(
        make_factory: Any) -> None:
    """The linger timer is not cancelled when an append takes a lingering entry along: it
    fires at the old entry's time, and a newer lingering entry still waits its own time."""
    f = make_factory(fsync="group")
    ml = f.open("t")
    seen = Outcomes()
    confirmed_at: dict[int, float] = {}

    def callback(tag: int) -> Any:
        inner = seen.callback(tag)

        def done(pos: Any, exc: Any) -> None:
            confirmed_at[tag] = asyncio.get_running_loop().time()
            inner(pos, exc)

        return done

    async def go() -> None:
        loop = asyncio.get_running_loop()
        ml.append_then(b"marker-a", callback(0), linger_s=0.2)
        first_until = loop.time() + 0.2
        ml.append_then(b"plain", callback(1))  # takes marker-a along
        await settle(ml, seen, 2)
        while loop.time() < first_until - 0.1:
            await asyncio.sleep(0.01)
        ml.append_then(b"marker-b", callback(2), linger_s=0.2)
        second_until = loop.time() + 0.2
        while loop.time() < first_until + 0.03:  # the timer armed for marker-a fired
            await asyncio.sleep(0.01)
        if loop.time() < second_until - 0.02:  # (unless this machine stalled meanwhile)
            assert [tag for tag, _, _ in seen.outcomes()] == [0, 1]
        await settle(ml, seen, 3)
        assert confirmed_at[2] >= second_until - 0.002

    run(go())
    assert [ml.read(pos) for _, pos, _ in seen.outcomes()] == [b"marker-a", b"plain", b"marker-b"]
