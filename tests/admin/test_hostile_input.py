"""Every REST endpoint the OpenAPI description lists, given hostile path segments (spaces,
``/``, ``?``, ``%``, unicode, control characters, ``..``) and hostile bodies (not JSON,
negative and absurd numbers, wrong types): a 4xx with a ``reason``, never a 500."""

from __future__ import annotations

import string
import uuid
from typing import Any
from urllib.parse import quote

import pulsar

from tests.admin.conftest import Api

#: path segments as a client would send them, each URL-encoded
HOSTILE_SEGMENTS = ["bad name!", "a/b", "q?x=1", "100%", "ünï", "tab\there", "..", "x" * 300]
#: request bodies: raw bytes that are not JSON, and JSON of every wrong shape
HOSTILE_BODIES: list[tuple[bytes | None, Any]] = [
    (b"{", None), (b"\xff\xfe", None), (None, -5), (None, 10**30), (None, "x"), (None, [1]),
    (None, {"retentionTimeInMinutes": -7, "limitSize": "big", "type": "AVRO", "schema": "{"}),
]


def _params(path: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(path) if name]


def _fresh(api: Api, client: pulsar.Client) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    api.ok("PUT", f"/admin/v2/tenants/h-{tag}")
    api.ok("PUT", f"/admin/v2/namespaces/h-{tag}/ns")
    producer = client.create_producer(f"persistent://h-{tag}/ns/t")
    producer.send(b"m")
    producer.close()
    return {"tenant": f"h-{tag}", "namespace": "ns", "topic": "t", "subscription": "s",
            "cluster": "standalone", "domain": "persistent", "count": "1", "timestamp": "0",
            "seconds": "0", "n": "1", "version": "0", "role": "r",
            "bundle": "0x00000000_0xffffffff", "ledgerId": "0", "entryId": "0",
            "mostSigBits": "0", "leastSigBits": "0", "timeout": "1000"}


def _check(failures: list[str], method: str, url: str, status: int, answer: Any) -> None:
    if status >= 500:
        failures.append(f"{method} {url}: {status} {answer!r:.200}")
    elif status >= 400 and not (isinstance(answer, dict) and answer.get("reason")):
        failures.append(f"{method} {url}: {status} without a reason: {answer!r:.200}")


def test_every_endpoint_refuses_hostile_input_without_a_500(api: Api, client: pulsar.Client) -> None:
    doc = api.ok("GET", "/admin/v2/openapi.json")
    values = _fresh(api, client)
    failures: list[str] = []
    checked = 0
    for path, operations in doc["paths"].items():
        params = _params(path)
        for method in (m.upper() for m in operations):
            if method == "DELETE" and path.endswith(("{tenant}", "{namespace}")):
                continue  # would delete the fixture's tenant or namespace before the rest
            for name in params:  # each parameter hostile in turn (3 kinds each), the others real
                for _ in range(3):
                    segment = quote(HOSTILE_SEGMENTS[checked % len(HOSTILE_SEGMENTS)], safe="")
                    url = path.format(**{**values, name: segment})
                    status, answer = api.call(method, url, raw=b"" if method != "GET" else None)
                    _check(failures, method, url, status, answer)
                    checked += 1
            if method in ("PUT", "POST"):
                url = path.format(**values)
                for raw, body in HOSTILE_BODIES:
                    status, answer = api.call(method, url, body, raw=raw)
                    _check(failures, method, f"{url} <- {raw or body!r:.40}", status, answer)
                    checked += 1
    assert checked > 800
    assert not failures, "\n".join(failures)
