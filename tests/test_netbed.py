"""The partition test bed itself (tests/netbed.py): hosts reach each other and nothing
else, each fault cuts what it says and heals, a lost host's processes die, and everything
(processes, namespaces, deferred undo steps) is gone after the bed closes, also when the
test failed inside it."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.netbed import NETNS_DIR, NetBed, netbed_missing_reason


@pytest.fixture(autouse=True)
def _needs_namespaces() -> None:
    reason = netbed_missing_reason()
    if reason:
        pytest.skip(reason)


def namespaces(bed: NetBed) -> list[str]:
    return sorted(p.name for p in NETNS_DIR.iterdir() if p.name.startswith(bed.prefix + "-"))


def eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Whether ``check`` holds within ``timeout`` s (a healed link may take a moment)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_faults_cut_what_they_say_and_heal(tmp_path: Path) -> None:
    with NetBed(tmp_path) as bed:
        a, b, c = bed.add_host("a"), bed.add_host("b"), bed.add_host("c")
        servers = [h.call(socket.create_server, (h.address, 7000)) for h in (a, b, c)]
        try:
            assert a.reachable(b.address, 7000) and a.reachable(c.address, 7000)
            with socket.create_server(("127.0.0.1", 0)) as machine:  # the machine's loopback
                assert not a.reachable("127.0.0.1", machine.getsockname()[1])
            a.cut_from(b)
            assert not a.reachable(b.address, 7000) and not b.reachable(a.address, 7000)
            assert a.reachable(c.address, 7000)  # only b is cut off
            a.heal()
            assert eventually(lambda: a.reachable(b.address, 7000))
            b.link_down()
            assert not a.reachable(b.address, 7000) and not b.reachable(c.address, 7000)
            assert a.reachable(c.address, 7000)
            b.link_up()
            assert eventually(lambda: a.reachable(b.address, 7000))
        finally:
            for s in servers:
                s.close()
        proc = bed.popen(b, ["sleep", "60"], tmp_path / "sleep.log")
        other = bed.popen(c, ["sleep", "60"], tmp_path / "other.log")
        bed.lose(b)
        assert proc.wait(10) != 0 and other.poll() is None
        assert not c.reachable(b.address, 7000)


def test_everything_goes_when_the_bed_closes_after_a_failure(tmp_path: Path) -> None:
    undone: list[str] = []
    procs: list[subprocess.Popen[bytes]] = []
    with pytest.raises(RuntimeError, match="the test failed"), NetBed(tmp_path) as bed:
        host = bed.add_host("x")
        procs.append(bed.popen(host, ["sleep", "60"], tmp_path / "sleep.log"))
        bed.defer(lambda: undone.append("mount"))
        assert len(namespaces(bed)) == 2  # the switch and the host
        raise RuntimeError("the test failed")
    assert namespaces(bed) == [] and undone == ["mount"]
    assert procs[0].poll() is not None
