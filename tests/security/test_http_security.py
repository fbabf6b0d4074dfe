"""The HTTP side of security against a real ``magnetar standalone``: token and client-certificate
authentication on every admin/lookup/metrics request (401), authorization (403) for
superusers, tenant admins and granted roles, the permission endpoints, HTTPS on
``webServicePortTls``, the official client's and ours HTTP lookup over ``https://`` with a token, and
``magnetar admin`` with ``--token-file`` over HTTPS."""

from __future__ import annotations

import asyncio
import base64
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

import magnetar.client
from magnetar.broker.security.auth.passwords import md5_crypt
from magnetar.cli.tokens import create_secret_key, create_token
from magnetar.client import AuthenticationBasic, AuthenticationToken, MessageId
from magnetar.client.errors import AuthenticationError, ServerError
from magnetar.testing import StandaloneBroker, standalone
from tests.security.pki import Pki

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]


class Secured:
    def __init__(self, broker: StandaloneBroker, key: Path, pki: Pki) -> None:
        self.broker = broker
        self.key = key
        self.pki = pki
        assert broker.web_service_url_tls and broker.service_url_tls
        self.https = broker.web_service_url_tls.replace("localhost", "127.0.0.1")
        self.http = broker.web_service_url

    def token(self, role: str) -> str:
        return create_token(role, secret_key=f"file://{self.key}")

    def context(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca_file))
        if cert is not None:
            ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        return ctx

    def call(self, method: str, path: str, role: str | None = None, body: Any = None,
             tls: bool = False, cert: tuple[Path, Path] | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, Any]:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        if role is not None:
            hdrs["Authorization"] = f"Bearer {self.token(role)}"
        data = json.dumps(body).encode() if body is not None else None
        base = self.https if tls or cert is not None else self.http
        req = urllib.request.Request(base + path, data=data, method=method, headers=hdrs)
        ctx = self.context(cert) if base.startswith("https") else None
        try:
            with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw and "json" in resp.headers.get(
                    "Content-Type", "") else raw.decode()
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, json.loads(raw) if "json" in exc.headers.get("Content-Type", "") else raw

    def ok(self, method: str, path: str, role: str = "admin", body: Any = None) -> Any:
        status, answer = self.call(method, path, role, body)
        assert 200 <= status < 300, (method, path, status, answer)
        return answer


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, pki: Pki) -> Iterator[Secured]:
    d = tmp_path_factory.mktemp("httpsec")
    key = d / "secret.key"
    key.write_bytes(create_secret_key())
    users = d / "users.conf"
    users.write_text(f"basic-user:{md5_crypt(b'right password', 'saltsalt')}\n")
    cert, cert_key = pki.issue("localhost", server=True, stem="httpsec-broker")
    settings = {
        "brokerServicePortTls": 0,
        "webServicePortTls": 0,
        "tlsCertificateFilePath": cert,
        "tlsKeyFilePath": cert_key,
        "tlsTrustCertsFilePath": pki.ca_file,
        "authenticationEnabled": True,
        "authenticationProviders":
            "org.apache.pulsar.broker.authentication.AuthenticationProviderToken,"
            "org.apache.pulsar.broker.authentication.AuthenticationProviderTls,"
            "org.apache.pulsar.broker.authentication.AuthenticationProviderBasic",
        "tokenSecretKey": f"file://{key}",
        "basicAuthConf": users,
        "authorizationEnabled": True,
        "superUserRoles": "admin,cert-admin,proxy",
        "proxyRoles": "proxy",
        "authenticateMetricsEndpoint": True,
    }
    with standalone(settings) as broker:
        yield Secured(broker, key, pki)


def _tenant(s: Secured, admin_roles: list[str]) -> str:
    tenant = f"t-{uuid.uuid4().hex[:8]}"
    s.ok("PUT", f"/admin/v2/tenants/{tenant}", body={"adminRoles": admin_roles})
    s.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    return tenant


@pytest.mark.parametrize("path", [
    "/admin/v2/tenants", "/admin/v2/brokers/health", "/metrics", "/admin/v2/openapi.json",
    "/lookup/v2/topic/persistent/public/default/x",
    "/admin/v2/persistent/public/default/x/partitions",
])
def test_without_credentials_every_path_is_401(secured: Secured, path: str) -> None:
    for tls in (False, True):
        status, answer = secured.call("GET", path, tls=tls)
        assert status == 401 and "Authentication required" in answer["reason"], (path, tls, answer)
    status, answer = secured.call("GET", path, headers={"Authorization": "Bearer not-a-jwt"})
    assert status == 401 and answer["reason"]
    other = create_token("admin", secret_key="data:;base64,"
                         + base64.b64encode(create_secret_key()).decode())
    status, _ = secured.call("GET", path, headers={"Authorization": f"Bearer {other}"})
    assert status == 401
    wrong = base64.b64encode(b"basic-user:wrong password").decode()
    assert secured.call("GET", path, headers={"Authorization": f"Basic {wrong}"})[0] == 401


def test_basic_credentials_over_http(secured: Secured) -> None:
    right = base64.b64encode(b"basic-user:right password").decode()
    status, _ = secured.call("GET", "/metrics", headers={"Authorization": f"Basic {right}"})
    assert status == 200
    status, answer = secured.call("GET", "/admin/v2/tenants", tls=True,
                                  headers={"Authorization": f"Basic {right}"})
    assert status == 403 and "basic-user" in answer["reason"]


def test_superuser_may_do_everything_others_are_403(secured: Secured) -> None:
    assert secured.call("GET", "/admin/v2/brokers/health", "admin")[0] == 200
    assert secured.call("GET", "/metrics", "someone")[0] == 200  # authenticated is enough
    for method, path in [("GET", "/admin/v2/tenants"), ("GET", "/admin/v2/clusters"),
                         ("GET", "/admin/v2/brokers/health"), ("PUT", "/admin/v2/tenants/x"),
                         ("DELETE", "/admin/v2/tenants/public")]:
        status, answer = secured.call(method, path, "someone")
        assert status == 403 and "someone" in answer["reason"], (method, path, answer)


def test_tenant_admin_administers_only_its_tenant(secured: Secured) -> None:
    tenant = _tenant(secured, ["alice"])
    s = secured
    assert s.call("PUT", f"/admin/v2/namespaces/{tenant}/ns2", "alice")[0] == 204
    assert s.call("POST", f"/admin/v2/namespaces/{tenant}/ns2/messageTTL", "alice", 60)[0] == 204
    assert s.call("PUT", f"/admin/v2/persistent/{tenant}/ns2/t", "alice")[0] == 204
    assert s.call("GET", f"/admin/v2/persistent/{tenant}/ns2/t/stats", "alice")[0] == 200
    assert s.call("GET", f"/admin/v2/tenants/{tenant}", "alice")[0] == 200
    assert s.call("POST", f"/admin/v2/namespaces/{tenant}/ns2/permissions/bob", "alice",
                  ["produce", "consume"])[0] == 204
    assert s.call("GET", f"/admin/v2/namespaces/{tenant}/ns2/permissions", "alice") == (
        200, {"bob": ["consume", "produce"]})
    # not its tenant, not tenant-level or cluster-level operations
    for method, path, body in [
        ("PUT", "/admin/v2/namespaces/public/alice-ns", None),
        ("GET", "/admin/v2/namespaces/public/default/permissions", None),
        ("POST", "/admin/v2/namespaces/public/default/permissions/alice", ["produce"]),
        ("POST", f"/admin/v2/tenants/{tenant}", {"adminRoles": ["alice", "mallory"]}),
        ("DELETE", f"/admin/v2/tenants/{tenant}", None),
        ("GET", "/admin/v2/clusters", None),
    ]:
        status, answer = s.call(method, path, "alice", body)
        assert status == 403, (method, path, status, answer)
    # a role with produce/consume is not an admin
    for method, path, body in [
        ("PUT", f"/admin/v2/namespaces/{tenant}/bob-ns", None),
        ("POST", f"/admin/v2/namespaces/{tenant}/ns2/permissions/bob", ["produce", "functions"]),
        ("DELETE", f"/admin/v2/persistent/{tenant}/ns2/t", None),
    ]:
        assert s.call(method, path, "bob", body)[0] == 403, (method, path)
    s.ok("DELETE", f"/admin/v2/namespaces/{tenant}/ns2/permissions/bob", "alice")
    assert s.ok("GET", f"/admin/v2/namespaces/{tenant}/ns2/permissions", "alice") == {}


def test_lookup_and_topic_reads_need_a_permission(secured: Secured) -> None:
    s = secured
    tenant = _tenant(s, ["alice"])
    topic = f"{tenant}/ns/orders"
    lookup = f"/lookup/v2/topic/persistent/{topic}"
    assert s.call("GET", lookup, "carol")[0] == 403
    assert s.call("GET", f"/admin/v2/persistent/{topic}/partitions", "carol")[0] == 403
    assert s.call("GET", f"/admin/v2/namespaces/{tenant}/ns/topics", "carol")[0] == 403
    s.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/carol", "alice", ["consume"])
    status, answer = s.call("GET", lookup, "carol", tls=True)
    assert status == 200 and answer["brokerUrlTls"].startswith("pulsar+ssl://127.0.0.1:")
    assert answer["httpUrlTls"] == s.https
    assert answer["httpUrl"] == s.http  # the plain one, even when asked over HTTPS
    assert s.call("GET", f"/admin/v2/persistent/{topic}/partitions", "carol")[0] == 200
    assert s.call("GET", f"/admin/v2/namespaces/{tenant}/ns/topics", "carol")[0] == 200
    # consume covers subscriptions, not administration
    assert s.call("GET", f"/admin/v2/persistent/{topic}/subscriptions", "carol")[0] != 403
    assert s.call("PUT", f"/admin/v2/persistent/{topic}/unload", "carol")[0] == 403
    # a tenant admin looks up anything in its tenant
    assert s.call("GET", lookup, "alice")[0] == 200


def test_topic_permissions(secured: Secured) -> None:
    s = secured
    tenant = _tenant(s, ["alice"])
    s.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/ns-reader", "alice", ["consume"])
    base = f"/admin/v2/persistent/{tenant}/ns/orders/permissions"
    assert s.call("POST", base + "/dave", "alice", ["produce"])[0] == 204
    assert s.ok("GET", base, "alice") == {"dave": ["produce"], "ns-reader": ["consume"]}
    assert s.call("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/orders", "dave")[0] == 200
    assert s.call("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/other", "dave")[0] == 403
    status, answer = s.call("POST", base + "/dave", "alice", ["fly"])
    assert status == 400 and "fly" in answer["reason"]
    assert s.call("POST", base + "/dave", "alice", {"not": "a list"})[0] == 400
    assert s.call("POST", base + "/eve", "dave", ["produce"])[0] == 403
    assert s.call("DELETE", base + "/dave", "alice")[0] == 204
    status, answer = s.call("DELETE", base + "/dave", "alice")
    assert status == 412 and "topic level" in answer["reason"]
    assert s.call("GET", f"/lookup/v2/topic/persistent/{tenant}/ns/orders", "dave")[0] == 403
    assert s.call("GET", f"/admin/v2/persistent/{tenant}/nope/orders/permissions", "admin")[0] == 404


def test_client_certificate_is_the_role(secured: Secured) -> None:
    s = secured
    assert s.call("GET", "/admin/v2/tenants", cert=s.pki.issue("cert-admin"))[0] == 200
    status, answer = s.call("GET", "/admin/v2/tenants", cert=s.pki.issue("cert-nobody"))
    assert status == 403 and "cert-nobody" in answer["reason"]


def test_client_certificate_of_another_ca_fails_the_handshake(secured: Secured,
                                                              other_pki: Pki) -> None:
    with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
        secured.call("GET", "/admin/v2/tenants", cert=other_pki.issue("cert-admin"))


def test_official_client_over_https_with_a_token(secured: Secured) -> None:
    s = secured
    tenant = _tenant(s, ["alice"])
    s.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/app", "alice", ["produce", "consume"])
    topic = f"persistent://{tenant}/ns/events"
    client = pulsar.Client(s.https, authentication=pulsar.AuthenticationToken(s.token("app")),
                           tls_trust_certs_file_path=str(s.pki.ca_file),
                           operation_timeout_seconds=10, logger=QUIET)
    try:
        consumer = client.subscribe(topic, "sub")
        client.create_producer(topic).send(b"over https lookup")
        assert consumer.receive(timeout_millis=10000).data() == b"over https lookup"
    finally:
        client.close()
    stranger = pulsar.Client(s.https, authentication=pulsar.AuthenticationToken(s.token("stranger")),
                             tls_trust_certs_file_path=str(s.pki.ca_file),
                             operation_timeout_seconds=5, logger=QUIET)
    try:
        with pytest.raises(Exception):  # noqa: B017 - the client maps the 403 its own way
            stranger.create_producer(topic)
    finally:
        stranger.close()


def test_our_client_over_https_with_a_token_and_basic_credentials(secured: Secured) -> None:
    s = secured
    tenant = _tenant(s, ["alice"])
    s.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/app", "alice", ["produce", "consume"])
    s.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/basic-user", "alice", ["consume"])
    s.ok("PUT", f"/admin/v2/persistent/{tenant}/ns/events/partitions", "alice", 2)
    topic = f"persistent://{tenant}/ns/events"

    async def use() -> None:
        tls = {"tls_trust_certs_file_path": str(s.pki.ca_file), "operation_timeout_seconds": 5}
        async with magnetar.client.Client(
                s.https, authentication=AuthenticationToken(s.token("app")), **tls) as client:
            assert await client.get_topic_partitions(topic) == [
                f"{topic}-partition-0", f"{topic}-partition-1"]
            consumer = await client.subscribe(topic, "sub")
            producer = await client.create_producer(topic)
            await producer.send(b"over https lookup")
            assert (await consumer.receive()).data() == b"over https lookup"
            # the lookup named the TLS broker URL: the binary connections are TLS too
            assert all(address.startswith("pulsar+ssl://") for address in client._pool._conns)
        async with magnetar.client.Client(
                s.https, authentication=AuthenticationBasic("basic-user", "right password"),
                **tls) as client:
            reader = await client.create_reader(topic, MessageId.earliest)  # may consume
            assert (await reader.read_next(timeout_millis=10000)).data() == b"over https lookup"
            with pytest.raises(ServerError, match="AuthorizationError"):  # consume only
                await client.create_producer(topic + "-partition-0")
        async with magnetar.client.Client(
                s.https, authentication=AuthenticationToken(s.token("stranger")), **tls) as client:
            with pytest.raises(ServerError, match=r"AuthorizationError: .*HTTP 403"):
                await client.create_producer(topic)
        async with magnetar.client.Client(s.https, **tls) as client:
            with pytest.raises(AuthenticationError, match="401"):
                await client.get_topic_partitions(topic)

    asyncio.run(use())


def _cli(s: Secured, token_file: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [*MAGNETAR, "admin", "--admin-url", s.https, "--tls-trust-certs-file-path",
           str(s.pki.ca_file)]
    if token_file is not None:
        cmd += ["--token-file", str(token_file)]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=60)


def test_cli_grants_over_https_with_a_token(secured: Secured, tmp_path: Path) -> None:
    s = secured
    tenant = _tenant(s, ["alice"])
    token_file = tmp_path / "alice.jwt"
    token_file.write_text(s.token("alice") + "\n")
    ns = f"{tenant}/ns"
    done = _cli(s, token_file, "namespaces", "grant-permission", ns, "--role", "app",
                "--actions", "produce,consume")
    assert done.returncode == 0, done.stderr
    done = _cli(s, token_file, "namespaces", "permissions", ns, "--output", "json")
    assert json.loads(done.stdout) == {"app": ["consume", "produce"]}, done.stderr
    topic = f"persistent://{ns}/t"
    assert _cli(s, token_file, "topics", "grant-permission", topic, "--role", "reader",
                "--actions", "consume").returncode == 0
    done = _cli(s, token_file, "topics", "permissions", topic, "--output", "json")
    assert json.loads(done.stdout) == {"app": ["consume", "produce"], "reader": ["consume"]}
    done = subprocess.run([*MAGNETAR, "admin", "topics", "revoke-permission", topic, "--role",
                           "reader", "--admin-url", s.https, "--token-file", str(token_file),
                           "--tls-trust-certs-file-path", str(s.pki.ca_file)],
                          capture_output=True, text=True, timeout=60)  # options after the command
    assert done.returncode == 0, done.stderr
    assert _cli(s, token_file, "namespaces", "revoke-permission", ns, "--role", "app").returncode == 0
    assert json.loads(_cli(s, token_file, "topics", "permissions", topic, "-o", "json").stdout) == {}
    done = _cli(s, None, "namespaces", "permissions", ns)
    assert done.returncode == 1 and "401" in done.stderr
    done = subprocess.run([*MAGNETAR, "admin", "--admin-url", s.https, "--auth-params",
                           f"file://{token_file}", "--tls-trust-certs-file-path",
                           str(s.pki.ca_file), "tenants", "list"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "403" in done.stderr


def test_a_proxy_acts_for_its_client(secured: Secured) -> None:
    s = secured
    tenant = _tenant(s, ["alice"])
    s.ok("POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/app", "alice", ["consume"])
    lookup = f"/lookup/v2/topic/persistent/{tenant}/ns/t"
    assert s.call("GET", lookup, "proxy", headers={"X-Original-Principal": "app"})[0] == 200
    status, answer = s.call("GET", lookup, "proxy", headers={"X-Original-Principal": "other"})
    assert status == 403 and "other" in answer["reason"]
    # the superuser proxy does not make its client one
    assert s.call("GET", "/admin/v2/tenants", "proxy",
                  headers={"X-Original-Principal": "app"})[0] == 403
    assert s.call("GET", "/admin/v2/tenants", "proxy",
                  headers={"X-Original-Principal": "admin"})[0] == 200
    # only a proxy role may name another principal
    assert s.call("GET", lookup, "app", headers={"X-Original-Principal": "admin"})[0] == 401


def test_webservice_tls_port_needs_a_certificate(tmp_path: Path) -> None:
    conf = tmp_path / "broker.conf"
    conf.write_text("webServicePortTls=0\n")
    done = subprocess.run([*MAGNETAR, "standalone", "--config", str(conf), "--data-dir",
                           str(tmp_path / "data"), "--port", "0", "--http-port", "0"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "webServicePortTls" in done.stderr
