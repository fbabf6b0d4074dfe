"""``magnetar admin | client | perf`` against a real broker (in-process ``main()`` calls:
real HTTP and TCP, stdout captured), and every subcommand's --help carrying examples."""

from __future__ import annotations

import argparse
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from magnetar.cli.main import build_parser, main
from magnetar.testing import StandaloneBroker


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
                 ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found += leaf_parsers(child, (*path, name))
    return found


def test_every_subcommand_help_has_examples() -> None:
    parsers = leaf_parsers(build_parser())
    assert len(parsers) > 60
    for path, parser in parsers:
        assert "Example" in parser.format_help() or "magnetar standalone" in parser.format_help(), path


def test_admin_commands(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    url = ["--admin-url", broker.web_service_url]
    tenant = f"cli-{uuid.uuid4().hex[:6]}"
    assert run(capsys, "admin", *url, "tenants", "create", tenant)[0] == 0
    code, out, _ = run(capsys, "admin", *url, "tenants", "list")
    assert code == 0 and tenant in out.split()
    assert run(capsys, "admin", *url, "namespaces", "create", f"{tenant}/ns")[0] == 0
    assert run(capsys, "admin", *url, "namespaces", "set-retention", f"{tenant}/ns",
               "--time", "2h", "--size", "1G")[0] == 0
    code, out, _ = run(capsys, "admin", "namespaces", "get-retention", f"{tenant}/ns", "--output", "json", *url)
    assert json.loads(out) == {"retentionTimeInMinutes": 120, "retentionSizeInMB": 1024}
    assert run(capsys, "admin", *url, "namespaces", "set-message-ttl", f"{tenant}/ns", "--messageTTL", "1h")[0] == 0
    code, out, _ = run(capsys, "admin", *url, "--output", "json", "namespaces", "policies", f"{tenant}/ns")
    assert json.loads(out)["message_ttl_in_seconds"] == 3600
    topic = f"persistent://{tenant}/ns/orders"
    assert run(capsys, "admin", *url, "topics", "create-partitioned-topic", topic, "-p", "4")[0] == 0
    code, out, _ = run(capsys, "admin", *url, "topics", "list", f"{tenant}/ns")
    assert out.split() == [f"{topic}-partition-{i}" for i in range(4)]
    code, out, _ = run(capsys, "admin", *url, "topics", "list", f"{tenant}/ns", "--limit", "2",
                       "--after", f"{topic}-partition-0")
    assert out.split() == [f"{topic}-partition-{i}" for i in (1, 2)]
    code, out, _ = run(capsys, "admin", *url, "topics", "get-partitioned-topic-metadata", topic)
    assert "partitions  4" in out
    assert run(capsys, "admin", *url, "topics", "create", "cli-short-name")[0] == 0
    assert run(capsys, "admin", *url, "subscriptions", "create", "cli-short-name", "-s", "sub",
               "-m", "earliest")[0] == 0
    code, out, _ = run(capsys, "admin", *url, "subscriptions", "list", "cli-short-name")
    assert out.split() == ["sub"]
    code, out, _ = run(capsys, "admin", *url, "topics", "stats", "cli-short-name", "-o", "json")
    assert "sub" in json.loads(out)["subscriptions"]
    # errors: a non-zero exit and Pulsar's reason on stderr
    code, _, err = run(capsys, "admin", *url, "topics", "create", "cli-short-name")
    assert code == 1 and "409" in err
    code, _, err = run(capsys, "admin", "--admin-url", "http://127.0.0.1:1", "tenants", "list")
    assert code == 1 and "cannot reach" in err
    assert run(capsys, "admin", *url, "topics", "delete-partitioned-topic", topic)[0] == 0
    assert run(capsys, "admin", *url, "namespaces", "delete", f"{tenant}/ns")[0] == 0
    assert run(capsys, "admin", *url, "tenants", "delete", tenant)[0] == 0


def test_schema_commands(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    url = ["--admin-url", broker.web_service_url]
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "JSON", "schema": {"type": "record", "name": "R", "fields": []},
                                  "properties": {}}))
    assert run(capsys, "admin", *url, "schemas", "upload", "cli-schema", "-f", str(schema))[0] == 0
    code, out, _ = run(capsys, "admin", *url, "schemas", "get", "cli-schema", "-o", "json")
    assert code == 0 and json.loads(out)["type"] == "JSON"
    code, out, _ = run(capsys, "admin", *url, "schemas", "compatibility", "cli-schema", "-f", str(schema), "-o", "json")
    assert code == 0 and json.loads(out)["isCompatible"] is True
    assert run(capsys, "admin", *url, "schemas", "delete", "cli-schema")[0] == 0


def test_client_produce_consume_and_peek(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"cli-{uuid.uuid4().hex[:6]}"
    admin = ["--admin-url", broker.web_service_url]
    assert run(capsys, "admin", *admin, "subscriptions", "create", topic, "-s", "sub")[0] == 1  # no topic yet
    assert run(capsys, "admin", *admin, "topics", "create", topic)[0] == 0
    assert run(capsys, "admin", *admin, "subscriptions", "create", topic, "-s", "sub")[0] == 0
    code, _, err = run(capsys, "client", "--url", broker.service_url, "produce", topic,
                       "-m", "hello", "-m", "world", "-n", "3", "-p", "k=v")
    assert code == 0 and "6 messages successfully produced" in err
    code, out, _ = run(capsys, "admin", *admin, "subscriptions", "peek", topic, "-s", "sub", "-n", "2", "-o", "json")
    peeked = json.loads(out)
    assert [p["payload"] for p in peeked] == ["hello", "world"]
    assert peeked[0]["X-Pulsar-PROPERTY-k"] == "v"
    code, out, _ = run(capsys, "client", "consume", topic, "-s", "sub", "-n", "6", "--output", "json",
                       "--url", broker.service_url)
    assert code == 0
    assert [json.loads(line)["content"] for line in out.splitlines()] == ["hello", "world"] * 3
    code, out, _ = run(capsys, "admin", *admin, "topics", "stats", topic, "-o", "json")
    assert json.loads(out)["subscriptions"]["sub"]["msgBacklog"] <= 6


def test_perf_produce_and_consume(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    topic = f"perf-{uuid.uuid4().hex[:6]}"
    url = ["--url", broker.service_url]
    code, out, _ = run(capsys, "perf", *url, "produce", topic, "--rate", "0", "-m", "2000", "-s", "100",
                       "-i", "0.2", "--output", "json")
    assert code == 0
    lines = [json.loads(line) for line in out.splitlines()]
    summary = lines[-1]
    assert summary["type"] == "summary" and summary["messages"] == 2000 and summary["errors"] == 0
    assert summary["msgPerSec"] > 0 and summary["latencyMs"]["p99"] >= summary["latencyMs"]["p50"] > 0
    # the consumer starts from the latest message: produce while it runs, bounded by -m
    code, out, _ = run(capsys, "perf", *url, "consume", topic, "-s", "ps", "--time", "0.5", "-i", "0.2")
    assert code == 0 and "Aggregated received" in out
    code, out, _ = run(capsys, "perf", *url, "produce", topic, "--rate", "2000", "-m", "400", "-i", "0.05")
    assert code == 0 and "Throughput produced" in out and "Aggregated produced" in out


def test_perf_in_transactions(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """``-txn`` (pulsar-perf's options): messages sent and acknowledged in transactions of
    ``-nmt``, committed or aborted (``-abort``), counted; what they leave visible is what
    a commit or an abort leaves."""
    topic = f"perf-txn-{uuid.uuid4().hex[:6]}"
    url = ["--url", broker.service_url]
    admin = ["--admin-url", broker.web_service_url]
    for argv, flag in ((["-abort"], "-abort"), (["-nmt", "5"], "-nmt"), (["-tto", "3"], "-tto"),
                       (["-txn", "-nmt", "0"], "-nmt"), (["-txn", "-tto", "0"], "-tto")):
        code, _, err = run(capsys, "perf", *url, "produce", topic, *argv)
        assert code == 2 and flag in err, (argv, err)

    def produced(*argv: str) -> dict[str, Any]:
        code, out, _ = run(capsys, "perf", *url, "produce", topic, "--rate", "0",
                           "--disable-batching", "-o", "json", "-txn", *argv)
        assert code == 0
        return json.loads(out.splitlines()[-1])

    aborted = produced("-m", "200", "-nmt", "50", "-abort")  # first: read past on the way
    assert (aborted["messages"], aborted["txnEnded"], aborted["txnFailed"]) == (200, 4, 0)
    committed = produced("-m", "300", "-nmt", "100")
    assert (committed["messages"], committed["txnEnded"], committed["txnFailed"]) == (300, 3, 0)
    assert committed["txnPerSec"] > 0

    def backlog(sub: str) -> int:
        code, out, _ = run(capsys, "admin", *admin, "topics", "stats", topic, "-o", "json")
        assert code == 0
        return json.loads(out)["subscriptions"][sub]["msgBacklog"]

    for sub, argv in (("kept", ["-txn", "-nmt", "100"]),
                      ("undone", ["-txn", "-nmt", "100", "-abort"]), ("plain", [])):
        assert run(capsys, "admin", *admin, "subscriptions", "create", topic, "-s", sub,
                   "-m", "earliest")[0] == 0
        code, out, _ = run(capsys, "perf", *url, "consume", topic, "-s", sub, "-m", "300",
                           "--time", "60", "-o", "json", *argv)
        summary = json.loads(out.splitlines()[-1])
        # the committed 300 and none of the aborted (in 3 transactions), and it stops
        # there (-m), not at --time
        assert code == 0 and summary["messages"] == 300 and summary["seconds"] < 30
        assert summary.get("txnEnded", 3) == 3
    deadline = time.monotonic() + 10
    while (backlog("kept"), backlog("undone")) != (0, 300) and time.monotonic() < deadline:
        time.sleep(0.05)
    # committed acknowledgements took effect; aborted ones left all 300 unacknowledged
    assert (backlog("kept"), backlog("undone")) == (0, 300)


def test_perf_transaction(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> None:
    """``magnetar perf transaction`` (pulsar-perf's command): each transaction receives and
    acknowledges ``-nmc`` messages and sends ``-nmp``, then commits (or aborts); what it
    leaves is what a commit, an abort, or no transaction at all leaves."""
    tag = uuid.uuid4().hex[:6]
    source, sink = f"perf-in-{tag}", f"perf-out-{tag}"
    url = ["--url", broker.service_url]
    admin = ["--admin-url", broker.web_service_url]
    for argv, flag in ((["-nmc", "0", "-nmp", "0"], "-nmp"), (["--txn-disable", "-abort"], "-abort"),
                       (["-threads", "0"], "-threads"), (["-tto", "0"], "-tto"),
                       (["--topics-p", "bad//name"], "bad//name")):
        code, _, err = run(capsys, "perf", *url, "transaction", "--topics-c", source, *argv)
        assert code == 2 and flag in err, (argv, err)
    code, _, err = run(capsys, "perf", *url, "produce", source, "--rate", "0", "-m", "40",
                       "--disable-batching")
    assert code == 0, err
    assert run(capsys, "admin", *admin, "topics", "create", sink)[0] == 0
    for topic, sub in ((source, "sub"), (sink, "check")):
        assert run(capsys, "admin", *admin, "subscriptions", "create", topic, "-s", sub,
                   "-m", "earliest")[0] == 0

    def backlogs() -> tuple[int, int]:
        found = []
        for topic, sub in ((source, "sub"), (sink, "check")):
            code, out, _ = run(capsys, "admin", *admin, "topics", "stats", topic, "-o", "json")
            assert code == 0
            found.append(json.loads(out)["subscriptions"][sub]["msgBacklog"])
        return found[0], found[1]

    def transactions(*argv: str) -> dict[str, Any]:
        code, out, err = run(capsys, "perf", *url, "transaction", "--topics-c", source,
                             "--topics-p", sink, "-ss", "sub", "-nmc", "2", "-nmp", "3",
                             "-o", "json", *argv)
        assert code == 0, err
        return json.loads(out.splitlines()[-1])

    def settles_at(expected: tuple[int, int]) -> None:
        deadline = time.monotonic() + 10
        while backlogs() != expected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert backlogs() == expected

    committed = transactions("-ntxn", "5", "-threads", "2")
    assert (committed["txnEnded"], committed["txnFailed"], committed["messages"]) == (5, 0, 25)
    settles_at((30, 15))  # 10 acknowledged, 15 sent, both at the commits
    aborted = transactions("-ntxn", "4", "-abort")
    assert (aborted["txnEnded"], aborted["txnFailed"]) == (4, 0)
    settles_at((30, 15))  # the acknowledgements undone, the sends never visible
    plain = transactions("-ntxn", "2", "--txn-disable")
    assert (plain["txnEnded"], plain["messages"]) == (2, 10)
    settles_at((26, 21))
