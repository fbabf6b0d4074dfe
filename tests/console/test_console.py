"""The console in a real browser (headless Chromium) against a standalone broker: the pages
draw real data, a chart moves while a producer runs, an action changes what the REST API
reports, a payload holding markup shows as text, the namespace list pages and filters."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pulsar
import pytest

from magnetar.testing import StandaloneBroker
from tests.cluster.brokers import http_call
from tests.console.browser import DOCS, ready, wait_for

QUIET = pulsar.ConsoleLogger(pulsar.LoggerLevel.Error)


def _ok(status: int, answer: Any) -> Any:
    assert status in (200, 204), answer
    return answer


@pytest.fixture(scope="module")
def namespace(broker: StandaloneBroker) -> str:
    ns = f"public/console-{uuid.uuid4().hex[:6]}"
    _ok(*http_call("PUT", f"{broker.web_service_url}/admin/v2/namespaces/{ns}")[:2])
    return ns


@pytest.fixture
def client(broker: StandaloneBroker) -> Iterator[pulsar.Client]:
    c = pulsar.Client(broker.service_url, logger=QUIET)
    yield c
    c.close()


def _stats(broker: StandaloneBroker, topic: str) -> Any:
    path = topic.replace("://", "/")
    return _ok(*http_call("GET", f"{broker.web_service_url}/admin/v2/{path}/stats")[:2])


def _page(broker: StandaloneBroker, topic: str) -> str:
    return f"{broker.web_service_url}/console/topics/{topic.replace('://', '/')}"


def test_overview_tenant_and_namespace_pages(broker: StandaloneBroker, driver: Any,
                                             namespace: str, client: pulsar.Client) -> None:
    topic = f"persistent://{namespace}/orders"
    producer = client.create_producer(topic)
    client.subscribe(topic, "idle").close()  # a subscription left with a backlog
    for i in range(5):
        producer.send(f"order {i}".encode())
    driver.get(f"{broker.web_service_url}/console/")
    ready(driver)
    wait_for(lambda: int(driver.find_element("id", "total-topics").text.replace(",", "")) >= 1,
             "the overview to count the topic")
    assert driver.find_element("link text", "public").get_attribute("href").endswith(
        "/console/tenants/public")
    wait_for(lambda: topic in driver.find_element("id", "attention").text,
             "the topic among the largest backlogs")
    driver.save_screenshot(str(DOCS / "console-overview.png"))

    driver.find_element("link text", "public").click()
    ready(driver)
    driver.find_element("link text", namespace).click()
    ready(driver)
    assert "/console/namespaces/public/" in driver.current_url
    wait_for(lambda: driver.find_element("link text", topic), "the topic in the namespace list")
    assert driver.find_element("id", "topic-count").text.startswith("1-1 of 1")
    bundles = driver.find_element("tag name", "main").text
    assert f"0x00000000_0xffffffff {broker.web_service_url}" in bundles, bundles
    driver.find_element("link text", topic).click()
    ready(driver)
    wait_for(lambda: driver.find_element("id", "backlog").text == "5", "the topic's backlog")
    assert driver.find_element("id", "producer-count").text == "1"
    assert "idle" in driver.find_element("id", "subscriptions").text
    producer.close()


def test_namespace_list_pages_and_filters(broker: StandaloneBroker, driver: Any) -> None:
    ns = f"public/many-{uuid.uuid4().hex[:6]}"
    base = broker.web_service_url
    _ok(*http_call("PUT", f"{base}/admin/v2/namespaces/{ns}")[:2])
    for i in range(120):
        _ok(*http_call("PUT", f"{base}/admin/v2/persistent/{ns}/t-{i:04d}")[:2])
    _ok(*http_call("PUT", f"{base}/admin/v2/persistent/{ns}/parted/partitions", 3)[:2])
    driver.get(f"{base}/console/namespaces/{ns}")
    ready(driver)
    count = driver.find_element("id", "topic-count")
    assert count.text == "1-50 of 121", count.text  # the partitioned topic once, not its partitions
    driver.find_element("id", "page-next").click()
    assert count.text == "51-100 of 121"
    search = driver.find_element("id", "topic-search")
    search.send_keys("t-011")
    wait_for(lambda: count.text == "1-10 of 10", "the filtered list")
    search.clear()
    search.send_keys("parted")
    wait_for(lambda: count.text == "1-1 of 1", "the partitioned topic found")
    driver.find_element("link text", f"persistent://{ns}/parted").click()
    ready(driver)
    parts = driver.find_element("id", "partitions").text
    assert all(f"parted-partition-{i}" in parts for i in range(3)), parts


def test_chart_moves_while_a_producer_runs(broker: StandaloneBroker, driver: Any,
                                           namespace: str, client: pulsar.Client) -> None:
    topic = f"persistent://{namespace}/live"
    client.subscribe(topic, "behind").close()
    producer = client.create_producer(topic, batching_enabled=False)
    stop = threading.Event()

    def produce() -> None:
        while not stop.is_set():
            producer.send(b'{"n": 1}')
            stop.wait(0.02)

    sender = threading.Thread(target=produce, daemon=True)
    sender.start()
    try:
        driver.get(_page(broker, topic))
        ready(driver)

        def chart(name: str) -> tuple[int, float]:
            node = driver.find_element("css selector", f"figure[data-chart^='{name}']")
            return int(node.get_attribute("data-samples") or 0), float(node.get_attribute("data-last") or 0)

        wait_for(lambda: chart("Rate in")[1] > 0, "the rate-in chart to show the producer")
        first = chart("Backlog")
        wait_for(lambda: chart("Backlog")[0] > first[0] and chart("Backlog")[1] > first[1],
                 "the backlog chart to grow")
        wait_for(lambda: chart("Rate in")[0] >= 5, "five samples")  # for the screenshot
        points = driver.find_element("css selector", "figure[data-chart^='Rate in'] polyline")
        assert len(points.get_attribute("points").split()) >= 5
        driver.save_screenshot(str(DOCS / "console-topic.png"))
    finally:
        stop.set()
        sender.join(timeout=30)
        producer.close()


def test_clear_backlog_action_changes_the_rest_answer(broker: StandaloneBroker, driver: Any,
                                                     namespace: str, client: pulsar.Client) -> None:
    topic = f"persistent://{namespace}/act"
    client.subscribe(topic, "s1").close()
    producer = client.create_producer(topic)
    for i in range(7):
        producer.send(f"m{i}".encode())
    producer.close()
    assert _stats(broker, topic)["subscriptions"]["s1"]["msgBacklog"] == 7
    driver.get(_page(broker, topic))
    ready(driver)
    row = wait_for(lambda: driver.find_element("css selector", "[data-subscription='s1']"), "s1's row")
    row.find_element("css selector", "button[data-action='clear']").click()
    dialog = driver.find_element("id", "confirm")
    assert dialog.is_displayed() and "s1" in driver.find_element("id", "confirm-text").text
    driver.find_element("id", "confirm-no").click()  # cancelled: nothing happens
    assert _stats(broker, topic)["subscriptions"]["s1"]["msgBacklog"] == 7
    row = driver.find_element("css selector", "[data-subscription='s1']")
    count = row.find_element("css selector", "input[type=number]")
    count.clear()
    count.send_keys("2")
    row.find_element("css selector", "button[data-action='skip']").click()
    driver.find_element("id", "confirm-yes").click()
    wait_for(lambda: _stats(broker, topic)["subscriptions"]["s1"]["msgBacklog"] == 5,
             "two messages skipped")
    row = wait_for(lambda: driver.find_element("css selector", "[data-subscription='s1']"), "s1")
    row.find_element("css selector", "button[data-action='clear']").click()
    driver.find_element("id", "confirm-yes").click()
    wait_for(lambda: _stats(broker, topic)["subscriptions"]["s1"]["msgBacklog"] == 0,
             "the backlog cleared through the REST API")
    wait_for(lambda: driver.find_element("css selector", "[data-backlog='s1']").text == "0",
             "the page to show it")
    # create a subscription from the page, then delete it
    driver.find_element("id", "new-subscription").send_keys("made-here")
    driver.find_element("id", "create-subscription").click()
    driver.find_element("id", "confirm-yes").click()
    wait_for(lambda: "made-here" in _stats(broker, topic)["subscriptions"], "the new subscription")
    row = wait_for(lambda: driver.find_element("css selector", "[data-subscription='made-here']"),
                   "its row")
    row.find_element("css selector", "button[data-action='delete']").click()
    driver.find_element("id", "confirm-yes").click()
    wait_for(lambda: "made-here" not in _stats(broker, topic)["subscriptions"], "it deleted")


def test_payload_with_markup_shows_as_text(broker: StandaloneBroker, driver: Any,
                                           namespace: str, client: pulsar.Client) -> None:
    topic = f"persistent://{namespace}/markup"
    markup = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    producer = client.create_producer(topic, schema=pulsar.schema.StringSchema())
    producer.send(markup, properties={"note": "<script>v</script>"})
    producer.close()
    driver.get(_page(broker, topic))
    ready(driver)
    payload = wait_for(lambda: driver.find_element("css selector", "#messages pre.payload"),
                       "the last message")
    assert payload.text == markup
    assert "<script>v</script>" in driver.find_element("id", "messages").text
    assert driver.execute_script("return window.pwned") is None
    assert not driver.find_elements("css selector", "main script, main img")
    assert "STRING" in driver.find_element("id", "schema").text
