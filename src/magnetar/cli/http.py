"""A small blocking HTTP client for the admin API (urllib: nothing to install), used by
``magnetar admin``. Errors come back as ``AdminError`` carrying the status and Pulsar's
``reason``."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import urllib.error
import urllib.request
from typing import Any, NoReturn
from urllib.parse import urlsplit

from magnetar.broker.config.broker_client import client_context
from magnetar.protocol.service_urls import split_service_url

#: seconds to wait for the broker to accept the connection (Pulsar's clients: 10 s)
CONNECT_TIMEOUT = 10.0


class AdminError(Exception):
    """A non-2xx answer (or no answer) from the admin API."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}" if status else reason)
        self.status = status
        self.reason = reason


class _Unreachable(Exception):
    """One broker of the admin URL could not be reached (the reason)."""


class AdminClient:
    """``call(method, path, body)`` against ``http://host:port`` or ``https://host:port``
    (the web service URL). ``token``: sent as ``Authorization: Bearer``; ``trust_certs``: a
    PEM file of the CAs the broker's certificate must chain to (default: the system's);
    ``cert_file``/``key_file``: a client certificate (TLS authentication);
    ``allow_insecure``: do not check the broker's certificate; ``timeout``: seconds to wait
    for an answer (60, the read timeout of Pulsar's admin client)."""

    def __init__(self, url: str, timeout: float = 60.0, token: str | None = None,
                 connect_timeout: float = CONNECT_TIMEOUT,
                 trust_certs: str | None = None, cert_file: str | None = None,
                 key_file: str | None = None, allow_insecure: bool = False) -> None:
        #: each broker of a multi-host URL (``http://s1:8080,s2:8080``, as pulsar-admin
        #: takes it); a broker that cannot be reached gives way to the next
        self.urls = [check_admin_url(u).rstrip("/") for u in split_service_url(url)] or [
            check_admin_url(url)]
        self.url = self.urls[0]
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.token = token
        self.context: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            self.context = client_context(trust_certs, cert_file, key_file, allow_insecure)
        self._opener = _opener(connect_timeout, self.context)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The answer of ``method path`` from the first broker of the URL that can be
        reached (the one that answered is tried first next time)."""
        failures: list[str] = []
        for base in list(self.urls):
            try:
                answer = self._call(base, method, path, body)
            except _Unreachable as exc:
                failures.append(f"{base}: {exc}")
                continue
            if base != self.urls[0]:
                self.urls.remove(base)
                self.urls.insert(0, base)
                self.url = base
            return answer
        where = self.url if len(self.urls) == 1 else ", ".join(self.urls)
        detail = failures[0].split(": ", 1)[1] if len(failures) == 1 else "; ".join(failures)
        raise AdminError(0, f"cannot reach the admin API at {where}: {detail}")

    def _call(self, base: str, method: str, path: str, body: Any) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = base + path
        for _ in range(5):  # a cluster's broker answers 307 for a bundle another one owns
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    return _decode(resp.read(), resp.headers.get("Content-Type", ""),
                                   resp.headers)
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location") if exc.code in (307, 308) else None
                if location:  # urllib follows a GET's redirect itself, not a PUT's or POST's
                    url = location
                    continue
                self._fail(exc)
            except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
                raise _Unreachable(_why(exc)) from None
            except ValueError as exc:  # a header (token) or URL that cannot be sent as given
                raise AdminError(0, f"cannot send {method} {base}{path}: {exc}") from None
        raise AdminError(0, f"too many redirects from {base + path}")

    @staticmethod
    def _fail(exc: urllib.error.HTTPError) -> NoReturn:
        raw = exc.read()
        try:
            reason = json.loads(raw).get("reason", raw.decode(errors="replace"))
        except (ValueError, AttributeError):
            reason = raw.decode(errors="replace") or exc.reason
        raise AdminError(exc.code, str(reason)) from None


def _opener(connect: float, context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    """urllib's opener, but connecting within ``connect`` seconds (the request's own timeout
    then bounds each read)."""

    class Plain(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.create_connection(
                (self.host, self.port), connect, getattr(self, "source_address", None))
            self.sock.settimeout(self.timeout)

    class Tls(http.client.HTTPSConnection, Plain):  # its connect() wraps Plain's socket
        pass

    class PlainHandler(urllib.request.HTTPHandler):
        def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Plain, req)

    class TlsHandler(urllib.request.HTTPSHandler):
        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            return self.do_open(Tls, req, context=context)

    return urllib.request.build_opener(PlainHandler, TlsHandler)


def check_admin_url(url: str) -> str:
    """``url`` if it can be the broker's web service URL, else ValueError with a hint."""
    parts = urlsplit(url)
    if "://" not in url:
        raise ValueError(f"admin URL {url!r} has no scheme: use http://{url}")
    if parts.scheme.startswith("pulsar"):
        raise ValueError(f"admin URL {url!r} is a binary protocol URL: the admin API is the "
                         "broker's web service, e.g. http://localhost:8080 (webServicePort)")
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"admin URL {url!r}: use http:// or https://")
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number in range)
    except ValueError:
        raise ValueError(f"admin URL {url!r} has an invalid port") from None
    if not parts.hostname or any(c.isspace() for c in url):
        raise ValueError(f"admin URL {url!r} is not a valid URL (e.g. http://localhost:8080)")
    return url


def _why(exc: BaseException) -> str:
    """A failed request's cause in a few words, with a hint for the usual mistakes."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, socket.gaierror):
        return "unknown host"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (is the broker running, with its web service on that port?)"
    if isinstance(reason, TimeoutError | socket.timeout):
        return "timed out"
    if isinstance(exc, http.client.RemoteDisconnected | http.client.BadStatusLine):
        return ("no HTTP answer (is that the broker's binary port? the admin API is on the web "
                "service port, 8080 by default)")
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason)


def _decode(data: bytes, content_type: str, headers: Any) -> Any:
    if not data:
        return None
    if "json" in content_type:
        return json.loads(data)
    if "octet-stream" in content_type:  # a peeked message: headers + payload
        meta = {k: v for k, v in headers.items() if k.lower().startswith("x-pulsar")}
        try:
            payload: Any = data.decode()
        except UnicodeDecodeError:
            payload = data.hex()
        return {**meta, "payload": payload}
    return data.decode(errors="replace")
