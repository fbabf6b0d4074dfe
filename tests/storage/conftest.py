"""Shared fixtures for the storage tests: a factory over a fresh tmp_path."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.storage import ManagedLedgerFactory, StorageConfig


@pytest.fixture
def make_factory(tmp_path: Path) -> Iterator[Callable[..., ManagedLedgerFactory]]:
    """Build factories on ``tmp_path/data`` (closed at teardown)."""
    made: list[ManagedLedgerFactory] = []

    def make(**kw: Any) -> ManagedLedgerFactory:
        kw.setdefault("data_dir", tmp_path / "data")
        f = ManagedLedgerFactory(StorageConfig(**kw))
        made.append(f)
        return f

    yield make
    for f in made:
        f.close()
