"""`OpenTxn`: a transaction's entries on a topic, kept as entry ids per ledger."""

from __future__ import annotations

import gc
from array import array

from magnetar.broker.topics.txn_entries import OpenTxn
from magnetar.storage import Position


def test_entries_come_back_in_append_order_across_a_ledger_roll_over() -> None:
    entry = OpenTxn(Position(7, 3))
    for position in [Position(7, 3), Position(7, 5), Position(9, 0), Position(9, 2),
                     Position(11, 0)]:
        entry.add(position)
    assert entry.positions == [Position(7, 3), Position(7, 5), Position(9, 0),
                               Position(9, 2), Position(11, 0)]
    assert entry.first == Position(7, 3) and entry.ledger == 11


def test_the_entries_are_ids_in_an_array_not_objects_the_collector_walks() -> None:
    entry = OpenTxn(Position(4, 0), [Position(4, i) for i in range(1000)])
    assert isinstance(entry.ids, array) and len(entry.ids) == 1000 and not entry.earlier
    # one object, holding no Python object per entry for the collector to visit
    assert gc.get_referents(entry.ids) == [array]  # (its type alone)
    assert entry.positions[999] == Position(4, 999) and len(entry.positions) == 1000


def test_a_transaction_restored_from_a_snapshot_knows_only_its_first_entry() -> None:
    entry = OpenTxn(Position(2, 10))
    assert entry.positions == []
    entry.add(Position(2, 11))
    assert entry.positions == [Position(2, 11)]
