"""`ManagedLedger.append_then`: callbacks instead of futures, and `after_appends` once per
completed batch, for every fsync policy and on failures."""

from __future__ import annotations

import asyncio
import errno
import os
from typing import Any

import pytest

from magnetar.storage import LedgerClosedError, Position, StorageError

from .storage_testlib import run


class Outcomes:
    """Records each callback's outcome and each `after_appends` call, in order."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    def callback(self, tag: int) -> Any:
        def on_done(pos: Position | None, exc: BaseException | None) -> None:
            self.events.append((tag, pos, exc))

        return on_done

    def after(self) -> None:
        self.events.append("after")

    def outcomes(self) -> list[Any]:
        return [e for e in self.events if e != "after"]


async def settle(ml: Any, outcomes: Outcomes, n: int) -> None:
    """Wait (bounded) until ``n`` callbacks were called."""
    for _ in range(2000):
        if len(outcomes.outcomes()) >= n:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"only {len(outcomes.outcomes())} of {n} callbacks were called")


@pytest.mark.parametrize("policy", ["group", "always", "never"])
def test_callbacks_get_positions_in_order_then_one_after_appends(make_factory, policy):
    f = make_factory(fsync=policy)
    ml = f.open("t")
    seen = Outcomes()
    ml.after_appends = seen.after

    async def go() -> None:
        for i in range(20):
            ml.append_then(b"entry-%d" % i, seen.callback(i))
        await settle(ml, seen, 20)

    run(go())
    outcomes = seen.outcomes()
    assert [tag for tag, _, _ in outcomes] == list(range(20))
    assert all(exc is None for _, _, exc in outcomes)
    positions = [pos for _, pos, _ in outcomes]
    assert positions == [Position(positions[0].ledger_id, i) for i in range(20)]
    assert [ml.read(p) for p in positions] == [b"entry-%d" % i for i in range(20)]
    # after_appends follows the callbacks of each completed batch, never precedes them
    assert seen.events[-1] == "after"
    assert seen.events[0] != "after"
    if policy == "always":  # every append is its own batch
        assert seen.events.count("after") == 20
    else:  # appends of one loop turn complete together
        assert seen.events.count("after") < 20


def test_a_failing_callback_does_not_keep_the_others_from_their_outcome(make_factory, caplog):
    f = make_factory()
    ml = f.open("t")
    seen = Outcomes()
    ml.after_appends = seen.after

    def broken(pos: Position | None, exc: BaseException | None) -> None:
        raise RuntimeError("owner bug")

    async def go() -> None:
        ml.append_then(b"a", seen.callback(0))
        ml.append_then(b"b", broken)
        ml.append_then(b"c", seen.callback(2))
        await settle(ml, seen, 2)

    run(go())
    assert [tag for tag, _, _ in seen.outcomes()] == [0, 2]
    assert seen.events[-1] == "after"
    assert "owner bug" in caplog.text


def test_a_closed_ledger_fails_the_callback_at_once(make_factory):
    f = make_factory()
    ml = f.open("t")
    seen = Outcomes()
    ml.after_appends = seen.after

    async def go() -> None:
        ml.close()
        ml.append_then(b"late", seen.callback(0))

    run(go())
    [(_tag, pos, exc)] = seen.outcomes()
    assert pos is None and isinstance(exc, LedgerClosedError)
    assert seen.events[-1] == "after"


def test_a_failed_write_fails_callbacks_in_order_and_futures_alike(make_factory, monkeypatch):
    real = os.pwritev
    armed = {"left": 0}

    def failing(*args: Any) -> int:
        if armed["left"] > 0:
            armed["left"] -= 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(*args)

    monkeypatch.setattr(os, "pwritev", failing)
    f = make_factory()
    ml = f.open("t")
    seen = Outcomes()
    ml.after_appends = seen.after

    async def go() -> Any:
        armed["left"] = 1
        ml.append_then(b"x", seen.callback(0))
        fut = ml.append(b"y")  # a future waiter in the same batch
        ml.append_then(b"z", seen.callback(2))
        await settle(ml, seen, 2)
        with pytest.raises(StorageError):
            await fut
        # the ledger goes on: the next append succeeds
        ml.append_then(b"after", seen.callback(3))
        await settle(ml, seen, 3)

    run(go())
    outcomes = seen.outcomes()
    assert [tag for tag, _, _ in outcomes] == [0, 2, 3]
    assert all(pos is None and isinstance(exc, StorageError) for _, pos, exc in outcomes[:2])
    assert outcomes[2][1] is not None and outcomes[2][2] is None
    assert ml.read(outcomes[2][1]) == b"after"
