"""``magnetar admin`` commands for the multi-tenant limits (cli/admin_policies.py) against
a real broker: pulsar-admin's names and flags, JSON output, errors in one line."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable

import pytest

from magnetar.cli.main import main
from magnetar.testing import StandaloneBroker


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


Admin = Callable[..., tuple[int, str, str]]


@pytest.fixture
def admin(broker: StandaloneBroker, capsys: pytest.CaptureFixture[str]) -> Admin:
    def call(*argv: str) -> tuple[int, str, str]:
        return run(capsys, "admin", "--admin-url", broker.web_service_url, "--output", "json",
                   *argv)
    return call


def test_namespace_publish_rate_commands(admin: Admin) -> None:
    ns = f"public/cli-{uuid.uuid4().hex[:6]}"
    assert admin("namespaces", "create", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-publish-rate", ns)[1]) is None
    assert admin("namespaces", "set-publish-rate", ns, "-m", "100", "-b", "2048")[0] == 0
    assert json.loads(admin("namespaces", "get-publish-rate", ns)[1]) == {
        "publishThrottlingRateInMsg": 100, "publishThrottlingRateInByte": 2048}
    assert admin("namespaces", "set-publish-rate", ns, "--msg-publish-rate", "5")[0] == 0
    policies = json.loads(admin("namespaces", "policies", ns)[1])
    assert policies["publishMaxMessageRate"] == {
        "standalone": {"publishThrottlingRateInMsg": 5, "publishThrottlingRateInByte": -1}}
    assert admin("namespaces", "remove-publish-rate", ns)[0] == 0
    assert json.loads(admin("namespaces", "get-publish-rate", ns)[1]) is None
    code, _, err = admin("namespaces", "get-publish-rate", "public/nowhere-" + ns[-6:])
    assert code == 1 and "404" in err, err
