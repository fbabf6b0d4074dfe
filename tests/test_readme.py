"""The README's configuration section names exactly the keys the broker implements, and its
examples run as written: the quick start's shell block, and every Python block (each in a
fresh interpreter, against a broker of its own; only its addresses and paths replaced)."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from magnetar.broker.config import BrokerConfig

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_lists_every_implemented_key_and_no_other() -> None:
    text = README.read_text()
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"`([a-z][A-Za-z]+)`", section))
    implemented = {f.name for f in dataclasses.fields(BrokerConfig) if f.name != "unknown_keys"}
    assert implemented - listed == set(), "implemented but not in the README"
    assert {k for k in listed - implemented if k[0].islower() and any(c.isupper() for c in k)} == set()


def quick_start() -> list[str]:
    """The command lines of the README's quick start block (comments kept: bash drops them)."""
    text = README.read_text()
    block = text.split("The quick start, with `magnetar standalone` running", 1)[1]
    block = block.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


def test_quick_start_runs_top_to_bottom_as_written(tmp_path: Path) -> None:
    """The block, line by line in one shell (``set -e``) in an empty directory (a fresh
    clone's), against a broker of its own (reached through $MAGNETAR_SERVICE_URL and
    $MAGNETAR_ADMIN_URL, as the README says): every command finishes and succeeds."""
    from magnetar.testing import standalone

    lines = quick_start()
    assert any(line.startswith("magnetar client consume") for line in lines)
    script = "set -euo pipefail\nmagnetar() { \"$PYTHON\" -m magnetar.cli.main \"$@\"; }\n" + "\n".join(lines)
    with standalone() as broker:
        env = dict(os.environ, PYTHON=sys.executable,
                   MAGNETAR_SERVICE_URL=broker.service_url, MAGNETAR_ADMIN_URL=broker.web_service_url,
                   PYTHONPATH=os.pathsep.join(p for p in (str(README.parent / "src"),
                                                          os.environ.get("PYTHONPATH")) if p))
        out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("content:hello") == 10
    assert "10 messages successfully consumed" in out.stderr
    assert "persistent://acme/orders/new" in out.stdout


def python_blocks() -> list[str]:
    """Every ```python block of the README, in order."""
    return re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(README.parent / "src"), os.environ.get("PYTHONPATH")) if p))


def run_python(code: str, cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``code`` as a script of its own in a fresh interpreter (``args``: run as
    ``python -m ...`` on that file instead), failing the test with its output if it fails."""
    script = cwd / "readme_block.py"
    script.write_text(code)
    cmd = [sys.executable, *args, str(script)] if args else [sys.executable, str(script)]
    out = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"README block failed:\n{code}\n--- stdout\n{out.stdout}\n--- stderr\n{out.stderr}"
    return out


def _block(marker: str) -> str:
    found = [b for b in python_blocks() if marker in b]
    assert len(found) == 1, f"expected one README Python block with {marker!r}, found {len(found)}"
    return found[0]


#: what tells each Python block apart (a test below runs each one)
MARKERS = {"official": "producer = client.create_producer(\"my-topic\")", "asyncio": "asyncio.run(main())",
           "pytest": "def test_roundtrip(magnetar_broker)", "tls": "pulsar+ssl://localhost:6651",
           "spark": "spark.readStream", "transactions": "enable_transaction=True"}


def test_every_python_block_is_run() -> None:
    """A new Python block needs its runner here (a block no test runs can rot)."""
    blocks = python_blocks()
    for block in blocks:
        assert sum(m in block for m in MARKERS.values()) == 1, f"no runner (or several) for:\n{block}"
    assert len(blocks) == len(MARKERS)


def test_transactions_example_runs(tmp_path: Path) -> None:
    """The Transactions block: a consume-transform-produce in one transaction, committed."""
    from magnetar.testing import standalone

    with standalone() as broker:
        out = run_python(_block(MARKERS["transactions"]).replace(
            "pulsar://localhost:6650", broker.service_url), tmp_path)
    assert "COMMITTED" in out.stdout


def test_official_client_and_asyncio_examples_run(tmp_path: Path) -> None:
    """The two "Using it" blocks, one after the other against one broker: each sends hello
    and receives it (the asyncio one prints it)."""
    from magnetar.testing import standalone

    with standalone() as broker:
        run_python(_block(MARKERS["official"]).replace("pulsar://localhost:6650", broker.service_url), tmp_path)
        out = run_python(_block(MARKERS["asyncio"]).replace("pulsar://localhost:6650", broker.service_url),
                         tmp_path)
    assert out.stdout.strip() == "b'hello'"


def test_pytest_plugin_example_runs(tmp_path: Path) -> None:
    """The testing block as a test file of its own, run by pytest with the installed plugin
    (its ``magnetar_broker`` fixture starts the broker)."""
    test_file = tmp_path / "test_example.py"
    test_file.write_text(_block(MARKERS["pytest"]))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                         cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed" in out.stdout


def _security_shell_block() -> str:
    text = README.read_text()
    block = text.split("**From a fresh machine to a broker that only lets in a token holder", 1)[1]
    return block.split("```bash\n", 1)[1].split("```", 1)[0]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the security example needs openssl")
def test_security_example_runs(tmp_path: Path) -> None:
    """The security section's shell block (keys, token, certificate, secure.conf; with
    /etc/magnetar a temporary directory, the install and the broker's start left to the
    test), a broker started with the secure.conf it wrote, then the Python block: a token
    holder produces over TLS."""
    from magnetar.testing import standalone

    etc = tmp_path / "etc"
    etc.mkdir()
    lines = _security_shell_block().replace("/etc/magnetar", str(etc)).splitlines()
    assert lines[0] == "pip install -e ." and lines[-1].startswith("magnetar standalone --config secure.conf")
    script = ("set -euo pipefail\nmagnetar() { \"$PYTHON\" -m magnetar.cli.main \"$@\"; }\n"
              + "\n".join(lines[1:-1]))
    out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=dict(_env(), PYTHON=sys.executable),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    settings: dict[str, object] = {}
    for line in (tmp_path / "secure.conf").read_text().splitlines():
        key, _, value = line.partition("=")
        settings[key] = value
    assert settings.pop("brokerServicePort") == "-1"  # the test's own plain port stays (readiness)
    settings["brokerServicePortTls"] = 0  # a free port instead of 6651
    with standalone(settings) as broker:
        assert broker.service_url_tls is not None
        tls_url = broker.service_url_tls.replace("127.0.0.1", "localhost")
        run_python(_block(MARKERS["tls"]).replace("pulsar+ssl://localhost:6651", tls_url)
                   .replace("/etc/magnetar", str(etc)), tmp_path)
        status = subprocess.run(
            [sys.executable, "-m", "magnetar.cli.main", "admin", "--admin-url", broker.web_service_url,
             "--token-file", str(tmp_path / "app.token"), "topics", "stats", "my-topic", "-o", "json"],
            env=_env(), capture_output=True, text=True, timeout=60)
    assert '"msgInCounter": 1' in status.stdout, status.stdout + status.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(importlib.util.find_spec("pyspark") is None or shutil.which("java") is None,
                    reason="the Spark example needs pyspark and Java")
def test_spark_example_runs(tmp_path: Path) -> None:
    """The Spark block with a local session (``spark`` is the one name it takes as given):
    the batch read sees what is stored, the stream upper-cases every matching topic into
    upper-clicks (an output topic the pattern matched too, as the block once had, would
    feed the stream its own output without end)."""
    import pulsar

    from magnetar.testing import standalone

    prelude = (
        "import os, sys\n"
        "os.environ['PYSPARK_PYTHON'] = os.environ['PYSPARK_DRIVER_PYTHON'] = sys.executable\n"
        "from pyspark.sql import SparkSession\n"
        "spark = (SparkSession.builder.master('local[2]').config('spark.ui.enabled', 'false')"
        ".config('spark.sql.shuffle.partitions', '2').getOrCreate())\n"
        "spark.sparkContext.setLogLevel('ERROR')\n")
    epilogue = "\nq.processAllAvailable()\nq.stop()\nprint('batch rows', df.count())\nspark.stop()\n"
    with standalone() as broker:
        client = pulsar.Client(broker.service_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
        try:
            for topic in ("clicks", "clicks-a"):
                producer = client.create_producer(topic)
                for i in range(3):
                    producer.send(f"{topic} {i}".encode())
            code = (_block(MARKERS["spark"]).replace("pulsar://localhost:6650", broker.service_url)
                    .replace("/tmp/ckpt", str(tmp_path / "ckpt")))
            out = run_python(prelude + code + epilogue, tmp_path, timeout=400)
            assert "batch rows 3" in out.stdout
            reader = client.create_reader("upper-clicks", pulsar.MessageId.earliest)
            got = set()
            while reader.has_message_available():
                got.add(reader.read_next(timeout_millis=10000).data().decode())
        finally:
            client.close()
    assert got == {f"CLICKS-A {i}" for i in range(3)}  # clicks-.* matches clicks-a only
