"""The README's configuration section names exactly the keys the broker implements."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from magnetar.broker.config import BrokerConfig

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_lists_every_implemented_key_and_no_other() -> None:
    text = README.read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z][A-Za-z]+)`", section))
    implemented = {f.name for f in dataclasses.fields(BrokerConfig) if f.name != "unknown_keys"}
    assert implemented - listed == set(), "implemented but not in the README"
    assert {k for k in listed - implemented if k[0].islower() and any(c.isupper() for c in k)} == set()
