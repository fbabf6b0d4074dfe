"""docs/internals.md's "## Layout" section names every module of src/magnetar, and only modules
that exist, so it cannot go stale either way."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "magnetar"
HEADING = "## Layout: one line per module"


def layout_section() -> str:
    text = (ROOT / "docs" / "internals.md").read_text()
    assert HEADING in text, f"docs/internals.md has no {HEADING!r} section"
    return text.split(HEADING, 1)[1].split("\n## ", 1)[0]


def named_paths() -> set[str]:
    return set(re.findall(r"`((?:\w+/)*\w+\.py)`", layout_section()))


def modules() -> set[str]:
    return {
        path.relative_to(SRC).as_posix()
        for path in SRC.rglob("*.py")
        if path.name != "__init__.py" and not path.name.endswith("_pb2.py")
    }


def test_every_module_is_listed() -> None:
    assert sorted(modules() - named_paths()) == []


def test_every_listed_module_exists() -> None:
    assert sorted(p for p in named_paths() if not (SRC / p).is_file()) == []
