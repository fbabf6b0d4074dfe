"""The console with token authentication and authorization on: the page asks for a token,
keeps it in the tab's sessionStorage, sends it on every call, and shows what the role may
see; state-changing calls through /console/api need the console's header and the same site;
the pages carry a Content-Security-Policy."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from magnetar.cli.tokens import create_secret_key, create_token
from magnetar.testing import StandaloneBroker, standalone
from tests.cluster.brokers import http_call
from tests.console.browser import ready, wait_for


@pytest.fixture(scope="module")
def secret(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("keys") / "secret.key"
    path.write_bytes(create_secret_key())
    return f"file://{path}"


@pytest.fixture(scope="module")
def secured(secret: str) -> Iterator[StandaloneBroker]:
    with standalone({
        "authenticationEnabled": True, "authorizationEnabled": True,
        "authenticationProviders": "org.apache.pulsar.broker.authentication.AuthenticationProviderToken",
        "tokenSecretKey": secret, "superUserRoles": "admin",
        "brokerClientAuthenticationPlugin": "org.apache.pulsar.client.impl.auth.AuthenticationToken",
        "brokerClientAuthenticationParameters": f"token:{create_token('admin', secret_key=secret)}",
    }) as b:
        yield b


def test_the_console_asks_for_a_token_and_uses_it(secured: StandaloneBroker, driver: Any,
                                                  secret: str) -> None:
    driver.get(f"{secured.web_service_url}/console/")
    box = wait_for(lambda: driver.find_element("id", "token-input"), "the token form")
    assert "token" in driver.find_element("tag name", "main").text.lower()
    # a role that is not a superuser: signed in, but the overview is refused with the reason
    box.send_keys(create_token("bob", secret_key=secret))
    driver.find_element("id", "token-save").click()
    wait_for(lambda: "Not allowed" in driver.find_element("id", "notice").text,
             "the overview refused to bob")
    assert driver.execute_script("return window.localStorage.length") == 0
    assert driver.execute_script("return sessionStorage.length") == 1
    # the superuser: everything draws
    driver.find_element("id", "token-button").click()
    box = wait_for(lambda: driver.find_element("id", "token-input"), "the token form again")
    box.send_keys(create_token("admin", secret_key=secret))
    driver.find_element("id", "token-save").click()
    ready(driver)
    wait_for(lambda: driver.find_element("link text", "public"), "the tenants listed")
    assert driver.find_element("id", "notice").text == ""
    # a new tab's session (a fresh browser session storage) asks again
    driver.switch_to.new_window("tab")
    try:
        driver.get(f"{secured.web_service_url}/console/")
        wait_for(lambda: driver.find_element("id", "token-input"), "the token form in a new tab")
    finally:
        driver.close()
        driver.switch_to.window(driver.window_handles[0])


def test_api_calls_carry_the_rules_of_the_rest_api(secured: StandaloneBroker, secret: str) -> None:
    base = f"{secured.web_service_url}/console/api/admin/v2"
    assert http_call("GET", f"{base}/tenants")[0] == 401
    bob = {"Authorization": f"Bearer {create_token('bob', secret_key=secret)}"}
    admin = {"Authorization": f"Bearer {create_token('admin', secret_key=secret)}"}
    assert http_call("GET", f"{base}/tenants", headers=bob)[0] == 403
    assert http_call("GET", f"{base}/tenants", headers=admin)[:2] == (200, ["public", "pulsar"])  # pulsar: the system tenant
    console = {**admin, "X-Magnetar-Console": "1"}
    # state-changing: refused without the console's header, or from another site
    assert http_call("PUT", f"{base}/tenants/t1", {}, headers=admin)[0] == 403
    assert http_call("PUT", f"{base}/tenants/t1", {}, headers={
        **console, "Origin": "http://elsewhere.example"})[0] == 403
    assert http_call("PUT", f"{base}/tenants/t1", {}, headers={
        **console, "Sec-Fetch-Site": "cross-site"})[0] == 403
    assert http_call("GET", f"{secured.web_service_url}/admin/v2/tenants/t1", headers=admin)[0] == 404
    assert http_call("PUT", f"{base}/tenants/t1", {}, headers=console)[0] == 204
    assert http_call("GET", f"{secured.web_service_url}/admin/v2/tenants/t1", headers=admin)[0] == 200
    # the admin API itself refuses a browser's cross-site change too
    assert http_call("DELETE", f"{secured.web_service_url}/admin/v2/tenants/t1", headers={
        **admin, "Origin": "http://elsewhere.example"})[0] == 403
    # only the admin API is forwarded
    assert http_call("GET", f"{secured.web_service_url}/console/api/metrics", headers=admin)[0] == 404


def test_pages_carry_a_content_security_policy(secured: StandaloneBroker) -> None:
    import urllib.request

    for path in ("/console/", "/console/topics/persistent/a/b/c", "/console/static/app.js"):
        with urllib.request.urlopen(secured.web_service_url + path, timeout=30) as resp:
            assert resp.status == 200  # no credential needed for the files
            assert resp.headers["Content-Security-Policy"].startswith("default-src 'self'")
            assert resp.headers["X-Frame-Options"] == "DENY"
    html = Path(__file__).resolve().parents[2] / "src/magnetar/admin/console_files/index.html"
    text = html.read_text()
    assert "<script>" not in text and "onclick=" not in text  # no inline script


def test_console_command_refuses_a_bad_admin_url() -> None:
    from tests.cluster.brokers import magnetar

    done = magnetar("console", "--admin-url", "ftp://broker:8080", "--port", "0")
    assert done.returncode == 2
    assert "--admin-url must be an http:// or https:// URL" in done.stderr
