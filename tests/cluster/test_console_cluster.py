"""The console against a two-broker cluster, in headless Chromium: any broker serves all of
it (the overview lists both brokers, a topic owned by the other broker draws its stats, the
307 followed on the server side), and ``magnetar console --admin-url`` serves the same pages
beside the cluster."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pulsar
import pytest

from magnetar.testing import COMMAND, start_process, stop_process
from tests.cluster.brokers import QUIET, Cluster, topic_owned_by
from tests.console.browser import browser_missing_reason, chromium, ready, wait_for


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    reason = browser_missing_reason()
    if reason:
        pytest.skip(reason)
    with chromium() as d:
        yield d


def _overview_lists_both(driver: Any, cluster: Cluster) -> None:
    ready(driver)
    brokers = wait_for(lambda: driver.find_element("id", "brokers").text, "the brokers table")
    for b in cluster.brokers:
        assert b.broker_id in brokers, brokers
    assert "not reachable" not in brokers


def test_any_broker_serves_the_whole_cluster(cluster: Cluster, driver: Any) -> None:
    a, b = cluster.brokers
    topic = topic_owned_by(cluster, b.port, prefix="console")
    client = pulsar.Client(cluster.service_url, logger=QUIET)
    try:
        client.subscribe(topic, "seen-from-a").close()
        producer = client.create_producer(topic)
        for i in range(4):
            producer.send(f"m{i}".encode())
        producer.close()
    finally:
        client.close()
    driver.get(f"{a.web_url}/console/")
    _overview_lists_both(driver, cluster)
    domain, rest = topic.split("://")
    driver.get(f"{a.web_url}/console/topics/{domain}/{rest}")
    ready(driver)
    wait_for(lambda: driver.find_element("id", "backlog").text == "4",
             "the backlog of a topic the other broker owns")
    assert "seen-from-a" in driver.find_element("id", "subscriptions").text
    # the namespace's bundles with their owners, the other broker among them
    driver.get(f"{a.web_url}/console/namespaces/public/default")
    ready(driver)
    main = driver.find_element("tag name", "main").text
    assert b.web_url in main, main


def test_console_command_serves_the_pages_beside_the_cluster(
        cluster: Cluster, driver: Any, tmp_path: Path) -> None:
    b = cluster.brokers[1]
    proc, urls = start_process(
        [*COMMAND, "console", "--admin-url", b.web_url, "--port", "0", "--ready-file",
         str(tmp_path / "ready.json")], tmp_path / "ready.json", tmp_path / "console.log")
    try:
        driver.get(urls["consoleUrl"])
        _overview_lists_both(driver, cluster)
        driver.find_element("link text", "public").click()
        ready(driver)
        assert "public/default" in driver.find_element("tag name", "main").text
    finally:
        assert stop_process(proc) == 0
