#!/usr/bin/env python3
"""What the official client waits when the host of its topic's owner goes away for good
(issue 38): on the partition bed (tests/netbed.py: ZooKeeper on ``zk``, brokers on ``b1``
and ``b2`` sharing a directory, the client on ``client``), a producer sends 50 messages/s
with ``send_async`` (the official client's defaults otherwise: a 30 s send timeout); the
owner's host loses its link and its broker is killed, and the link never comes back.
Figures: the longest time between two acknowledged sends around the fault, and the sends
that failed, for each setting given: the official client's defaults (its Python API has
no keep-alive setting: 30 s, so a silent connection is given up after 30-60 s), then
docs/deploy.md's recommendation for client hosts, ``net.ipv4.tcp_retries2=5`` (the
kernel gives up a connection whose sends go unanswered after ~6-13 s instead of ~15
minutes; set here in the client host's namespace only). The brokers run docs/deploy.md's
session timeout (10 s). Needs root, as the bed does.

    sudo PYTHONPATH=src .venv/bin/python bench/host_down_bench.py --rounds 2
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar

from tests.netbed import Host, NetBed, NsBroker, NsZooKeeper, netbed_missing_reason

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)

#: settings measured: (the client's keyword arguments, the client host's sysctls)
SETTINGS: dict[str, tuple[dict[str, Any], dict[str, str]]] = {
    "defaults": ({}, {}),
    "tcp_retries2=5": ({}, {"net.ipv4.tcp_retries2": "5"}),
}


class Sender:
    """A producer on ``host`` sending 50 messages/s until `stop`; ack times recorded."""

    def __init__(self, host: Host, url: str, topic: str, client_settings: dict[str, Any]) -> None:
        self.acks: list[float] = []
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._done = threading.Event()
        self._args = (url, topic, client_settings)
        host.thread(self._run, "sender")

    def _run(self) -> None:
        url, topic, settings = self._args
        client = pulsar.Client(url, logger=QUIET, **settings)
        try:
            producer = client.create_producer(topic, producer_name="bench",
                                              batching_enabled=False)
            for i in itertools.count():
                if self._stop.is_set():
                    break

                def done(res: pulsar.Result, _mid: object) -> None:
                    if res == pulsar.Result.Ok:
                        self.acks.append(time.monotonic())
                    else:
                        self.failed.append(str(res))

                producer.send_async(f"m{i}".encode(), done)
                self._stop.wait(0.02)
            producer.flush()
        except Exception as exc:
            self.failed.append(repr(exc))
        finally:
            client.close()
            self._done.set()

    def acks_after(self, t: float) -> int:
        return sum(1 for a in list(self.acks) if a > t)

    def stop(self) -> None:
        self._stop.set()
        self._done.wait(120)


def owner_of(client_host: Host, web_url: str, topic: str) -> str:
    import urllib.request

    def ask() -> str:
        with urllib.request.urlopen(
                f"{web_url}/lookup/v2/topic/{topic.replace('://', '/')}", timeout=30) as resp:
            return str(json.loads(resp.read())["brokerUrl"])
    return client_host.call(ask)


def one_round(net: NetBed, root: Path, name: str, settings: dict[str, Any],
              sysctls: dict[str, str]) -> dict[str, Any]:
    client_host = net.hosts["client"]
    before = {k: client_host.sh("sysctl", "-n", k).stdout.strip() for k in sysctls}
    for key, value in sysctls.items():
        client_host.sh("sysctl", "-w", f"{key}={value}")
    try:
        return _round(net, root, name, settings)
    finally:
        for key, value in before.items():
            client_host.sh("sysctl", "-w", f"{key}={value}")


def _round(net: NetBed, root: Path, name: str, settings: dict[str, Any]) -> dict[str, Any]:
    zk = net.zookeeper
    assert zk is not None
    name = f"{name}-{time.monotonic_ns()}"
    shared = root / name / "shared"
    shared.mkdir(parents=True)
    extra = {"magnetarSharedStorage": "true", "brokerDeduplicationEnabled": "true",
             "metadataStoreSessionTimeoutMillis": "10000"}
    brokers = [NsBroker(net, net.hosts[h], root / name / h, zk.url(f"/{name}"), extra, shared)
               for h in ("b1", "b2")]
    for b in brokers:
        b.start(timeout=90)
    url = "pulsar://" + ",".join(f"{b.host.address}:{b.port}" for b in brokers)
    topic = f"persistent://public/default/down-{name}"
    sender = Sender(net.hosts["client"], url, topic, settings)
    try:
        deadline = time.monotonic() + 180  # (a host just plugged back may take a while)
        while sender.acks_after(0) < 50:
            assert time.monotonic() < deadline, f"no load: {sender.failed[-3:]}"
            time.sleep(0.1)
        owner_url = owner_of(net.hosts["client"], brokers[0].web_url, topic)
        owner = next(b for b in brokers if b.url == owner_url)
        faulted = time.monotonic()
        owner.host.link_down()  # the host gone for good: never brought back
        owner.kill()
        deadline = faulted + 180
        while sender.acks_after(faulted + 1) < 100 and time.monotonic() < deadline:
            time.sleep(0.2)
        times = sorted(a for a in sender.acks if a > faulted - 1)
        gap = max((b - a for a, b in itertools.pairwise(times)), default=None)
        errors: dict[str, int] = {}
        for e in sender.failed:
            errors[e] = errors.get(e, 0) + 1
        return {"settings": name, "client": settings,
                "longest_wait_s": None if gap is None else round(gap, 2),
                "resumed": sender.acks_after(faulted + 1) >= 100, "failed_sends": errors}
    finally:
        sender.stop()
        for b in brokers:
            b.host.link_up()
            b.stop(timeout=15)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--settings", nargs="*", default=list(SETTINGS), choices=list(SETTINGS))
    args = parser.parse_args()
    reason = netbed_missing_reason()
    if reason:
        sys.exit(f"cannot build the bed: {reason}")
    with tempfile.TemporaryDirectory(prefix="host-down-") as tmp:
        root = Path(tmp)
        with NetBed(root) as net:
            zk_host = net.add_host("zk")
            for name in ("b1", "b2", "client"):
                net.add_host(name)
            net.zookeeper = NsZooKeeper(net, zk_host, root / "zookeeper").start()
            for r in range(args.rounds):
                for name in args.settings:
                    report = one_round(net, root, f"r{r}", *SETTINGS[name])
                    report["settings"] = name
                    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
