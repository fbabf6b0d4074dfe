"""``magnetar client produce|consume``: pulsar-client's two everyday commands, over
Magnetar's own client (``magnetar.sync``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from magnetar.cli.output import add_late_options
from magnetar.client import ConsumerType, InitialPosition
from magnetar.client.errors import Timeout

EXAMPLES = """Examples:
  magnetar client produce my-topic -m hello -n 10
  magnetar client produce my-topic -m a -m b -k order-1 -p source=cli
  magnetar client consume my-topic -s sub -n 10
  magnetar client consume my-topic -s sub -n 0 -t Shared -p Earliest   # forever"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: list[argparse.ArgumentParser]) -> None:
    client = sub.add_parser(
        "client", parents=common, help="produce and consume messages (like pulsar-client)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Produce and consume messages with Magnetar's client.\n\n" + EXAMPLES)
    client.add_argument("--url", default="pulsar://localhost:6650",
                        help="service URL (default pulsar://localhost:6650; http:// works too)")
    cmds = client.add_subparsers(dest="client_command", metavar="COMMAND")
    cmds.required = True
    produce = cmds.add_parser(
        "produce", help="send messages", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Send each -m message N times, in order.\n\nExamples:\n"
                    "  magnetar client produce my-topic -m hello -n 10\n"
                    "  magnetar client produce my-topic -m '{\"id\": 1}' -k key-1 -p origin=cli")
    produce.add_argument("topic")
    produce.add_argument("-m", "--messages", action="append", required=True,
                         help="message text (repeatable)")
    produce.add_argument("-n", "--num-produce", type=int, default=1,
                         help="how many times to send the messages (default 1)")
    produce.add_argument("-k", "--key", help="partition key of every message")
    produce.add_argument("-p", "--property", action="append", default=[],
                         help="KEY=VALUE message property (repeatable)")
    consume = cmds.add_parser(
        "consume", help="receive and acknowledge messages",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Receive N messages (0: until interrupted), print and acknowledge them.\n\n"
                    "Examples:\n  magnetar client consume my-topic -s sub -n 10\n"
                    "  magnetar client consume my-topic -s sub -n 0 -p Earliest --output json")
    consume.add_argument("topic")
    consume.add_argument("-s", "--subscription-name", required=True)
    consume.add_argument("-n", "--num-messages", type=int, default=1,
                         help="messages to receive (0: forever; default 1)")
    consume.add_argument("-t", "--subscription-type", default="Exclusive",
                         choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    consume.add_argument("-p", "--subscription-position", default="Latest",
                         choices=["Latest", "Earliest"])
    for leaf in (produce, consume):
        add_late_options(leaf, "--url", "service URL")
    consume.add_argument("--timeout", type=float, default=0,
                         help="give up after this many seconds without a message (0: wait)")


def run(args: argparse.Namespace) -> int:
    from magnetar.sync import Client

    try:
        with Client(args.url) as client:
            if args.client_command == "produce":
                return _produce(client, args)
            return _consume(client, args)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        print(f"magnetar client: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _produce(client: Any, args: argparse.Namespace) -> int:
    properties = dict(p.split("=", 1) for p in args.property) or None
    producer = client.create_producer(args.topic)
    sent = 0
    for _ in range(args.num_produce):
        for text in args.messages:
            producer.send(text.encode(), properties=properties, partition_key=args.key)
            sent += 1
    producer.close()
    if args.output == "json":
        print(json.dumps({"topic": args.topic, "produced": sent}))
    else:
        print(f"{sent} messages successfully produced", file=sys.stderr)
    return 0


def _consume(client: Any, args: argparse.Namespace) -> int:
    consumer = client.subscribe(
        args.topic, args.subscription_name,
        consumer_type=ConsumerType[args.subscription_type.replace("_", "")],
        initial_position=InitialPosition[args.subscription_position],
    )
    received = 0
    timeout = int(args.timeout * 1000) if args.timeout > 0 else None
    try:
        while args.num_messages == 0 or received < args.num_messages:
            try:
                msg = consumer.receive(timeout_millis=timeout)
            except Timeout:
                break
            received += 1
            data = msg.data()
            text = data.decode("utf-8", errors="replace")
            if args.output == "json":
                mid = msg.message_id()
                print(json.dumps({"messageId": str(mid), "key": msg.partition_key() or None,
                                  "properties": msg.properties(), "publishTime": msg.publish_timestamp(),
                                  "content": text}), flush=True)
            else:
                print(f"----- got message -----\nkey:[{msg.partition_key() or 'null'}], "
                      f"properties:{msg.properties()}, content:{text}", flush=True)
            consumer.acknowledge(msg)
    finally:
        consumer.close()
    print(f"{received} messages successfully consumed", file=sys.stderr)
    return 0 if args.num_messages == 0 or received >= args.num_messages else 1
