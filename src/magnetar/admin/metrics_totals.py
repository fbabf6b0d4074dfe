"""Namespace-level ``/metrics`` totals kept between scrapes, updated by the topics that changed.

With ``exposeTopicLevelMetricsInPrometheus=false`` a scrape answers each namespace's sum of
the per-topic series. Reading every loaded topic at each scrape cost ~1-6 µs per topic
(0.7 s of CPU at 100,000 topics on a loaded machine). `NamespaceTotals` keeps, per loaded
topic, the figures it last read (its row) and, per namespace, their sums; a scrape reads
again only the topics the broker noted as changed (`broker.topics.changes`), taking each
one's old row out of its namespace's sums and putting its new one in: a scrape costs the
topics that changed (a publish, an ack, a consumer, a load or unload, a rate that moved),
not the topics loaded. A topic unloaded, deleted or replaced (the same name, another
object) is read as gone, or as the new one.

Exact by construction: the counts, sizes and counters are integers, added and taken out
exactly. The rates are floats, which adding and taking out would leave a rounding error in
(a namespace gone quiet would show 1e-12 messages/s); a namespace keeps the rates of its
topics whose rates are not all zero and sums them with ``math.fsum`` (correctly rounded,
so the sum does not depend on the order either): a scrape costs those topics too, which
are the ones that changed within the last rate sample. `recount` builds the same totals
from every loaded topic (tests compare the two).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

#: the ``TOPIC_SERIES`` values of some topics (admin/metrics.py `_gather_block`): their names
#: and one column per family, the four rates first
Gather = Callable[[list[Any]], tuple[list[str], list[list[float]]]]
#: how many of the families are rates (floats, summed with fsum); the rest are integers
RATES = 4
_RATE_COLUMNS = tuple(itemgetter(k) for k in range(RATES))


class NamespaceTotals:
    """Each namespace's sums of the per-topic series, as of the topics' last reads."""

    def __init__(self, families: int) -> None:
        self.families = families
        # topic name -> (its namespace, its integer figures as last read)
        self.rows: dict[str, tuple[Any, ...]] = {}
        self.sums: dict[str, list[int]] = {}  # namespace -> sums of the integer figures
        self.counts: dict[str, int] = {}  # namespace -> topics read in it
        # namespace -> topic name -> its rates, for the topics whose rates are not all zero
        self.rated: dict[str, dict[str, tuple[float, ...]]] = {}
        self._spaces: dict[str, str] = {}  # one string per namespace name
        self.read = 0  # topics read since the totals were made (tests, bench)

    def fold(self, names: Iterable[str], live: dict[str, Any], gather: Gather) -> None:
        """Read again the topics ``names`` (those loaded in ``live``), replacing their last
        figures in their namespaces' sums; a name no longer loaded leaves them."""
        rows, sums, counts, rated = self.rows, self.sums, self.counts, self.rated
        names = list(names)
        for name in names:
            old = rows.pop(name, None)
            if old is None:
                continue
            space = old[0]
            total = sums[space]
            for k, value in enumerate(old[1:]):
                total[k] -= value
            left = counts[space] - 1
            if left:
                counts[space] = left
                rated[space].pop(name, None)
            else:  # its last topic: the namespace leaves the exposition
                del counts[space], sums[space], rated[space]
        topics = [topic for topic in map(live.get, names) if topic is not None]
        if not topics:
            return
        self.read += len(topics)
        held, columns = gather(topics)
        figures = list(zip(*columns[RATES:], strict=True))
        rates = list(zip(*columns[:RATES], strict=True))
        spaces = self._spaces
        ints = self.families - RATES
        for name, topic, row, rate in zip(held, topics, figures, rates, strict=True):
            space = topic.topic_name.namespace
            space = spaces.setdefault(space, space)
            rows[name] = (space, *row)
            kept = sums.get(space)
            if kept is None:
                kept = sums[space] = [0] * ints
                counts[space] = 0
                rated[space] = {}
            for k, value in enumerate(row):
                kept[k] += value
            counts[space] += 1
            if any(rate):
                rated[space][name] = rate

    def table(self) -> list[tuple[str, list[float]]]:
        """(namespace, its ``TOPIC_SERIES`` totals) of every namespace with a topic read."""
        out = []
        for space, total in self.sums.items():
            kept = self.rated[space].values()
            values: list[float] = [math.fsum(map(column, kept)) for column in _RATE_COLUMNS]
            values.extend(total)
            out.append((space, values))
        return out


def recount(live: dict[str, Any], gather: Gather, families: int) -> NamespaceTotals:
    """The totals made from every topic in ``live`` at once (what the kept ones must equal)."""
    totals = NamespaceTotals(families)
    totals.fold(list(live), live, gather)
    return totals
