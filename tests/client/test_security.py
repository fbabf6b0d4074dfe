"""Authentication (token, basic, challenges), TLS and lookup redirects, against a stub."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from magnetar.client import AuthenticationBasic, AuthenticationToken, Client, ConnectError
from magnetar.protocol import parse_payload_part
from tests.client.conftest import run
from tests.client.stub_broker import StubBroker


@pytest.fixture(scope="module")
def cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("tls")
    key, crt = d / "key.pem", d / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(crt), "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                   check=True, capture_output=True)
    return crt, key


async def _produce(url: str, **kwargs: object) -> None:
    async with Client(url, **kwargs) as client:  # type: ignore[arg-type]
        p = await client.create_producer("secure-topic")
        await p.send(b"secret")


def test_token_auth_in_connect() -> None:
    async def main() -> None:
        stub = await StubBroker().start()
        await _produce(stub.url, authentication=AuthenticationToken("tok-123"))
        assert stub.connects[0].auth_method_name == "token"
        assert stub.connects[0].auth_data == b"tok-123"
        assert parse_payload_part(stub.sent[0])[1] == b"secret"
        await stub.stop()

    run(main)


def test_basic_auth_answers_challenge() -> None:
    async def main() -> None:
        stub = await StubBroker(challenge=True).start()
        await _produce(stub.url, authentication=AuthenticationBasic("alice", "s3cret"))
        assert stub.connects[0].auth_method_name == "basic"
        assert stub.connects[0].auth_data == b"alice:s3cret"
        assert stub.auth_responses[0].response.auth_method_name == "basic"
        assert stub.auth_responses[0].response.auth_data == b"alice:s3cret"
        await stub.stop()

    run(main)


def test_token_supplier_called_per_connection() -> None:
    calls = []

    def supplier() -> str:
        calls.append(1)
        return f"t{len(calls)}"

    async def main() -> None:
        stub = await StubBroker().start()
        await _produce(stub.url, authentication=AuthenticationToken(supplier))
        assert stub.connects[0].auth_data == b"t1"
        await stub.stop()

    run(main)


def test_tls(cert: tuple[Path, Path]) -> None:
    crt, key = cert

    async def main() -> None:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(crt, key)
        stub = await StubBroker(ssl_context=ctx).start()
        assert stub.url.startswith("pulsar+ssl://")
        await _produce(stub.url, tls_trust_certs_file_path=str(crt), tls_validate_hostname=True)
        assert len(stub.sent) == 1
        # without trusting the certificate the handshake fails
        with pytest.raises(ConnectError):
            await _produce(stub.url, connection_timeout_ms=3000)
        # an explicit context works too
        client_ctx = ssl.create_default_context(cafile=str(crt))
        await _produce(stub.url, ssl_context=client_ctx)
        assert len(stub.sent) == 2
        await stub.stop()

    run(main)


def test_lookup_redirect() -> None:
    async def main() -> None:
        owner = await StubBroker().start()
        front = await StubBroker(redirect_to=owner).start()
        await _produce(front.url)
        assert front.lookups and not front.lookups[0].authoritative
        assert owner.lookups and owner.lookups[0].authoritative  # followed with the flag
        assert len(owner.sent) == 1 and not front.sent
        await owner.stop()
        await front.stop()

    run(main)


def test_keepalive_ping_pong_and_listener_name() -> None:
    async def main() -> None:
        stub = await StubBroker().start()
        stub.ping_on_connect = True
        async with Client(stub.url, keep_alive_interval_seconds=0.05,
                          listener_name="internal") as client:
            p = await client.create_producer("ka-topic")
            await p.send(b"x")
            # our pings go out on the keep-alive interval; the stub's ping was answered
            while stub.pings < 2:
                await p.send(b"y")
            assert stub.pongs == 1
        assert stub.lookups[0].advertised_listener_name == "internal"
        await stub.stop()

    run(main)
