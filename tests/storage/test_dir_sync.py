"""`SharedDirSync`: callers that arrive while a directory sync runs share the next one, and
a caller never returns on a sync that began before it asked."""

from __future__ import annotations

import threading
import time

import pytest

from magnetar.storage.dir_sync import SharedDirSync


class GatedSync:
    """A directory sync that records each call and blocks until released (or fails)."""

    def __init__(self) -> None:
        self.calls = 0
        self.release: list[threading.Event] = []
        self.fail: set[int] = set()  # call numbers (1-based) that raise
        self.lock = threading.Lock()

    def __call__(self, path: str) -> None:
        with self.lock:
            self.calls += 1
            number = self.calls
            gate = threading.Event()
            self.release.append(gate)
        assert gate.wait(30)
        if number in self.fail:
            raise OSError(5, "Input/output error", path)


def wait_for(done, what: str) -> None:
    deadline = time.monotonic() + 30
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


def run(group: SharedDirSync, outcomes: list[object]) -> threading.Thread:
    def go() -> None:
        try:
            group.sync()
            outcomes.append("ok")
        except OSError as exc:
            outcomes.append(exc)

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("second_fails", [False, True])
def test_callers_during_a_sync_share_the_next_one(tmp_path, second_fails: bool) -> None:
    gated = GatedSync()
    if second_fails:
        gated.fail.add(2)
    group = SharedDirSync(str(tmp_path), gated)
    first: list[object] = []
    a = run(group, first)
    wait_for(lambda: gated.calls == 1, "the first sync to start")
    # three callers arrive while it runs: their entries may be newer than its start
    later: list[object] = []
    others = [run(group, later) for _ in range(3)]
    wait_for(lambda: group._waiting.get(2) == 3, "the three callers to wait")
    assert later == []
    gated.release[0].set()
    a.join(30)
    assert first == ["ok"]
    wait_for(lambda: gated.calls == 2, "the shared second sync")
    assert later == []  # nobody returned on the sync that began before it asked
    gated.release[1].set()
    for t in others:
        t.join(30)
    assert gated.calls == group.syncs == 2  # one sync for the three of them
    if second_fails:
        assert len(later) == 3 and all(isinstance(o, OSError) for o in later)
    else:
        assert later == ["ok"] * 3
    # nothing kept about finished syncs; a later caller makes its own sync
    assert group._waiting == {} and group._errors == {}
    last: list[object] = []
    t = run(group, last)
    wait_for(lambda: gated.calls == 3, "a new sync")
    gated.release[2].set()
    t.join(30)
    assert last == ["ok"]


def test_real_directory(tmp_path) -> None:
    group = SharedDirSync(str(tmp_path))
    (tmp_path / "d").mkdir()
    group.sync()
    assert group.syncs == 1
    with pytest.raises(OSError):
        SharedDirSync(str(tmp_path / "missing")).sync()
