"""magnetar.testing: the context manager and the pytest plugin's fixture, used the way a
Pulsar user's test suite would (a separate pytest run with the plugin loaded)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pulsar

from magnetar.testing import standalone
from tests.admin.conftest import QUIET

SRC = str(Path(__file__).resolve().parents[2] / "src")


def test_context_manager_gives_working_urls_and_cleans_up() -> None:
    with standalone() as broker:
        client = pulsar.Client(broker.service_url, logger=QUIET)
        producer = client.create_producer("roundtrip")
        consumer = client.subscribe("roundtrip", "s", initial_position=pulsar.InitialPosition.Earliest)
        producer.send(b"hello")
        assert consumer.receive(timeout_millis=10000).data() == b"hello"
        client.close()
        with urllib.request.urlopen(broker.web_service_url + "/admin/v2/brokers/health") as resp:
            assert resp.read() == b"ok"
        data_dir = broker.data_dir
        assert data_dir.exists()
    assert broker.process.returncode == 0  # a clean SIGTERM stop
    assert not data_dir.exists()


def test_pytest_plugin_fixture(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        "import pulsar, urllib.request\n"
        "def test_it(magnetar_broker):\n"
        "    client = pulsar.Client(magnetar_broker.service_url)\n"
        "    client.create_producer('t').send(b'x')\n"
        "    client.close()\n"
        "    url = magnetar_broker.web_service_url + '/admin/v2/persistent/public/default'\n"
        "    assert 'persistent://public/default/t' in urllib.request.urlopen(url).read().decode()\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SRC, os.environ.get("PYTHONPATH", "")]))
    # installed, the pytest11 entry point loads the plugin; from a source tree, -p does
    installed = any(ep.value == "magnetar.testing.plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    load = [] if installed else ["-p", "magnetar.testing.plugin"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *load, "-p", "no:cacheprovider",
         str(tmp_path / "test_user.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout
