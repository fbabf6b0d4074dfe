"""Transactions of the exactly-once sink (``deliveryGuarantee=exactly-once``): the check
that the broker has coordinators, and the driver's commit and abort of the transactions
its tasks opened.

A task attempt opens one transaction, sends every row in it and returns its id; only the
driver ends it. Ending follows Pulsar's rules as the client reports them: a commit
resent after a lost answer (a timeout or a dropped connection) is answered SUCCESS by the
coordinator (Pulsar #19629), so the driver simply resends. Of the two answers that mean
"cannot commit", ``InvalidTxnStatus`` says the transaction was aborted (by its timeout, or
by someone else): that is an error naming ``transactionTimeoutMs``. ``TransactionNotFound``
on a first commit is the same error; on a resent commit (whose first try may have
committed before its answer was lost) it is taken as committed, as Flink's Pulsar
committer does, and logged: the coordinator only forgets a transaction after it ended.
Aborts are best effort: an abort that fails leaves the transaction to its timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from magnetar.spark.options import ClientSettings, PulsarOptionError, SinkOptions

log = logging.getLogger(__name__)

TxnId = tuple[int, int]
RETRIES = 4


class TransactionEndedError(RuntimeError):
    """A transaction the driver meant to commit is no longer open (timed out, aborted)."""


def transactional(settings: ClientSettings) -> ClientSettings:
    """The client settings with transactions enabled."""
    return replace(settings, client_kwargs={**settings.client_kwargs,
                                            "enable_transaction": True})


def named(exc: BaseException, *names: str) -> bool:
    """``exc`` is (a subclass of) one of the client's errors called ``names``."""
    return any(cls.__name__ in names for cls in type(exc).__mro__)


def _lost_answer(exc: BaseException) -> bool:
    return isinstance(exc, asyncio.TimeoutError | ConnectionError | TimeoutError) or \
        named(exc, "Timeout", "ConnectError", "NotConnected")


def check_coordinators(opts: SinkOptions) -> None:
    """On the driver, when the job starts: open and abort one transaction, so that a broker
    without transaction coordinators fails the job now, with the setting to change."""
    from magnetar.spark.session import Session

    try:
        session = Session(transactional(opts.client))
    except Exception as exc:
        raise _no_coordinators(opts, exc) from None
    try:
        client: Any = session.client  # typed loosely: the transaction API is recent

        async def probe() -> None:
            txn = await client.new_transaction(timeout_ms=60_000)
            await txn.abort()

        session.run(probe(), timeout=120)
    except Exception as exc:
        raise _no_coordinators(opts, exc) from None
    finally:
        session.close()


def _no_coordinators(opts: SinkOptions, exc: BaseException) -> PulsarOptionError:
    return PulsarOptionError(
        "deliveryGuarantee=exactly-once needs transaction coordinators on the broker: set "
        "transactionCoordinatorEnabled=true in its configuration (Magnetar's default; "
        "Apache Pulsar's is false), or write with deliveryGuarantee=at-least-once. The "
        f"broker at {opts.client.service_url} could not start a transaction: "
        f"{type(exc).__name__}: {exc}")


def expired_message(tid: TxnId, opts: SinkOptions, started_ms: int | None,
                    what: str) -> str:
    age = "" if started_ms is None else \
        f" {(time.time() * 1000 - started_ms) / 1000:.0f} s after it was opened"
    return (f"transaction {tid[0]}:{tid[1]} {what}{age}: the write outlived its transaction "
            f"(transactionTimeoutMs={opts.txn_timeout_ms}); its rows were not committed. "
            "Raise 'transactionTimeoutMs' above the longest task plus the job's commit")


async def commit_all(client: Any, txns: Iterable[tuple[TxnId, int | None]],
                     opts: SinkOptions) -> None:
    """Commit every transaction (concurrently); the first error is raised after all were
    tried."""
    results = await asyncio.gather(*(_commit(client, tid, started, opts)
                                     for tid, started in txns), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r


async def _commit(client: Any, tid: TxnId, started: int | None, opts: SinkOptions) -> None:
    resent = False
    for attempt in range(RETRIES):
        try:
            await client.transaction(*tid).commit()
            return
        except Exception as exc:
            if _lost_answer(exc) and attempt + 1 < RETRIES:
                log.info("commit of transaction %s:%s lost its answer (%s); resending",
                         tid[0], tid[1], exc)
                resent = True
                await asyncio.sleep(0.2 * (attempt + 1))
                continue
            if named(exc, "TransactionNotFound") and resent:
                log.warning("transaction %s:%s unknown to its coordinator on a resent "
                            "commit: taken as committed by the first try", *tid)
                return
            if named(exc, "InvalidTxnStatus", "TransactionNotFound"):
                raise TransactionEndedError(
                    expired_message(tid, opts, started, "could not be committed "
                                    f"({type(exc).__name__}: {exc})")) from exc
            raise


async def abort_all(client: Any, txns: Iterable[TxnId]) -> None:
    """Abort every transaction, best effort (a failure leaves it to its timeout)."""
    async def one(tid: TxnId) -> None:
        try:
            await client.transaction(*tid).abort()
        except Exception as exc:  # already ended, or the coordinator is away
            log.info("abort of transaction %s:%s: %s", tid[0], tid[1], exc)

    await asyncio.gather(*(one(t) for t in txns))
