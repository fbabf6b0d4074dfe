"""The descriptor limit shared out, and EMFILE/ENFILE recognised (storage/descriptors.py)."""

from __future__ import annotations

import errno
import logging

import pytest

from magnetar.storage import StorageError
from magnetar.storage.descriptors import (
    UNLIMITED,
    DescriptorAlarm,
    out_of_descriptors,
    plan_descriptors,
)


def test_plan_shares_a_low_limit():
    plan = plan_descriptors(256, max_open_files=512, max_http_connections=2048, reserve=64)
    assert plan.open_files == 96  # half of what the reserve leaves, not the configured 512
    assert plan.connections + plan.http_connections + plan.open_files + 64 <= 256
    assert plan.connections >= 48 and plan.http_connections >= 1


def test_plan_keeps_the_configured_cap_under_a_high_limit():
    plan = plan_descriptors(1_048_576, max_open_files=512, max_http_connections=2048)
    assert plan.open_files == 512
    assert plan.http_connections == 2048
    assert plan.connections > 500_000
    unlimited = plan_descriptors(UNLIMITED, 512, 0)
    assert unlimited.connections == UNLIMITED and unlimited.open_files == 512


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE])
def test_out_of_descriptors_anywhere_in_the_chain(code):
    try:
        try:
            raise OSError(code, "Too many open files")
        except OSError as exc:
            raise StorageError("cannot open segment") from exc
    except StorageError as wrapped:
        assert out_of_descriptors(wrapped)
    assert not out_of_descriptors(OSError(errno.ENOSPC, "No space left on device"))
    assert not out_of_descriptors(ValueError("x"))


def test_alarm_logs_once_per_interval(caplog):
    alarm = DescriptorAlarm(interval=3600)
    with caplog.at_level(logging.WARNING, logger="magnetar.storage.descriptors"):
        messages = [alarm.raised("opening a topic") for _ in range(5)]
    assert all(m.startswith("too many open files (limit ") for m in messages)
    lines = [r for r in caplog.records if "too many open files" in r.getMessage()]
    assert len(lines) == 1 and "Raise the limit" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records)
    assert alarm.count == 5
