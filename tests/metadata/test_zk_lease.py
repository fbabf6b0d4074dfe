"""The ZooKeeper store's lease by its own clock (pure: no server): a heartbeat answered
in a session the store does not know yet (kazoo opened a new one while the event loop
was paused) must not extend the lease of the old one, whose bundles this broker may no
longer own; an answer in the known session does."""

from __future__ import annotations

import time

from magnetar.metadata.url import parse_store_url
from magnetar.metadata.zk import ZKMetadataStore


class Answered:
    """What kazoo hands a request's callback: here, a successful answer."""

    def successful(self) -> bool:
        return True


def store_in_session(session: int) -> ZKMetadataStore:
    store = ZKMetadataStore(parse_store_url("zk:127.0.0.1:1/lease"), session_timeout_s=4.0)
    store._session_id = session
    store.lease_deadline = time.monotonic() - 1.0  # the lease ran out (a pause)
    return store


def test_a_heartbeat_in_a_new_session_does_not_renew_the_old_lease() -> None:
    store = store_in_session(7)
    sent = time.monotonic()
    store._beat_done(sent, 8, Answered())
    assert store.lease_deadline < time.monotonic()
    store._beat_done(sent, None, Answered())  # (no session at all while reconnecting)
    assert store.lease_deadline < time.monotonic()


def test_a_heartbeat_in_the_known_session_renews_the_lease() -> None:
    store = store_in_session(7)
    sent = time.monotonic()
    store._beat_done(sent, 7, Answered())
    assert store.lease_deadline == sent + store.session_timeout_s
