"""What a new user meets in the first hour (issue 25), one test per item, and a walk of every
CLI subcommand with hostile names and values: the real ``magnetar`` command in a subprocess
against one real broker for the whole module; never a traceback, always one clear line.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

import magnetar.cli.main as cli_main
from magnetar.broker.config import BrokerConfig, ConfigError
from magnetar.cli.main import build_parser, main
from magnetar.testing import StandaloneBroker, standalone

ROOT = Path(__file__).resolve().parents[1]
MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


@pytest.fixture(scope="module")
def broker() -> Iterator[StandaloneBroker]:
    with standalone() as b:
        yield b


def env_for(broker: StandaloneBroker | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    if broker is not None:
        env["MAGNETAR_SERVICE_URL"] = broker.service_url
        env["MAGNETAR_ADMIN_URL"] = broker.web_service_url
    return env


def magnetar(broker: StandaloneBroker | None, *args: str, timeout: float = 60,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """The real ``magnetar`` command, reaching ``broker`` by default."""
    return subprocess.run([*MAGNETAR, *args], capture_output=True, text=True, timeout=timeout,
                          env=env_for(broker), input=stdin, errors="replace")


def one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    """The error line of a failed command: non-zero exit, one line, no traceback."""
    assert out.returncode != 0, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr and "Traceback" not in out.stdout, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def rest(broker: StandaloneBroker, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(broker.web_service_url + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw and "json" in resp.headers.get("Content-Type", "") else raw
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ 1. names


def test_hostile_names_are_one_line_errors_and_valid_ones_reach_the_broker_whole(
        broker: StandaloneBroker) -> None:
    line = one_line_error(magnetar(broker, "admin", "tenants", "create", "bad tenant!"))
    assert "bad tenant!" in line and "letters, digits" in line
    line = one_line_error(magnetar(broker, "admin", "namespaces", "create", "public/bad ns"))
    assert "bad ns" in line
    # the same rule in the REST API: 412, as Pulsar answers an invalid name
    assert rest(broker, "PUT", "/admin/v2/tenants/bad%20tenant", {})[0] == 412
    assert rest(broker, "PUT", "/admin/v2/namespaces/public/%C3%BCn%C3%AF")[0] == 412

    # a topic's local name may hold anything: produce creates it, admin stats and deletes it
    odd = f"bad topic name! {uuid.uuid4().hex[:6]}"
    assert magnetar(broker, "client", "produce", odd, "-m", "x").returncode == 0
    stats = magnetar(broker, "admin", "topics", "stats", odd, "--output", "json")
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["msgInCounter"] == 1
    assert magnetar(broker, "admin", "topics", "delete", odd).returncode == 0
    line = one_line_error(magnetar(broker, "admin", "topics", "stats", odd))
    assert "404" in line

    # '?' and '%' are part of the name, not a query string or an escape
    for name in (f"q?x=1-{uuid.uuid4().hex[:4]}", f"100%-{uuid.uuid4().hex[:4]}"):
        assert magnetar(broker, "admin", "topics", "create", f"public/default/{name}").returncode == 0
        listed = magnetar(broker, "admin", "topics", "list", "public/default").stdout.split("\n")
        assert f"persistent://public/default/{name}" in listed
    client = pulsar.Client(broker.service_url)
    try:
        producer = client.create_producer(f"persistent://public/default/{name}")
        producer.send(b"official")
    finally:
        client.close()
    stats = magnetar(broker, "admin", "topics", "stats", f"public/default/{name}", "--output", "json")
    assert json.loads(stats.stdout)["msgInCounter"] == 1


def test_client_rejects_a_name_the_broker_would_refuse_before_connecting() -> None:
    # no broker at all: the name is checked first, by the same rule
    out = magnetar(None, "client", "--url", f"pulsar://127.0.0.1:{closed_port()}", "produce",
                   "bad tenant!/ns/t", "-m", "x")
    line = one_line_error(out)
    assert out.returncode == 2
    assert "Invalid topic name 'bad tenant!/ns/t'" in line and "ValueError" not in line


# ------------------------------------------------------------------ 2. README: see test_readme.py
# ------------------------------------------------------------------ 3. connection errors


def test_refused_connection_fails_within_the_connection_timeout() -> None:
    url = f"pulsar://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    out = magnetar(None, "client", "--url", url, "produce", "t", "-m", "x")
    took = time.monotonic() - start
    line = one_line_error(out)
    assert url in line and "refused" in line.lower() and "connection timeout" in line
    assert took < 20, took  # 10 s of retries (was 26 s: the operation timeout)


def test_wrong_url_shapes_get_a_hint_at_once(broker: StandaloneBroker) -> None:
    host_port = broker.service_url.split("://", 1)[1]
    web_host_port = broker.web_service_url.split("://", 1)[1]
    cases = [
        (["--url", host_port], "no scheme"),
        (["--url", f"http://{host_port}"], "binary protocol port"),  # HTTP on the binary port
        (["--url", f"pulsar://{web_host_port}"], "answered in HTTP"),  # binary on the HTTP port
        (["--url", "pulsar://no-such-host.invalid:6650"], "unknown host"),
    ]
    for url_args, words in cases:
        start = time.monotonic()
        out = magnetar(None, "client", *url_args, "produce", "t", "-m", "x")
        assert words in one_line_error(out), (url_args, out.stderr)
        assert time.monotonic() - start < 8, url_args  # not the 10 s of a refused connection
    for url, words in [(host_port, "no scheme"), (broker.service_url, "binary protocol URL"),
                       (f"http://{host_port}", "binary protocol port"),
                       (f"http://127.0.0.1:{closed_port()}", "connection refused"),
                       ("http://no-such-host.invalid:8080", "unknown host")]:
        out = magnetar(None, "admin", "--admin-url", url, "tenants", "list")
        assert words in one_line_error(out), (url, out.stderr)


def test_http_request_on_the_binary_port_is_answered_in_http(broker: StandaloneBroker) -> None:
    host, port = broker.service_url.split("://", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"GET /admin/v2/tenants HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400")
    assert b"binary protocol port" in reply


# ------------------------------------------------------------------ 4. bad values


def test_negative_ttl_is_412_and_a_bad_schema_definition_422(broker: StandaloneBroker,
                                                             tmp_path: Path) -> None:
    line = one_line_error(magnetar(broker, "admin", "namespaces", "set-message-ttl",
                                   "public/default", "--messageTTL", "-5"))
    assert "412" in line and "-5" in line
    assert rest(broker, "POST", "/admin/v2/namespaces/public/default/messageTTL", -5)[0] == 412
    assert rest(broker, "GET", "/admin/v2/namespaces/public/default/messageTTL")[1] != -5
    # the same rule in a namespace's Policies body
    ns = f"public/fh-{uuid.uuid4().hex[:6]}"
    status, body = rest(broker, "PUT", f"/admin/v2/namespaces/{ns}", {"message_ttl_in_seconds": -5})
    assert status == 412 and "message TTL" in body["reason"]
    assert rest(broker, "GET", f"/admin/v2/namespaces/{ns}")[0] == 404
    for kind, definition in (("JSON", "{bad"), ("AVRO", '{"type": "nonsense"}')):
        status, body = rest(broker, "POST", "/admin/v2/schemas/public/default/fh-schema/schema",
                            {"type": kind, "schema": definition, "properties": {}})
        assert status == 422 and "definition" in body["reason"], (kind, body)
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps({"type": "JSON", "schema": "{bad"}))
    line = one_line_error(magnetar(broker, "admin", "schemas", "upload", "fh-schema", "-f", str(schema)))
    assert "422" in line


# ------------------------------------------------------------------ 5. configuration


def test_config_typo_suggests_the_key_and_bad_fsync_policy_names_the_line(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="magnetar.broker.config")
    conf = tmp_path / "typo.conf"
    conf.write_text("clusterName=x\nbrokerServicePrt=6651\nnumIOThreads=8\n")
    BrokerConfig.load(conf)
    messages = [r.getMessage() for r in caplog.records]
    assert any(f"{conf}:2: unknown key brokerServicePrt, did you mean brokerServicePort?" in m
               for m in messages), messages
    assert not any("did you mean" in m and "numIOThreads" in m for m in messages)

    bad = tmp_path / "fsync.conf"
    bad.write_text("# durability\nmagnetarFsyncPolicy=sometimes\n")
    with pytest.raises(ConfigError, match=rf"{bad}:2: magnetarFsyncPolicy must be one of "
                                           r"always, group, never, not 'sometimes'"):
        BrokerConfig.load(bad)
    # the real command: the typo's hint, then the bad value's file:line, and exit 2
    both = tmp_path / "both.conf"
    both.write_text("brokerServicePrt=6651\nmagnetarFsyncPolicy=sometimes\n")
    out = magnetar(None, "standalone", "--config", str(both), "--data-dir", str(tmp_path / "d"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"{both}:1: unknown key brokerServicePrt, did you mean brokerServicePort?" in out.stderr
    assert out.stderr.strip().splitlines()[-1] == (
        f"magnetar: {both}:2: magnetarFsyncPolicy must be one of always, group, never, not 'sometimes'")


def test_busy_http_port_names_the_http_port(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("0.0.0.0", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        out = magnetar(None, "standalone", "--data-dir", str(tmp_path / "d"), "--port", "0",
                       "--http-port", str(port))
    assert out.returncode == 1
    line = next(x for x in out.stderr.splitlines() if "cannot listen" in x)
    assert f":{port} (HTTP)" in line and "HTTPS" not in line


@pytest.mark.parametrize(("args", "code", "words"), [
    (["--port", "99999"], 2, "brokerServicePort must be a TCP port"),
    (["--bind-address", "no-such-host.invalid", "--port", "0", "--http-port", "0"], 1, "unknown host"),
    (["--port", "0", "--http-port", "-1", "--ready-file", "/proc/no/such"], 1, "--ready-file"),
    (["--config", "/"], 2, "cannot read config file /"),
])
def test_standalone_refuses_bad_options_in_one_line(tmp_path: Path, args: list[str], code: int,
                                                   words: str) -> None:
    out = magnetar(None, "standalone", "--data-dir", str(tmp_path / "d"), *args)
    assert out.returncode == code, out.stderr
    assert "Traceback" not in out.stderr
    assert words in out.stderr.strip().splitlines()[-1]


# ------------------------------------------------------------------ 6. where a Pulsar user reaches


def test_list_partitioned_topics_and_metrics_with_a_slash(broker: StandaloneBroker) -> None:
    topic = f"persistent://public/default/fh-parts-{uuid.uuid4().hex[:6]}"
    assert magnetar(broker, "admin", "topics", "create-partitioned-topic", topic, "-p", "2").returncode == 0
    out = magnetar(broker, "admin", "topics", "list-partitioned-topics", "public/default")
    assert out.returncode == 0 and topic in out.stdout.split()
    for path in ("/metrics", "/metrics/"):
        with urllib.request.urlopen(broker.web_service_url + path, timeout=30) as resp:
            assert resp.status == 200 and b"pulsar_" in resp.read()


# ------------------------------------------------------------------ 7. messages


def test_error_messages_say_it_once_and_plainly(broker: StandaloneBroker) -> None:
    line = one_line_error(magnetar(broker, "client", "produce", "nope/nope/t", "-m", "x"))
    assert line.count("TopicNotFound") == 1, line
    line = one_line_error(magnetar(broker, "client", "produce", "a/b", "-m", "x"))
    assert "Invalid short topic name 'a/b'" in line and "Error:" not in line
    sub = f"fh-{uuid.uuid4().hex[:6]}"
    line = one_line_error(magnetar(broker, "client", "consume", f"fh-empty-{sub}", "-s", sub,
                                   "-n", "3", "--timeout", "0.5"))
    assert "no message for 0.5 s" in line and "0 of 3" in line and "-p Earliest" in line


# ------------------------------------------------------------------ 9. .gitignore


def test_the_readme_virtualenv_is_ignored() -> None:
    assert ".venv/" in (ROOT / ".gitignore").read_text().split()


# ------------------------------------------------------------------ the walk

#: names a user may type: spaces, slashes, '?', '%', unicode, empty, control characters,
#: bytes that are not UTF-8
HOSTILE_NAMES = ["bad name!", "a/b/c/d/e", "q?x=1", "100%", "ünïcödé/ns/t", "", " ",
                 "tab\there", "persistent://", "public/default/", "../../etc", "x" * 300,
                 "not-utf8-\udcff"]  # the byte 0xff in argv
#: numbers: negative, absurd, not numbers
HOSTILE_NUMBERS = ["-1", "0", "99999999999999999999", "abc", "1e3", "-5s"]


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
           ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [(path, parser)]
    found: list[tuple[tuple[str, ...], argparse.ArgumentParser]] = []
    for action in subs:
        for name, child in action.choices.items():
            found += leaves(child, (*path, name))
    return found


#: options the walk leaves alone: where to connect, how to print, credentials
SKIPPED = {"output", "url", "admin_url", "token_file", "auth_params", "tls_trust_certs",
           "tls_cert_file", "tls_key_file", "log_level", "connection_timeout_ms"}


def hostile_argv(path: tuple[str, ...], parser: argparse.ArgumentParser, i: int,
                 tmp: Path) -> list[str]:
    """``path`` with every positional and required option given a hostile value (the
    ``i``-th of its kind), and numbers where the command takes them."""
    argv = list(path)
    name = HOSTILE_NAMES[i % len(HOSTILE_NAMES)]
    number = HOSTILE_NUMBERS[i % len(HOSTILE_NUMBERS)]
    bad_json = tmp / "bad.json"
    bad_json.write_text('{"type": "JSON", "schema": "{bad"')
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or (
                action.dest in SKIPPED and not (path[0] == "tokens" and action.dest == "token_file")):
            continue
        numeric = action.type in (int, float) or getattr(action.type, "__name__", "") in (
            "seconds", "size_bytes", "int32", "finite")
        flag = action.option_strings[-1] if action.option_strings else ""
        if not action.option_strings:
            argv.append(name)
        elif action.choices:
            if action.required:
                argv += [flag, str(next(iter(action.choices)))]
        elif numeric:
            argv += [flag, number]
        elif action.dest.startswith("output_"):  # a file the command writes
            argv += [flag, str(tmp / f"{action.dest}-{i}")]
        elif action.dest in ("filename", "secret_key", "token_file"):  # a file it reads
            argv += [flag, str(bad_json if i % 2 else tmp / "missing.file")]
        elif action.required or action.dest == "token":
            argv += [flag, name or "x"]
    if path == ("client", "consume"):
        argv += ["--timeout", "0.2"]
    if path[0] == "perf":
        argv += ["--time", "0.5"]
    return argv


#: commands that run a server until stopped: their bad options have tests of their own
SERVERS = ("standalone", "broker")


@pytest.mark.timeout(600)  # one process per leaf command (over 100 now): ~1 s each on a busy machine
def test_walk_every_subcommand_with_hostile_input(broker: StandaloneBroker, tmp_path: Path) -> None:
    """Every leaf command, each with another hostile name and number, as a real process; then
    every hostile value on every command in-process (``main()``: the same code, no process
    start-up), which may not raise."""
    parser = build_parser()
    failures: list[str] = []
    commands = leaves(parser)
    assert len(commands) > 60
    for i, (path, leaf) in enumerate(commands):
        if path[0] in SERVERS:
            continue
        argv = hostile_argv(path, leaf, i, tmp_path)
        out = magnetar(broker, *argv, timeout=60)
        text = out.stdout + out.stderr
        if any(words in text for words in ("Traceback", "internal error", "never retrieved")):
            failures.append(f"{argv}: {text[-500:]}")
        elif out.returncode != 0:
            last = out.stderr.strip().splitlines()[-1:] or [""]
            if not last[0].startswith("magnetar"):
                failures.append(f"{argv}: no clear error line: {out.stderr[-300:]!r}")
            elif out.returncode == 1 and len(out.stderr.strip().splitlines()) != 1:
                failures.append(f"{argv}: more than one line: {out.stderr[-300:]!r}")
    assert not failures, "\n".join(failures)


@pytest.fixture
def cli_env(broker: StandaloneBroker, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAGNETAR_SERVICE_URL", broker.service_url)
    monkeypatch.setenv("MAGNETAR_ADMIN_URL", broker.web_service_url)
    # one parser for the whole walk: building it takes ~0.1 s, parsing leaves it as it was,
    # and the walk calls main() over 2,000 times
    parser = build_parser()
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)


@pytest.mark.timeout(600)  # every hostile value on every command (over 100 of them)
def test_walk_every_hostile_value_in_process(broker: StandaloneBroker, cli_env: None,
                                             tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    failures: list[str] = []
    for path, leaf in leaves(build_parser()):
        if path[0] in (*SERVERS, "perf", "tokens") or path == ("client", "consume"):
            continue  # they wait, or make keys, by design: the process walk covers them
        for i in range(max(len(HOSTILE_NAMES), len(HOSTILE_NUMBERS))):
            argv = hostile_argv(path, leaf, i, tmp_path)
            try:
                main(argv)
            except SystemExit as exc:  # argparse: a usage error, exit 2
                if exc.code != 2:
                    failures.append(f"{argv}: SystemExit({exc.code})")
            except BaseException as exc:
                failures.append(f"{argv}: {type(exc).__name__}: {exc}")
            err = capsysbinary.readouterr().err.decode(errors="replace")
            if "internal error" in err:
                failures.append(f"{argv}: {err.strip()}")
    assert not failures, "\n".join(failures)
