"""More of the console in headless Chromium: payloads decoded by Avro and JSON schemas, the
keyboard alone runs an action, a cursor reset to a time and an unload from the page, the
layout at a phone's width; and the pages ship as package data."""

from __future__ import annotations

import json
import tomllib
import uuid
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

import pulsar
import pytest
from pulsar.schema import AvroSchema, Integer, JsonSchema, Record, String

from magnetar.testing import StandaloneBroker
from tests.cluster.brokers import http_call
from tests.console.browser import ready, wait_for

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)
ROOT = Path(__file__).resolve().parents[2]


class Order(Record):
    item = String()
    quantity = Integer()


def _stats(broker: StandaloneBroker, topic: str) -> Any:
    status, answer, _ = http_call("GET", f"{broker.web_service_url}/admin/v2/"
                                  f"{topic.replace('://', '/')}/stats")
    assert status == 200, answer
    return answer


def _page(broker: StandaloneBroker, topic: str) -> str:
    return f"{broker.web_service_url}/console/topics/{topic.replace('://', '/')}"


@pytest.fixture
def client(broker: StandaloneBroker) -> Any:
    c = pulsar.Client(broker.service_url, logger=QUIET)
    yield c
    c.close()


@pytest.mark.parametrize("schema", [AvroSchema, JsonSchema])
def test_payloads_are_decoded_by_the_schema(broker: StandaloneBroker, driver: Any,
                                            client: pulsar.Client, schema: Any) -> None:
    topic = f"persistent://public/default/decoded-{uuid.uuid4().hex[:6]}"
    producer = client.create_producer(topic, schema=schema(Order))
    producer.send(Order(item="<b>bolts</b>", quantity=12))
    producer.close()
    driver.get(_page(broker, topic))
    ready(driver)
    payload = wait_for(lambda: driver.find_element("css selector", "#messages pre.payload"),
                       "the last message")
    assert json.loads(payload.text) == {"item": "<b>bolts</b>", "quantity": 12}
    kind = "Avro" if schema is AvroSchema else "JSON"
    assert kind in driver.find_element("css selector", "#messages .meta").text


def test_keyboard_only_reset_and_unload(broker: StandaloneBroker, driver: Any,
                                        client: pulsar.Client) -> None:
    from selenium.webdriver.common.keys import Keys

    topic = f"persistent://public/default/keys-{uuid.uuid4().hex[:6]}"
    client.subscribe(topic, "k").close()
    producer = client.create_producer(topic)
    for i in range(6):
        producer.send(f"m{i}".encode())
    producer.close()
    driver.get(_page(broker, topic))
    ready(driver)
    row = wait_for(lambda: driver.find_element("css selector", "[data-subscription='k']"), "k")
    row.find_element("css selector", "button[data-action='clear']").send_keys(Keys.ENTER)
    assert driver.switch_to.active_element.get_attribute("id") == "confirm-no"
    driver.switch_to.active_element.send_keys(Keys.TAB)
    active = driver.switch_to.active_element
    assert active.get_attribute("id") == "confirm-yes"
    assert active.value_of_css_property("outline-style") != "none"  # focus is visible
    active.send_keys(Keys.ENTER)
    wait_for(lambda: _stats(broker, topic)["subscriptions"]["k"]["msgBacklog"] == 0, "cleared")
    # reset the cursor to a time before the messages: the backlog comes back
    row = driver.find_element("css selector", "[data-subscription='k']")
    when = row.find_element("css selector", "input[type='datetime-local']")
    driver.execute_script("arguments[0].value = '2000-01-01T00:00:00'", when)
    row.find_element("css selector", "button[data-action='reset']").click()
    driver.find_element("id", "confirm-yes").click()
    wait_for(lambda: _stats(broker, topic)["subscriptions"]["k"]["msgBacklog"] == 6,
             "the cursor reset to before the first message")
    driver.find_element("id", "unload-topic").click()
    driver.find_element("id", "confirm-yes").click()
    wait_for(lambda: "unloaded" in driver.find_element("id", "notice").text, "the unload done")


def test_pages_fit_a_phone_width(broker: StandaloneBroker, driver: Any,
                                 client: pulsar.Client) -> None:
    topic = f"persistent://public/default/a-rather-long-topic-name-{uuid.uuid4().hex}"
    client.subscribe(topic, "a-subscription-with-a-long-name").close()
    driver.set_window_size(390, 844)
    try:
        for url in (f"{broker.web_service_url}/console/", _page(broker, topic),
                    f"{broker.web_service_url}/console/namespaces/public/default"):
            driver.get(url)
            ready(driver)
            width = driver.execute_script(
                "return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1] + 1, (url, width)
    finally:
        driver.set_window_size(1280, 800)


def test_the_pages_ship_as_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["magnetar"]
    files = sorted((ROOT / "src/magnetar/admin/console_files").iterdir())
    assert {f.name for f in files} >= {"index.html", "app.js", "style.css"}
    for f in files:
        relative = f.relative_to(ROOT / "src/magnetar").as_posix()
        assert any(fnmatch(relative, p) for p in patterns), relative


def test_another_site_cannot_trigger_an_action(broker: StandaloneBroker, driver: Any,
                                               client: pulsar.Client, tmp_path: Path) -> None:
    """A page on another origin posts a form to the admin API and to the console's
    forwarder, and fires a no-cors fetch at the forwarder: all refused, the backlog stays."""
    import functools
    import http.server
    import threading

    topic = f"persistent://public/default/csrf-{uuid.uuid4().hex[:6]}"
    client.subscribe(topic, "s").close()
    producer = client.create_producer(topic)
    for i in range(3):
        producer.send(f"m{i}".encode())
    producer.close()
    path = f"{topic.replace('://', '/')}/subscription/s/skip_all"
    base = broker.web_service_url
    (tmp_path / "fetch.html").write_text(
        f'<form id="f" method="POST" action="{base}/admin/v2/{path}"></form><script>'
        f'fetch("{base}/console/api/admin/v2/{path}", {{method: "POST", mode: "no-cors"}})'
        f'.finally(() => document.getElementById("f").submit());</script>')
    (tmp_path / "form.html").write_text(
        f'<form id="g" method="POST" action="{base}/console/api/admin/v2/{path}"></form>'
        f'<script>document.getElementById("g").submit();</script>')
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for page in ("fetch.html", "form.html"):
            driver.get(f"http://127.0.0.1:{server.server_address[1]}/{page}")
            answer = wait_for(lambda: driver.current_url.startswith(base)
                              and driver.find_element("tag name", "body").text,
                              "the form's answer from the broker")
            assert "refused" in answer, answer
        assert _stats(broker, topic)["subscriptions"]["s"]["msgBacklog"] == 3
    finally:
        server.shutdown()
        server.server_close()
