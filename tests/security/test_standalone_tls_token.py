"""The README's security recipe end to end: ``magnetar tokens`` makes the key and token,
``magnetar standalone`` runs TLS only with token authentication and authorization, and the
official client gets in over ``pulsar+ssl://`` with the token and only with it."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pulsar
import pytest

from tests.broker.brokerproc import SILENT, free_port
from tests.security.pki import Pki

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


def test_tls_only_token_broker(tmp_path: Path, pki: Pki) -> None:
    key = tmp_path / "my-secret.key"
    subprocess.run([*MAGNETAR, "tokens", "create-secret-key", "--output", str(key)], check=True,
                   timeout=60)
    token = subprocess.run([*MAGNETAR, "tokens", "create", "--secret-key", f"file://{key}",
                            "--subject", "app"], check=True, capture_output=True, text=True,
                           timeout=60).stdout.strip()
    admin = subprocess.run([*MAGNETAR, "tokens", "create", "--secret-key", f"file://{key}",
                            "--subject", "admin"], check=True, capture_output=True, text=True,
                           timeout=60).stdout.strip()
    cert, cert_key = pki.issue("localhost", server=True, stem="standalone")
    port = free_port()
    conf = tmp_path / "broker.conf"
    conf.write_text("\n".join([
        "brokerServicePort=-1",
        f"brokerServicePortTls={port}",
        f"tlsCertificateFilePath={cert}",
        f"tlsKeyFilePath={cert_key}",
        "authenticationEnabled=true",
        "authenticationProviders=org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        f"tokenSecretKey=file://{key}",
        "authorizationEnabled=true",
        "superUserRoles=admin",
        "",
    ]))
    log = tmp_path / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*MAGNETAR, "standalone", "--config", str(conf), "--data-dir",
                                 str(tmp_path / "data"), "--http-port", "0",
                                 "--bind-address", "127.0.0.1"], stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.02)
        url = f"pulsar+ssl://localhost:{port}"
        client = pulsar.Client(url, authentication=pulsar.AuthenticationToken(admin),
                               tls_trust_certs_file_path=str(pki.ca_file),
                               operation_timeout_seconds=10, logger=SILENT)
        try:
            consumer = client.subscribe("secure", "s")
            client.create_producer("secure").send(b"only for token holders")
            assert consumer.receive(timeout_millis=10000).data() == b"only for token holders"
        finally:
            client.close()
        app = pulsar.Client(url, authentication=pulsar.AuthenticationToken(token),
                            tls_trust_certs_file_path=str(pki.ca_file),
                            operation_timeout_seconds=5, logger=SILENT)
        try:  # authenticated, but not granted anything
            with pytest.raises(pulsar.AuthorizationError):
                app.create_producer("secure")
        finally:
            app.close()
        anonymous = pulsar.Client(url, tls_trust_certs_file_path=str(pki.ca_file),
                                  operation_timeout_seconds=2, logger=SILENT)
        try:
            with pytest.raises(pulsar.PulsarException):
                anonymous.create_producer("secure")
        finally:
            anonymous.close()
        assert "pulsar+ssl://" in log.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert proc.returncode == 0, log.read_text()
