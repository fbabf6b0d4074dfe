"""Geo-replication after a silent network cut: how long after the heal replication resumes.

Clusters A and B are ``magnetar standalone`` brokers on two network namespaces
(tests/replication/geobed.py, root needed) with the default keep-alive
(``keepAliveIntervalSeconds``, 30 s, unless ``--keepalive``). For each cut length, on a
fresh topic: a message replicated (the link up), then every packet between the hosts
dropped both ways (iptables) for the cut while A's producer sends one message a second,
then the heal. Reported per cut: when A's stats first said ``connected: false`` (after the
cut began), and the resume time: from the heal to the first message B received after it,
and to the last message sent during the cut; messages lost and received twice.

    sudo PYTHONPATH=src:. .venv/bin/python bench/replication_cut_bench.py --cuts 30 60 120
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pulsar

from tests.netbed import NetBed, netbed_missing_reason
from tests.replication.geobed import QUIET, Receiver, Standalone, replication, setup_geo

NS = "geo/cut"


def one_cut(a: Standalone, b: Standalone, cut_s: float) -> dict[str, float | None]:
    topic = f"persistent://{NS}/cut-{uuid.uuid4().hex[:8]}"
    receiver = Receiver(b, topic)
    arrived: dict[bytes, float] = {}
    stop = threading.Event()
    sent: list[bytes] = []

    def produce() -> None:
        client = pulsar.Client(a.url, operation_timeout_seconds=30, logger=QUIET)
        try:
            producer = client.create_producer(topic, batching_enabled=False)
            i = 0
            while not stop.is_set():
                payload = b"m-%d" % i
                producer.send(payload)
                sent.append(payload)
                i += 1
                stop.wait(1.0)
        finally:
            client.close()

    def receive() -> None:
        consumer = receiver._consumer
        while not stop.is_set() or len(arrived) < len(sent):
            try:
                msg = consumer.receive(timeout_millis=500)
            except pulsar.Timeout:
                if stop.is_set() and time.monotonic() - last[0] > 120:
                    return
                continue
            last[0] = time.monotonic()
            if msg.data() in arrived:
                repeated[0] += 1
            arrived.setdefault(msg.data(), time.monotonic())
            consumer.acknowledge(msg)

    last = [time.monotonic()]
    repeated = [0]
    producer_thread = a.host.thread(produce, "producer")
    receiver_thread = threading.Thread(target=receive, daemon=True)
    receiver_thread.start()
    deadline = time.monotonic() + 60
    while not arrived and time.monotonic() < deadline:
        time.sleep(0.2)
    assert arrived, "nothing replicated before the cut"

    cut_at = time.monotonic()
    a.host.cut_from(b.host)
    dead_at: float | None = None
    try:
        while time.monotonic() - cut_at < cut_s:
            if dead_at is None and not replication(a, topic, "B").get("connected", True):
                dead_at = time.monotonic()
            time.sleep(0.5)
        during = list(sent)
    finally:
        a.host.heal()
    healed = time.monotonic()
    connected_at: float | None = None
    while time.monotonic() - healed < 300:
        if connected_at is None and replication(a, topic, "B").get("connected"):
            connected_at = time.monotonic()
        if all(p in arrived for p in during) and any(t > healed for t in arrived.values()):
            break
        time.sleep(0.2)
    stop.set()
    producer_thread.join(60)
    receiver_thread.join(150)
    receiver.close()
    after = [t for t in arrived.values() if t > healed]
    last_of_cut = max((arrived[p] for p in during if p in arrived), default=None)
    return {
        "cut_s": cut_s,
        "noticed_after_cut_s": None if dead_at is None else round(dead_at - cut_at, 1),
        "connected_after_heal_s": None if connected_at is None else round(connected_at - healed, 1),
        "first_after_heal_s": round(min(after) - healed, 1) if after else None,
        "cut_backlog_in_after_heal_s": (None if last_of_cut is None or last_of_cut < healed
                                        else round(last_of_cut - healed, 1)),
        "lost": float(len([p for p in sent if p not in arrived])),
        "received_twice": float(repeated[0]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cuts", type=float, nargs="+", default=[30, 60, 120])
    parser.add_argument("--keepalive", type=int, default=0,
                        help="keepAliveIntervalSeconds of both brokers (0: the default)")
    args = parser.parse_args()
    reason = netbed_missing_reason()
    if reason:
        raise SystemExit(reason)
    extra = {"keepAliveIntervalSeconds": str(args.keepalive)} if args.keepalive else {}
    with tempfile.TemporaryDirectory() as tmp, NetBed(Path(tmp)) as bed:
        a = Standalone(bed, bed.add_host("a"), "A", extra).start()
        b = Standalone(bed, bed.add_host("b"), "B", extra).start()
        setup_geo(a, b, NS)
        for cut in args.cuts:
            print(json.dumps(one_cut(a, b, cut)), flush=True)


if __name__ == "__main__":
    main()
