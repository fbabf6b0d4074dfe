"""Operations: ``/admin/v3/transactions`` REST paths, ``magnetar admin transactions`` and
the ``pulsar_txn_*`` metrics, against a real broker."""

from __future__ import annotations

import json
import subprocess
import sys

import magnetar
from tests.client.conftest import run
from tests.transactions.conftest import TxnBroker


def test_rest_cli_and_metrics(txn_broker: TxnBroker) -> None:
    async def make() -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        async with magnetar.Client(txn_broker.url, enable_transaction=True) as client:
            opened = await client.new_transaction(timeout_ms=600_000)
            await opened._add_partition("persistent://public/default/ops")
            done = await client.new_transaction()
            await done.commit()
            idle = await client.new_transaction(timeout_ms=600_000)
            return opened.id, done.id, idle.id

    opened, done, idle = run(make)
    status, doc = txn_broker.rest("GET", f"/admin/v3/transactions/transactionMetadata/{opened[0]}/{opened[1]}")
    assert status == 200
    assert doc["txnId"] == f"({opened[0]},{opened[1]})"
    assert doc["status"] == "OPEN"
    assert doc["timeoutAt"] == 600_000
    assert doc["producedPartitions"] == {"persistent://public/default/ops": {}}
    status, doc = txn_broker.rest("GET", "/admin/v3/transactions/transactionMetadata/0/999999999")
    assert status == 404
    status, stats = txn_broker.rest("GET", f"/admin/v3/transactions/coordinatorStats?coordinatorId={opened[0]}")
    assert status == 200
    assert stats["ongoingTxnSize"] >= 1
    status, stats = txn_broker.rest("GET", "/admin/v3/transactions/coordinatorStats?coordinatorId=99")
    assert status == 404
    status, slow = txn_broker.rest("GET", "/admin/v3/transactions/slowTransactions/0")
    assert status == 200
    assert f"({opened[0]},{opened[1]})" in slow
    assert f"({done[0]},{done[1]})" not in slow
    status, listed = txn_broker.rest("GET", "/admin/v3/transactions/coordinators")
    assert status == 200
    assert sorted(listed, key=int) == [str(i) for i in range(16)]

    metrics = txn_broker.text("/metrics")
    assert f'pulsar_txn_active_count{{cluster="standalone",coordinator_id="{opened[0]}"}} 1' in metrics
    assert f'pulsar_txn_committed_total{{cluster="standalone",coordinator_id="{done[0]}"}} 1' in metrics
    assert "pulsar_txn_append_log_bucket" in metrics

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url",
             f"http://127.0.0.1:{txn_broker.http_port}", "transactions", *args, "--output", "json"],
            capture_output=True, text=True, timeout=60)

    out = cli("transaction-metadata", "-m", str(opened[0]), "-l", str(opened[1]))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["status"] == "OPEN"
    out = cli("abort-transaction", "-m", str(idle[0]), "-l", str(idle[1]))
    assert out.returncode == 0, out.stderr
    out = cli("transaction-metadata", "-m", str(idle[0]), "-l", str(idle[1]))
    assert json.loads(out.stdout)["status"] == "ABORTED"
    out = cli("transaction-metadata", "-m", "0", "-l", "999999999")
    assert out.returncode == 1
    assert "not found" in out.stderr
    out = cli("coordinator-stats")
    assert out.returncode == 0, out.stderr
    assert str(opened[0]) in json.loads(out.stdout)
