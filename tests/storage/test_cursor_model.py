"""Property test: the cursor agrees with a plain set-of-acknowledged-positions model."""

from __future__ import annotations

import asyncio
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from magnetar.storage import ManagedLedgerFactory, StorageConfig

N = 23  # entries, in segments of 5 (entry ids restart in each segment)

ops = st.lists(
    st.one_of(
        st.tuples(st.just("delete"), st.lists(st.integers(0, N - 1), max_size=6)),
        st.tuples(st.just("mark"), st.integers(-1, N - 1)),
        st.tuples(st.just("batch"), st.integers(0, N - 1), st.integers(0, 15)),
        st.tuples(st.just("reopen")),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_cursor_matches_model(operations):
    with tempfile.TemporaryDirectory() as d:
        f = ManagedLedgerFactory(StorageConfig(d, segment_max_entries=5, fsync="never"))
        ml = f.open("t")

        async def fill():
            return await asyncio.gather(*(ml.append(b"%d" % i) for i in range(N)))

        pos = asyncio.run(fill())
        c = ml.open_cursor("c", "earliest")
        acked: set[int] = set()
        batch: dict[int, int] = {}
        for op in operations:
            if op[0] == "delete":
                c.delete([pos[i] for i in op[1]])
                acked.update(op[1])
                for i in op[1]:
                    batch.pop(i, None)
            elif op[0] == "mark":
                if op[1] >= 0:
                    c.mark_delete(pos[op[1]])
                    acked.update(range(op[1] + 1))
                    for i in range(op[1] + 1):
                        batch.pop(i, None)
            elif op[0] == "batch":
                i, bits = op[1], op[2]
                c.set_batch_ack(pos[i], [bits])
                if i not in acked:
                    batch[i] = batch.get(i, 0b1111) & bits
                    if batch[i] == 0:
                        del batch[i]
                        acked.add(i)
            else:
                f.close()
                f = ManagedLedgerFactory(StorageConfig(d, segment_max_entries=5, fsync="never"))
                ml = f.open("t")
                c = ml.cursors()["c"]
            # the model's view
            assert [c.is_deleted(p) for p in pos] == [i in acked for i in range(N)]
            assert c.backlog() == N - len(acked)
            unacked = [i for i in range(N) if i not in acked]
            assert list(c.unacked_positions()) == [pos[i] for i in unacked]
            md = 0
            while md in acked:
                md += 1
            assert c.mark_delete_position == (pos[md - 1] if md else c.mark_delete_position)
            if md == 0:
                assert c.mark_delete_position < pos[0]
            assert {p: w[0] & 0b1111 for p, w in c.batch_ack_sets.items()} == {
                pos[i]: b for i, b in batch.items()
            }
            # ranges are merged: no two ranges are adjacent
            for (_, e1), (s2, _) in zip(
                c.individually_deleted, c.individually_deleted[1:], strict=False
            ):
                assert ml.next_position(e1) != s2
        f.close()
