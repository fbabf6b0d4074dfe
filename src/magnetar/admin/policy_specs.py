"""The policies that have a REST path of their own at a namespace's and at a topic's level,
each described once: its path, the ``Policies`` fields it covers, its document in Pulsar's
JSON shape, how a request body becomes policy changes, and what that body looks like (for
the OpenAPI description).

``namespace_limits.py`` and ``topic_policies.py`` declare GET, POST and DELETE routes from
these specs; a new policy (``replicatorDispatchRate``...) is one more spec and one more row
in their tables.

What a GET answers, as Pulsar does: a namespace's (or topic's) own setting (`PolicySpec.own`),
and where it sets none, Pulsar's ``null``, which its REST layer sends as ``204 No Content``
(`answer`); what applies (own, else the namespace's, else the broker's) only at a topic's
level, with ``?applied=true``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from magnetar.admin.policies_body import (
    check_values,
    dispatch_rate_doc,
    inactive_topic_policies_doc,
    number,
    publish_rate_doc,
    read_dispatch_rate,
    read_inactive_topic_policies,
    read_publish_rate,
    read_subscribe_rate,
    retention_doc,
    subscribe_rate_doc,
)
from magnetar.admin.routing import expect, no_content
from magnetar.broker.namespaces.policies import Policies

_JAVA_LONG_MAX = 2**63 - 1


@dataclass(frozen=True)
class PolicySpec:
    """One policy as its REST path serves it."""

    path: str  # "/publishRate", below the namespace's or topic's path
    fields: tuple[str, ...]  # the Policies fields it sets (all of them, together)
    doc: Callable[[Policies], Any]  # its JSON document from the policies that hold it
    read: Callable[[Any], dict[str, Any]]  # a request body as checked policy changes
    body: str  # the body's shape, for the OpenAPI description
    what: str  # a short name for summaries: "publish rate (PublishRate)"

    @property
    def name(self) -> str:
        return self.path.strip("/")

    def own(self, overrides: dict[str, Any], policies: Policies) -> Any:
        """The document of what ``overrides`` (a namespace's or topic's own settings, over
        which ``policies`` apply) set of this policy; None where they set none of it."""
        if not any(f in overrides for f in self.fields):
            return None
        return self.doc(policies)


def answer(doc: Any) -> web.Response:
    """A GET's answer: ``doc`` as JSON, or Pulsar's answer for null (204, no body)."""
    return no_content() if doc is None else web.json_response(doc)


def _checked(read: Callable[[Any], dict[str, Any]]) -> Callable[[Any], dict[str, Any]]:
    """``read`` followed by `check_values` (Pulsar's 412 for values out of their range)."""
    return lambda value: check_values(read(value))


def _read_retention(value: Any) -> dict[str, Any]:
    body = expect(value, dict, "retention")
    return {"retention_time_minutes": number(body, "retentionTimeInMinutes", 0),
            "retention_size_mb": number(body, "retentionSizeInMB", 0, _JAVA_LONG_MAX)}


def int_policy(path: str, field: str, what: str) -> PolicySpec:
    """An integer policy (a Java ``int``: 400 outside it or for another JSON value; 412
    for a negative one, where `check_values` says so)."""
    name = path.strip("/")

    def read(value: Any) -> dict[str, Any]:
        return check_values({field: number({name: value}, name, 0)})

    return PolicySpec(path, (field,), lambda p: getattr(p, field), read, "int", what)


def dispatch_rate(path: str, prefix: str, what: str) -> PolicySpec:
    """A ``DispatchRate`` policy over the fields ``{prefix}_msgs / _bytes / _period``."""
    return PolicySpec(
        path, (f"{prefix}_msgs", f"{prefix}_bytes", f"{prefix}_period"),
        lambda p: dispatch_rate_doc(p, prefix), _checked(lambda v: read_dispatch_rate(v, prefix)),
        '{"dispatchThrottlingRateInMsg": int, "dispatchThrottlingRateInByte": long, '
        '"ratePeriodInSecond": int}', f"{what} (DispatchRate)")


RETENTION = PolicySpec(
    "/retention", ("retention_time_minutes", "retention_size_mb"), retention_doc,
    _read_retention, '{"retentionTimeInMinutes": int, "retentionSizeInMB": long}',
    "retention (minutes, MB; -1: unlimited)")
PUBLISH_RATE = PolicySpec(
    "/publishRate", ("publish_rate_msgs", "publish_rate_bytes"), publish_rate_doc,
    _checked(read_publish_rate),
    '{"publishThrottlingRateInMsg": int, "publishThrottlingRateInByte": long}',
    "publish rate (PublishRate)")
DISPATCH_RATE = dispatch_rate("/dispatchRate", "dispatch_rate", "dispatch rate")
SUBSCRIPTION_DISPATCH_RATE = dispatch_rate(
    "/subscriptionDispatchRate", "subscription_dispatch_rate", "dispatch rate per subscription")
REPLICATOR_DISPATCH_RATE = dispatch_rate(
    "/replicatorDispatchRate", "replicator_dispatch_rate",
    "dispatch rate per geo-replicator (one topic to one remote cluster)")
SUBSCRIBE_RATE = PolicySpec(
    "/subscribeRate", ("subscribe_rate", "subscribe_rate_period"), subscribe_rate_doc,
    _checked(read_subscribe_rate),
    '{"subscribeThrottlingRatePerConsumer": int, "ratePeriodInSecond": int (30)}',
    "subscribe rate per consumer (SubscribeRate)")
INACTIVE_TOPIC_POLICIES = PolicySpec(
    "/inactiveTopicPolicies",
    ("inactive_topic_delete_mode", "inactive_topic_max_inactive_seconds",
     "inactive_topic_delete_while_inactive"),
    inactive_topic_policies_doc, _checked(read_inactive_topic_policies),
    '{"inactiveTopicDeleteMode": "delete_when_no_subscriptions"|'
    '"delete_when_subscriptions_caught_up", "maxInactiveDurationSeconds": int, '
    '"deleteWhileInactive": bool}',
    "inactive topic policies (InactiveTopicPolicies)")
