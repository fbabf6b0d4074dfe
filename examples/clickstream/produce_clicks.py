"""Publish click events (JSON) to the topic ``clicks``: one per ~10 ms, for a while.

    python examples/clickstream/produce_clicks.py --url pulsar://localhost:6650 --seconds 60
"""

from __future__ import annotations

import argparse
import json
import random
import time

import pulsar


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="pulsar://localhost:6650")
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    client = pulsar.Client(args.url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    producer = client.create_producer("clicks", batching_enabled=True)
    pages = ["/", "/search", "/item", "/cart", "/checkout"]
    end = time.time() + args.seconds
    sent = 0
    while time.time() < end:
        user = f"user-{random.randint(1, 20)}"
        event = {"user": user, "page": random.choice(pages), "ts": int(time.time() * 1000)}
        producer.send_async(json.dumps(event).encode(), None, partition_key=user,
                            event_timestamp=event["ts"])
        sent += 1
        time.sleep(0.01)  # the event rate of this demo
    producer.flush()
    client.close()
    print(f"sent {sent} clicks")


if __name__ == "__main__":
    main()
