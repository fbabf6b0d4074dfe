"""The one duration parser (``magnetar.broker.config.durations``), and that both of its
users, ``magnetar tokens`` and the admin CLI, read durations the same way through it."""

from __future__ import annotations

import argparse

import pytest

from magnetar.broker.config.durations import parse_duration
from magnetar.cli import admin_ops, tokens


@pytest.mark.parametrize("text, seconds", [
    ("90", 90), ("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("2w", 14 * 86400),
    ("1y", 365 * 86400), (" 5 M ", 300), ("3H", 10800),
])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds
    assert tokens.parse_duration(text) == seconds  # what `tokens create --expiry-time` reads
    assert admin_ops.seconds(text) == seconds  # what the admin CLI's --time/--messageTTL read


@pytest.mark.parametrize("text", ["soon", "", "1.5h", "1x", "h", "--1"])
def test_bad_durations_say_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="examples"):
        parse_duration(text)
    with pytest.raises(argparse.ArgumentTypeError, match="examples"):
        admin_ops.seconds(text)


def test_negative_only_where_allowed() -> None:
    with pytest.raises(ValueError):
        parse_duration("-1")  # an expiry of -1 s means nothing
    assert parse_duration("-1", allow_negative=True) == -1
    assert admin_ops.seconds("-1") == -1  # retention: unlimited, as pulsar-admin takes it
