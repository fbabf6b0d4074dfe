"""``magnetar client produce|consume``: pulsar-client's two everyday commands, over
Magnetar's own client (``magnetar.sync``)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from typing import Any

from magnetar.cli.output import add_late_options
from magnetar.cli.values import finite, int32, utf8
from magnetar.protocol.naming import TopicName

log = logging.getLogger(__name__)

EXAMPLES = """Examples:
  magnetar client produce my-topic -m hello -n 10
  magnetar client produce my-topic -m a -m b -k order-1 -p source=cli
  magnetar client consume my-topic -s sub -n 10 -p Earliest   # what is there already
  magnetar client consume my-topic -s sub -n 0 -t Shared -p Earliest   # forever
  magnetar client consume my-topic -s sub -n 5 --timeout 10   # give up after 10 s of quiet"""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
               common: list[argparse.ArgumentParser]) -> None:
    client = sub.add_parser(
        "client", parents=common, help="produce and consume messages (like pulsar-client)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Produce and consume messages with Magnetar's client.\n\n" + EXAMPLES)
    client.add_argument("--url", default=os.environ.get("MAGNETAR_SERVICE_URL", "pulsar://localhost:6650"),
                        help="service URL (default $MAGNETAR_SERVICE_URL, else "
                             "pulsar://localhost:6650; http:// works too)")
    client.add_argument("--connection-timeout-ms", type=int32, default=10000,
                        help="give up on a broker that cannot be reached after this long "
                             "(default 10000, as Pulsar's clients)")
    cmds = client.add_subparsers(dest="client_command", metavar="COMMAND")
    cmds.required = True
    produce = cmds.add_parser(
        "produce", help="send messages", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Send each -m message N times, in order.\n\nExamples:\n"
                    "  magnetar client produce my-topic -m hello -n 10\n"
                    "  magnetar client produce my-topic -m '{\"id\": 1}' -k key-1 -p origin=cli")
    produce.add_argument("topic")
    produce.add_argument("-m", "--messages", action="append", required=True, type=utf8,
                         help="message text (repeatable)")
    produce.add_argument("-n", "--num-produce", type=int32, default=1,
                         help="how many times to send the messages (default 1)")
    produce.add_argument("-k", "--key", type=utf8, help="partition key of every message")
    produce.add_argument("-p", "--property", action="append", default=[], type=utf8,
                         help="KEY=VALUE message property (repeatable)")
    consume = cmds.add_parser(
        "consume", help="receive and acknowledge messages",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Receive N messages (0: until interrupted), print and acknowledge them.\n"
                    "A new subscription starts at the latest message, as in Pulsar: -p Earliest\n"
                    "reads what is already there.\n\n"
                    "Examples:\n  magnetar client consume my-topic -s sub -n 10 -p Earliest\n"
                    "  magnetar client consume my-topic -s sub -n 0 -p Earliest --output json")
    consume.add_argument("topic")
    consume.add_argument("-s", "--subscription-name", required=True, type=utf8)
    consume.add_argument("-n", "--num-messages", type=int32, default=1,
                         help="messages to receive (0: forever; default 1)")
    consume.add_argument("-t", "--subscription-type", default="Exclusive",
                         choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    consume.add_argument("-p", "--subscription-position", default="Latest",
                         choices=["Latest", "Earliest"])
    for leaf in (produce, consume):
        add_late_options(leaf, "--url", "service URL")
    consume.add_argument("--timeout", type=finite, default=0,
                         help="stop after this many seconds without a message (default 0: "
                              "wait, as pulsar-client does)")


def run(args: argparse.Namespace) -> int:
    """Run produce or consume: 0, or a one-line error on stderr and non-zero (2: a bad
    argument, found before connecting). Never a traceback."""
    problem = _check_arguments(args)
    if problem:
        print(f"magnetar client: {problem}", file=sys.stderr)
        return 2
    from magnetar.client.errors import PulsarException
    from magnetar.sync import Client

    try:
        with Client(args.url, connection_timeout_ms=args.connection_timeout_ms) as client:
            if args.client_command == "produce":
                return _produce(client, args)
            return _consume(client, args)
    except KeyboardInterrupt:
        return 130
    except PulsarException as exc:  # its message names the broker's error, if any
        print(f"magnetar client: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:
        print(f"magnetar client: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        log.debug("client command failed", exc_info=True)
        print(f"magnetar client: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _check_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments, checked before connecting (None: nothing)."""
    from magnetar.client.pool import check_service_url  # the client: only once used

    try:
        check_service_url(args.url)
        TopicName.parse(args.topic)
    except ValueError as exc:
        return str(exc)
    if args.connection_timeout_ms <= 0:
        return "--connection-timeout-ms must be positive"
    if args.client_command == "produce":
        if args.num_produce < 1:
            return f"--num-produce must be at least 1, not {args.num_produce}"
        bad = [p for p in args.property if "=" not in p]
        if bad:
            return f"--property takes KEY=VALUE, not {bad[0]!r}"
        return None
    if not args.subscription_name:
        return "the subscription name is empty"
    if args.num_messages < 0:
        return f"--num-messages must be 0 (forever) or more, not {args.num_messages}"
    if args.timeout < 0:
        return f"--timeout must be 0 (wait) or more seconds, not {args.timeout}"
    return None


def _produce(client: Any, args: argparse.Namespace) -> int:
    properties = dict(tuple(p.split("=", 1)) for p in args.property) or None
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
    from magnetar.client import ConsumerType, InitialPosition
    from magnetar.client.errors import Timeout

    consumer = client.subscribe(
        args.topic, args.subscription_name,
        consumer_type=ConsumerType[args.subscription_type.replace("_", "")],
        initial_position=InitialPosition[args.subscription_position],
    )
    received = 0
    timeout = int(args.timeout * 1000) if args.timeout > 0 else None
    timed_out = False
    try:
        while args.num_messages == 0 or received < args.num_messages:
            try:
                msg = consumer.receive(timeout_millis=timeout)
            except Timeout:
                timed_out = True
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
    if timed_out:
        wanted = f" of {args.num_messages}" if args.num_messages else ""
        print(f"no message for {args.timeout:g} s (--timeout): {received}{wanted} messages "
              f"consumed from subscription {args.subscription_name!r} (a new subscription "
              "starts at the latest message unless -p Earliest)", file=sys.stderr)
    else:
        print(f"{received} messages successfully consumed", file=sys.stderr)
    return 0 if args.num_messages == 0 or received >= args.num_messages else 1
