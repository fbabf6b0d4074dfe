"""`ColdSpan` and `read_span`: a run of a segment's records read off the event loop (a
``readers`` thread) with a descriptor of its own, its records checked; what a ledger's
cold reads hand to the thread (`ledger/reads.py`), made by `Segment.span`."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, overload

from . import record
from .errors import CorruptEntryError


@dataclass(frozen=True, slots=True)
class ColdSpan:
    """A run of records to read off the event loop: the file, its ledger id, the first
    entry id and the record offsets (one more than entries). ``read_span`` reads it."""

    path: str
    ledger_id: int
    first: int
    offsets: list[int]


@overload
def read_span(span: ColdSpan, views: Literal[False] = ...) -> list[bytes]: ...
@overload
def read_span(span: ColdSpan, views: Literal[True]) -> list[memoryview]: ...
def read_span(span: ColdSpan, views: bool = False) -> list[bytes] | list[memoryview]:
    """Read and check the records of ``span`` with a descriptor of its own (worker thread:
    no shared state is touched, so the LRU may close the segment's descriptor meanwhile).
    Stops before a corrupt record, raising ``CorruptEntryError`` if it is the first; a
    file that is gone (trimmed meanwhile) reads as nothing.

    The span is read with one pread into one buffer; with ``views`` each payload is a
    read-only ``memoryview`` of that buffer (no copy per record: a dispatcher hands them
    to the socket as they are), else a ``bytes`` copy of its own."""
    offs = span.offsets
    base = offs[0]
    try:
        fd = os.open(span.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return []
    try:
        size = offs[-1] - base
        buf = os.pread(fd, size, base)
        while len(buf) < size:
            more = os.pread(fd, size - len(buf), base + len(buf))
            if not more:
                raise CorruptEntryError(f"{span.path}: short read at {base + len(buf)}")
            buf += more
    finally:
        os.close(fd)
    mv = memoryview(buf)
    out: list[memoryview] = []
    unpack = record.HEADER.unpack_from
    hs = record.HEADER_SIZE
    verify = record.verify
    for k in range(len(offs) - 1):
        start = offs[k] - base
        end = offs[k + 1] - base
        word, crc = unpack(mv, start)
        payload = mv[start + hs : end]
        if not verify(word, crc, payload):
            if out:
                break
            raise CorruptEntryError(
                f"{span.path}: entry {span.first + k} fails its checksum",
                (span.ledger_id, span.first + k),
            )
        out.append(payload)
    if views:
        return out
    return [v.tobytes() for v in out]
