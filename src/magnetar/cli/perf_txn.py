"""``magnetar perf transaction``: pulsar-perf's transaction benchmark (its ``transaction``
command, with its option names and defaults). Each of ``-threads`` workers runs one
transaction after another: it receives ``-nmc`` messages from every subscription of every
``--topics-c`` topic and acknowledges them in the transaction, sends ``-nmp`` messages to
every ``--topics-p`` topic in it, then commits it (or aborts it, ``-abort``) and waits for
the answer. ``--txn-disable`` runs the same tasks without transactions. A line every
``--stats-interval`` seconds counts the transactions (or tasks) ended and failed, the
messages received and sent, and a transaction's latency (opened to its end answered)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from typing import Any

from magnetar.cli.output import add_late_options
from magnetar.cli.perf import Meter, check_common, check_txn_timeout, run_load, until_done
from magnetar.cli.values import finite, int32, utf8

log = logging.getLogger(__name__)

EXAMPLES = """Examples:
  magnetar perf transaction --topics-c in --topics-p out -nmc 10 -nmp 10 -ntxn 1000
  magnetar perf transaction --topics-c in --topics-p out1 out2 -threads 4 -time 60
  magnetar perf transaction --topics-c in --topics-p out --txn-disable   # the same, no txn"""


def add_parser(cmds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``transaction`` command of ``magnetar perf``."""
    p = cmds.add_parser(
        "transaction", help="consume, acknowledge and produce in transactions",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=__doc__.split("\n\n", 1)[0].replace("``", "") + "\n\n" + EXAMPLES)
    p.add_argument("--topics-c", nargs="+", default=["test-consume"], metavar="TOPIC",
                   help="topics whose messages each transaction receives and acknowledges "
                        "(default test-consume)")
    p.add_argument("--topics-p", nargs="+", default=["test-produce"], metavar="TOPIC",
                   help="topics each transaction sends to (default test-produce)")
    p.add_argument("-threads", "--num-test-threads", dest="threads", type=int32, default=1,
                   help="transactions under way at once, one per worker (default 1)")
    p.add_argument("-time", "--test-duration", dest="time", type=finite, default=0,
                   help="stop after N seconds (0: no limit)")
    p.add_argument("-ss", "--subscriptions", nargs="+", default=["sub"], type=utf8,
                   metavar="NAME", help="the subscriptions of each consumed topic (default sub)")
    p.add_argument("-st", "--subscription-type", default="Shared",
                   choices=["Exclusive", "Shared", "Failover", "Key_Shared"])
    p.add_argument("-sp", "--subscription-position", default="Earliest",
                   choices=["Earliest", "Latest"],
                   help="where a new subscription starts (default Earliest)")
    p.add_argument("-q", "--receiver-queue-size", type=int32, default=1000)
    p.add_argument("-tto", "--txn-timeout", type=finite, default=5.0, metavar="SECONDS",
                   help="the coordinator aborts a transaction not ended this long after it "
                        "opened (default 5)")
    p.add_argument("-ntxn", "--number-txn", dest="num_txns", type=int, default=0,
                   help="stop after N transactions (or tasks) over all workers (0: no limit)")
    p.add_argument("-nmp", "--numMessage-perTransaction-produce", dest="produce_per_txn",
                   type=int32, default=1, metavar="N",
                   help="messages a transaction sends to each --topics-p topic (default 1)")
    p.add_argument("-nmc", "--numMessage-perTransaction-consume", dest="consume_per_txn",
                   type=int32, default=1, metavar="N",
                   help="messages a transaction receives from each subscription (default 1)")
    p.add_argument("--txn-disable", action="store_true",
                   help="run the same tasks without transactions")
    p.add_argument("-abort", action="store_true",
                   help="abort each transaction instead of committing it")
    p.add_argument("-txnRate", dest="txn_rate", type=finite, default=0,
                   help="transactions (or tasks) started a second over all workers "
                        "(0: no limit)")
    p.add_argument("--size", type=int32, default=1024, help="payload bytes (default 1024)")
    p.add_argument("-i", "--stats-interval", type=finite, default=5.0,
                   help="seconds between lines (default 5)")
    add_late_options(p, "--url", "service URL")


def check_arguments(args: argparse.Namespace) -> str | None:
    """What is wrong with the arguments (None: nothing), found before connecting."""
    problem = check_common(args, [*args.topics_c, *args.topics_p], [
        ("threads", "-threads", 1), ("time", "-time", 0), ("num_txns", "-ntxn", 0),
        ("produce_per_txn", "-nmp", 0), ("consume_per_txn", "-nmc", 0),
        ("txn_rate", "-txnRate", 0), ("size", "--size", 0), ("receiver_queue_size", "-q", 1)]
    ) or check_txn_timeout(args.txn_timeout)
    if problem:
        return problem
    if args.txn_disable and args.abort:
        return "-abort aborts transactions: it cannot go with --txn-disable"
    if not args.produce_per_txn and not args.consume_per_txn:
        return "a transaction must produce (-nmp) or consume (-nmc) at least one message"
    if not all(args.subscriptions):
        return "a subscription name is empty"
    return None


def run(args: argparse.Namespace) -> int:
    """Run the benchmark: 0, or a one-line error on stderr (2: bad arguments)."""
    problem = check_arguments(args)
    if problem:
        print(f"magnetar perf: {problem}", file=sys.stderr)
        return 2
    meter = Meter("transaction", args.output, txn=True)  # (tasks, with --txn-disable)
    return run_load(_transactions(args, meter), meter)


class _Pacer:
    """Starts at most ``rate`` tasks a second over every worker (0: no limit)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate
        self.started = time.monotonic()
        self.count = 0

    async def next(self) -> None:
        if self.rate <= 0:
            return
        due = self.started + self.count / self.rate
        self.count += 1
        ahead = due - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)


async def _transactions(args: argparse.Namespace, meter: Meter) -> None:
    from magnetar.client import Client, ConsumerType, InitialPosition

    in_txn = not args.txn_disable
    payload = b"x" * args.size
    stop = asyncio.Event()
    async with Client(args.url, enable_transaction=in_txn) as client:
        consumers = [await client.subscribe(
            topic, sub, consumer_type=ConsumerType[args.subscription_type.replace("_", "")],
            receiver_queue_size=args.receiver_queue_size,
            initial_position=InitialPosition[args.subscription_position])
            for topic in args.topics_c for sub in args.subscriptions] if args.consume_per_txn else []
        producers = [await client.create_producer(topic, batching_enabled=False)
                     for topic in args.topics_p] if args.produce_per_txn else []
        pacer = _Pacer(args.txn_rate)
        started = [0]  # tasks started over all workers (-ntxn)

        async def one_task() -> None:
            opened = time.perf_counter()
            txn = await client.new_transaction(
                timeout_ms=int(args.txn_timeout * 1000)) if in_txn else None
            ok = False
            try:
                # acknowledged without waiting for each (pulsar-perf's acknowledgeAsync);
                # the transaction's end waits for them
                acks = []
                for consumer in consumers:
                    for _ in range(args.consume_per_txn):
                        msg = await consumer.receive()
                        acks.append(asyncio.ensure_future(consumer.acknowledge(msg, txn=txn)))
                        meter.record(len(msg.data()), None)
                sends = [await producer.send_async(payload, txn=txn)
                         for producer in producers for _ in range(args.produce_per_txn)]
                failed = [r for r in await asyncio.gather(*acks, return_exceptions=True)
                          if isinstance(r, BaseException)]
                if failed:  # (the transaction is aborted below)
                    raise failed[0]
                if txn is None:
                    await asyncio.gather(*sends)
                else:
                    await (txn.abort() if args.abort else txn.commit())
                for _ in sends:
                    meter.record(args.size, None)
                ok = True
            except asyncio.CancelledError:
                if txn is not None:
                    with contextlib.suppress(Exception):
                        await asyncio.shield(txn.abort())
                raise
            except Exception as exc:  # the client's refusal: counted, the load goes on
                log.info("transaction %s failed: %s", getattr(txn, "id", "-"), exc)
                meter.errors += 1
                if txn is not None:
                    with contextlib.suppress(Exception):
                        await txn.abort()
            meter.ended_txn(ok)
            if ok:
                meter.record_latency((time.perf_counter() - opened) * 1000)

        async def worker() -> None:
            while not stop.is_set():
                if args.num_txns and started[0] >= args.num_txns:
                    return
                started[0] += 1
                await pacer.next()
                await one_task()

        reporter = asyncio.create_task(until_done(args, meter, stop))
        workers = [asyncio.create_task(worker()) for _ in range(args.threads)]
        done: asyncio.Future[Any] = asyncio.gather(*workers)
        stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
        await asyncio.wait({done, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not done.done():  # stopped (-time, a signal): the tasks under way end aborted
            for task in workers:
                task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await done
        stop.set()
        await stopped
        await reporter
        for consumer in consumers:
            await consumer.close()
        for producer in producers:
            await producer.close()


__all__ = ["EXAMPLES", "add_parser", "check_arguments", "run"]
