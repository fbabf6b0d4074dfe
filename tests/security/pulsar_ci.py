"""A broker set up the way the official Python client's CI sets up Pulsar for its suite.

That CI runs Pulsar standalone with its ``tests/test-conf/standalone-ssl.conf`` (TLS on the
binary and web ports, the TLS, token and basic authentication providers, authorization on,
``anonymousUserRole=anonymous``, superusers ``localhost,superUser,admin``), makes the token
secret and a token for ``token-principal`` with ``pulsar tokens``, and then configures it
through the admin REST API: the ``standalone`` cluster, the ``public`` tenant (admin role
``anonymous``), ``public/default`` where ``anonymous`` may produce and consume, the
``private`` tenant and ``private/auth`` where only ``token-principal`` may.

``ci_broker(root, pki)`` does the same with ``magnetar tokens`` and ``magnetar standalone``
on free ports, and the same admin calls over HTTPS as the superuser ``admin`` (a token):
``PUT`` for each cluster, tenant and namespace with Pulsar's bodies (a namespace's
``Policies`` carries its grants in ``auth_policies``).
"""

from __future__ import annotations

import contextlib
import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from magnetar.broker.security.auth.passwords import md5_crypt
from magnetar.testing import StandaloneBroker, standalone
from tests.security.pki import Pki

MAGNETAR = [sys.executable, "-m", "magnetar.cli.main"]

#: the users of the CI's ``.htpasswd`` (basic authentication): user -> password
BASIC_USERS = {"admin": "123456"}


def ci_settings(key: Path, htpasswd: Path, cert: Path, cert_key: Path, ca: Path) -> dict[str, Any]:
    """``standalone-ssl.conf``'s keys that mean something to a broker like Magnetar, with
    free ports (0) for the listeners and our own key, certificates and password file."""
    providers = ",".join(f"org.apache.pulsar.broker.authentication.AuthenticationProvider{p}"
                         for p in ("Tls", "Token", "Basic"))
    return {
        "brokerServicePortTls": 0,
        "webServicePortTls": 0,
        "clusterName": "standalone",
        "brokerShutdownTimeoutMs": 3000,
        "backlogQuotaCheckEnabled": True,
        "brokerDeleteInactiveTopicsEnabled": True,
        "clientLibraryVersionCheckEnabled": False,
        "maxUnackedMessagesPerConsumer": 50000,
        "subscriptionRedeliveryTrackerEnabled": True,
        "tlsEnabled": True,
        "tlsCertificateFilePath": cert,
        "tlsKeyFilePath": cert_key,
        "tlsTrustCertsFilePath": ca,
        "tlsAllowInsecureConnection": False,
        "anonymousUserRole": "anonymous",
        "authenticationEnabled": True,
        "authenticationProviders": providers,
        "authorizationEnabled": True,
        "tokenSecretKey": f"file://{key}",
        "superUserRoles": "localhost,superUser,admin",
        "basicAuthConf": htpasswd,
        "acknowledgmentAtBatchIndexLevelEnabled": True,
        "defaultRetentionTimeInMinutes": 0,
        "defaultRetentionSizeInMB": 0,
        "allowAutoTopicCreation": True,
        "allowAutoTopicCreationType": "non-partitioned",
        "defaultNumPartitions": 1,
        "maxMessageSize": 1024000,
        "subscriptionKeySharedUseConsistentHashing": False,
        "topicLevelPoliciesEnabled": False,
    }


@dataclass
class CiBroker:
    """The running broker, its CA and the credentials the CI hands its tests."""

    broker: StandaloneBroker
    ca_file: Path
    #: a token for ``token-principal`` (the CI's ``.test-token.txt``) and for the superuser
    token: str
    admin_token: str

    @property
    def service_url(self) -> str:
        """``pulsar://`` (no TLS), as the suite's tests that do not use TLS dial."""
        return self.broker.service_url

    @property
    def service_url_tls(self) -> str:
        assert self.broker.service_url_tls is not None
        return self.broker.service_url_tls

    @property
    def web_url_tls(self) -> str:
        assert self.broker.web_service_url_tls is not None
        return self.broker.web_service_url_tls

    def admin(self, method: str, path: str, body: Any = None, token: str | None = None,
              headers: dict[str, str] | None = None) -> tuple[int, Any]:
        """One admin call over HTTPS as the superuser (or as ``token``'s role, or with
        ``headers`` instead of a bearer token): ``(status, decoded JSON or text)``."""
        data = json.dumps(body).encode() if body is not None else None
        headers = dict(headers) if headers is not None else {
            "Authorization": f"Bearer {token or self.admin_token}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.web_url_tls + path, data=data, method=method,
                                     headers=headers)
        context = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(req, timeout=30, context=context) as resp:
                raw, ctype, status = resp.read(), resp.headers.get("Content-Type", ""), resp.status
        except urllib.error.HTTPError as exc:
            raw, ctype, status = exc.read(), exc.headers.get("Content-Type", ""), exc.code
        return status, (json.loads(raw) if "json" in ctype and raw else raw.decode(errors="replace"))


def _tokens(cmd: list[str]) -> str:
    done = subprocess.run([*MAGNETAR, "tokens", *cmd], check=True, capture_output=True,
                          text=True, timeout=60)
    return done.stdout.strip()


#: the admin calls of the CI, in its order: (method, path, body, statuses it accepts); the
#: broker may already hold the standalone cluster and the public tenant and namespace
#: (Pulsar's standalone makes them as Magnetar's does), so a 409 is fine there
def ci_admin_calls(web_url: str, service_url: str) -> list[tuple[str, str, Any, set[int]]]:
    cluster = {"serviceUrl": web_url.replace("https://", "http://"), "serviceUrlTls": web_url,
               "brokerServiceUrl": service_url.replace("pulsar+ssl://", "pulsar://"),
               "brokerServiceUrlTls": service_url}
    grants = {"anonymous": ["produce", "consume"]}
    public = {"adminRoles": ["anonymous"], "allowedClusters": ["standalone"]}
    return [
        ("PUT", "/admin/v2/clusters/standalone", cluster, {204, 409}),
        ("PUT", "/admin/v2/tenants/public", public, {204, 409}),
        # the CI means to *update* the public tenant ("anonymous" administers it): where it
        # was there already, that is a POST
        ("POST", "/admin/v2/tenants/public", public, {204}),
        ("PUT", "/admin/v2/namespaces/public/default",
         {"auth_policies": {"namespace_auth": grants, "destination_auth": {},
                            "subscription_auth_roles": {}},
          "replication_clusters": ["standalone"]}, {204, 409}),
        # where the namespace was there already, the grant is made as the CI's
        # ``grant-permission`` makes it
        ("POST", "/admin/v2/namespaces/public/default/permissions/anonymous",
         ["produce", "consume"], {204}),
        ("PUT", "/admin/v2/tenants/private", {"adminRoles": [], "allowedClusters": ["standalone"]},
         {204}),
        ("PUT", "/admin/v2/namespaces/private/auth",
         {"auth_policies": {"namespace_auth": {"token-principal": ["produce", "consume"]}},
          "replication_clusters": ["standalone"]}, {204}),
    ]


@contextlib.contextmanager
def ci_broker(root: Path, pki: Pki, settings: dict[str, Any] | None = None,
              data_dir: Path | None = None) -> Iterator[CiBroker]:
    """Run the broker as the official client's CI does, configured through its admin calls
    (``settings`` override keys of the configuration; ``data_dir`` keeps the data)."""
    root.mkdir(parents=True, exist_ok=True)
    key = root / "secret.key"
    if not key.exists():
        _tokens(["create-secret-key", "--output", str(key)])
    token = _tokens(["create", "--secret-key", f"file://{key}", "--subject", "token-principal"])
    admin_token = _tokens(["create", "--secret-key", f"file://{key}", "--subject", "admin"])
    htpasswd = root / ".htpasswd"
    htpasswd.write_text("".join(f"{user}:{md5_crypt(pw.encode(), 'c1s4lt', '$apr1$')}\n"
                                for user, pw in BASIC_USERS.items()))
    cert, cert_key = pki.issue("localhost", server=True, stem="ci-broker")
    conf = {**ci_settings(key, htpasswd, cert, cert_key, pki.ca_file), **(settings or {})}
    with standalone(conf, data_dir=data_dir) as broker:
        ci = CiBroker(broker, pki.ca_file, token, admin_token)
        for method, path, body, accepted in ci_admin_calls(ci.web_url_tls, ci.service_url_tls):
            status, answer = ci.admin(method, path, body)
            assert status in accepted, (method, path, status, answer)
        yield ci
