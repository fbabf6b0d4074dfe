"""The publish rate (``publishMaxMessageRate``) with the official client: the broker stops
reading a capped topic's producers while it is over its rate (no send fails), another
tenant's topic on the same broker is not held; the admin API and the Policies body."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pulsar
import pytest

from magnetar.testing import StandaloneBroker
from tests.admin.conftest import NULL, QUIET, Api

#: the measured window starts once the bucket's first second (its burst) is long spent
WARM_UP_S = 2.0
WINDOW_S = 10.0


class Sender(threading.Thread):
    """Sends without pause (send_async, blocking when the client's queue is full) and
    records when each receipt arrived."""

    def __init__(self, service_url: str, topic: str, batching: bool, stop_at: float) -> None:
        super().__init__(daemon=True)
        self.client = pulsar.Client(service_url, operation_timeout_seconds=60, logger=QUIET)
        self.producer = self.client.create_producer(
            topic, batching_enabled=batching, block_if_queue_full=True, send_timeout_millis=0)
        self.stop_at = stop_at
        self.acked: list[float] = []
        self.failed: list[pulsar.Result] = []

    def _done(self, result: pulsar.Result, _msg_id: pulsar.MessageId) -> None:
        if result == pulsar.Result.Ok:
            self.acked.append(time.monotonic())
        else:
            self.failed.append(result)

    def run(self) -> None:
        payload = b"x" * 100
        while time.monotonic() < self.stop_at:
            self.producer.send_async(payload, self._done)
        self.producer.flush()

    def acked_between(self, start: float, end: float) -> int:
        return sum(1 for t in self.acked if start <= t < end)

    def close(self) -> None:
        self.client.close()


def _namespace(api: Api) -> str:
    tenant = f"tenant-{uuid.uuid4().hex[:6]}"
    api.ok("PUT", f"/admin/v2/tenants/{tenant}", {"allowedClusters": ["standalone"]})
    api.ok("PUT", f"/admin/v2/namespaces/{tenant}/ns")
    return f"{tenant}/ns"


@pytest.mark.slow
def test_publish_rate_caps_one_tenant_not_another(broker: StandaloneBroker, api: Api) -> None:
    capped, free = _namespace(api), _namespace(api)
    api.ok("POST", f"/admin/v2/namespaces/{capped}/publishRate",
           {"publishThrottlingRateInMsg": 1000, "publishThrottlingRateInByte": -1})
    start = time.monotonic()
    stop_at = start + WARM_UP_S + WINDOW_S + 1
    senders = [Sender(broker.service_url, f"persistent://{capped}/t", False, stop_at),
               Sender(broker.service_url, f"persistent://{free}/t", True, stop_at)]
    try:
        for s in senders:
            s.start()
        for s in senders:
            s.join(timeout=120)
            assert not s.is_alive()
        window = (start + WARM_UP_S, start + WARM_UP_S + WINDOW_S)
        slow, fast = (s.acked_between(*window) for s in senders)
        assert not senders[0].failed and not senders[1].failed  # held, never refused
        # 1,000 msg/s over 10 s: 10,000 +- 10 %
        assert 9000 <= slow <= 11000, slow
        # the other tenant's producer was not held to that rate: held, it would get about
        # as many (on an idle machine it got ~14x; 2.5x beside two CPU burners at load 12)
        assert fast > 1.5 * slow, (fast, slow)
    finally:
        for s in senders:
            s.close()


def test_publish_rate_admin(api: Api) -> None:
    ns = _namespace(api)
    base = f"/admin/v2/namespaces/{ns}"
    assert api.get(base + "/publishRate") == NULL
    assert api.get(base)[1]["publishMaxMessageRate"] == {}
    rate = {"publishThrottlingRateInMsg": 50, "publishThrottlingRateInByte": 1 << 20}
    assert api.post(base + "/publishRate", rate)[0] == 204
    assert api.get(base + "/publishRate") == (200, rate)
    assert api.get(base)[1]["publishMaxMessageRate"] == {"standalone": rate}
    # wrong types and out-of-range numbers: 400, as Pulsar's JSON reading answers
    assert api.post(base + "/publishRate", {"publishThrottlingRateInMsg": "fast"})[0] == 400
    assert api.post(base + "/publishRate", {"publishThrottlingRateInMsg": 1 << 40})[0] == 400
    assert api.post(base + "/publishRate", [1])[0] == 400
    assert api.post("/admin/v2/namespaces/public/nowhere/publishRate", rate)[0] == 404
    assert api.delete(base + "/publishRate")[0] == 204
    assert api.get(base + "/publishRate") == NULL
    # the Policies body: this cluster's entry applies
    other = f"{ns}-b"
    assert api.put(f"/admin/v2/namespaces/{other}",
                   {"publishMaxMessageRate": {"standalone": rate, "elsewhere": {}}})[0] == 204
    assert api.get(f"/admin/v2/namespaces/{other}/publishRate") == (200, rate)
    assert api.put(f"/admin/v2/namespaces/{other}-c",
                   {"publishMaxMessageRate": {"standalone": {"publishThrottlingRateInMsg": "x"}}}
                   )[0] == 400


def test_publish_rate_broker_default_and_restart(tmp_path: Path) -> None:
    """``maxPublishRatePerTopicInMessages`` applies where a namespace sets nothing; a
    namespace's own rate survives a restart."""
    from magnetar.testing import standalone

    settings = {"maxPublishRatePerTopicInMessages": 500}
    with standalone(settings, data_dir=tmp_path) as b:
        api = Api(b.web_service_url)
        # the namespace sets none: Pulsar's null; the broker's applies to its topics
        assert api.get("/admin/v2/namespaces/public/default/publishRate") == NULL
        ns = _namespace(api)
        rate = {"publishThrottlingRateInMsg": 200, "publishThrottlingRateInByte": -1}
        api.ok("POST", f"/admin/v2/namespaces/{ns}/publishRate", rate)
        start = time.monotonic()
        sender = Sender(b.service_url, "persistent://public/default/capped", False, start + 3)
        try:
            sender.run()  # here: 3 s of sends
            # 500 msg/s for 3 s, a burst of one second's worth first: 2,000 (unheld, this
            # producer sends several times as many)
            assert sender.acked_between(start, start + 3) <= 2500
            assert not sender.failed
            assert api.get("/admin/v2/persistent/public/default/capped/publishRate"
                           "?applied=true") == (200, {"publishThrottlingRateInMsg": 500,
                                                      "publishThrottlingRateInByte": 0})
        finally:
            sender.close()
    with standalone(settings, data_dir=tmp_path) as b:
        api = Api(b.web_service_url)
        assert api.get(f"/admin/v2/namespaces/{ns}/publishRate") == (200, rate)
        assert api.get(f"/admin/v2/namespaces/{ns}")[1]["publishMaxMessageRate"] == {
            "standalone": rate}
