"""A small blocking HTTP client for the admin API (urllib: nothing to install), used by
``magnetar admin``. Errors come back as ``AdminError`` carrying the status and Pulsar's
``reason``."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any, NoReturn


class AdminError(Exception):
    """A non-2xx answer (or no answer) from the admin API."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}" if status else reason)
        self.status = status
        self.reason = reason


class AdminClient:
    """``call(method, path, body)`` against ``http://host:port`` or ``https://host:port``
    (the web service URL). ``token``: sent as ``Authorization: Bearer``; ``trust_certs``: a
    PEM file of the CAs the broker's certificate must chain to (default: the system's);
    ``cert_file``/``key_file``: a client certificate (TLS authentication);
    ``allow_insecure``: do not check the broker's certificate."""

    def __init__(self, url: str, timeout: float = 30.0, token: str | None = None,
                 trust_certs: str | None = None, cert_file: str | None = None,
                 key_file: str | None = None, allow_insecure: bool = False) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.token = token
        self.context: ssl.SSLContext | None = None
        if self.url.startswith("https://"):
            self.context = ssl.create_default_context(cafile=trust_certs)
            if allow_insecure:
                self.context.check_hostname = False
                self.context.verify_mode = ssl.CERT_NONE
            if cert_file:
                self.context.load_cert_chain(cert_file, key_file)

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        url = self.url + path
        for _ in range(5):  # a cluster's broker answers 307 for a bundle another one owns
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout,
                                            context=self.context) as resp:
                    return _decode(resp.read(), resp.headers.get("Content-Type", ""),
                                   resp.headers)
            except urllib.error.HTTPError as exc:
                location = exc.headers.get("Location") if exc.code in (307, 308) else None
                if location:
                    url = location
                    continue
                self._fail(exc)
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise AdminError(0, f"cannot reach {self.url}: {reason}") from None
        raise AdminError(0, f"too many redirects from {self.url + path}")

    @staticmethod
    def _fail(exc: urllib.error.HTTPError) -> NoReturn:
        raw = exc.read()
        try:
            reason = json.loads(raw).get("reason", raw.decode(errors="replace"))
        except (ValueError, AttributeError):
            reason = raw.decode(errors="replace") or exc.reason
        raise AdminError(exc.code, str(reason)) from None


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
