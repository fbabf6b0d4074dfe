"""Geo-replication: throughput and delay from publish in cluster A to receive in cluster B,
side by side with the same load consumed in A from a topic that is not replicated.

Two `magnetar standalone` processes (clusters A and B, deduplication on) on this machine;
the official client produces in A (batching on, 1 KB messages carrying their send time)
and consumes either in A (namespace ``geo/local``, not replicated) or in B (``geo/ns``,
replicated A<->B). Phases, each on a fresh topic:

- ``steady``: ``--rate`` messages/s for ``--duration`` s; the delay of each message is its
  receive time minus its send time (same clock): p50 / p99 / max.
- ``burst``: ``--messages`` sent as fast as the client can; messages/s from the first send
  to the last message received (in B: what the replicator sustains, bounded by two brokers
  and the client sharing this machine's cores).

    python bench/replication_bench.py [--rate 2000 --duration 10 --messages 100000]
"""

from __future__ import annotations

import argparse
import json
import struct
import threading
import time
import urllib.request
import uuid

import pulsar

from magnetar.testing import StandaloneBroker, standalone

_STAMP = struct.Struct(">d")


def admin(broker: StandaloneBroker, method: str, path: str, body: object | None = None) -> None:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(broker.web_service_url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    urllib.request.urlopen(request, timeout=30).close()


def setup(local: StandaloneBroker, remote: StandaloneBroker, remote_name: str) -> None:
    admin(local, "PUT", f"/admin/v2/clusters/{remote_name}", {
        "serviceUrl": remote.web_service_url, "brokerServiceUrl": remote.service_url})
    admin(local, "PUT", "/admin/v2/tenants/geo", {"adminRoles": [], "allowedClusters": ["A", "B"]})
    for ns in ("ns", "local"):
        admin(local, "PUT", f"/admin/v2/namespaces/geo/{ns}")
    admin(local, "POST", "/admin/v2/namespaces/geo/ns/replication", ["A", "B"])


def run(a: StandaloneBroker, consume_at: StandaloneBroker, namespace: str, rate: float,
        count: int) -> dict[str, float]:
    """Send ``count`` messages at ``rate`` per second (0: as fast as possible) in A and
    receive them at ``consume_at``; delays and the throughput."""
    topic = f"persistent://geo/{namespace}/bench-{uuid.uuid4().hex[:8]}"
    pa = pulsar.Client(a.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    pc = pulsar.Client(consume_at.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = pc.subscribe(topic, "bench", receiver_queue_size=5000)
        producer = pa.create_producer(topic, batching_enabled=True, batching_max_publish_delay_ms=5,
                                      block_if_queue_full=True, max_pending_messages=10000)
        delays: list[float] = []

        def receive() -> None:
            while len(delays) < count:
                msg = consumer.receive(timeout_millis=60000)
                delays.append(time.time() - _STAMP.unpack_from(msg.data())[0])
                consumer.acknowledge(msg)

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        filler = bytes(1024 - _STAMP.size)
        start = time.monotonic()
        for i in range(count):
            if rate:
                wait = start + i / rate - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
            producer.send_async(_STAMP.pack(time.time()) + filler, None)
        producer.flush()
        receiver.join(timeout=300)
        elapsed = time.monotonic() - start
        delays.sort()
        return {"msgs": len(delays), "msgs_per_s": len(delays) / elapsed,
                "delay_p50_ms": 1000 * delays[len(delays) // 2],
                "delay_p99_ms": 1000 * delays[int(len(delays) * 0.99)],
                "delay_max_ms": 1000 * delays[-1]}
    finally:
        pa.close()
        pc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=2000.0, help="steady phase: messages/s")
    parser.add_argument("--duration", type=float, default=10.0, help="steady phase: seconds")
    parser.add_argument("--messages", type=int, default=100_000, help="burst phase: messages")
    args = parser.parse_args()
    settings: dict[str, object] = {"brokerDeduplicationEnabled": True}
    with standalone({**settings, "clusterName": "A"}) as a, standalone({**settings, "clusterName": "B"}) as b:
        setup(a, b, "B")
        setup(b, a, "A")
        print(f"{'phase':8} {'consumed in':22} {'msgs':>7} {'msgs/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
        for phase, rate, count in (("steady", args.rate, int(args.rate * args.duration)),
                                   ("burst", 0.0, args.messages)):
            for label, where, ns in (("A (not replicated)", a, "local"), ("B (replicated)", b, "ns")):
                r = run(a, where, ns, rate, count)
                print(f"{phase:8} {label:22} {r['msgs']:7.0f} {r['msgs_per_s']:8.0f} "
                      f"{r['delay_p50_ms']:8.1f} {r['delay_p99_ms']:8.1f} {r['delay_max_ms']:8.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
