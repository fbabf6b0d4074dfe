"""Cluster endpoints at Pulsar's paths: the leader broker, this broker's load report, a
namespace's bundles, unloading and splitting a bundle, unloading a namespace across its
bundles' owners.

In a cluster (``metadataStoreUrl=zk:...``) a request about a bundle another broker owns is
answered with a 307 to that broker's web service, as Pulsar answers it. A broker alone is
a one-broker cluster whose namespaces have one bundle, ``0x00000000_0xffffffff``.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import NoReturn
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from magnetar import __version__
from magnetar.admin.namespaces import NS, namespace_of, unload_namespace
from magnetar.admin.routing import SERVICE, RestError, RouteTable, no_content
from magnetar.admin.tenants import broker_service_url, host_of, web_service_url
from magnetar.broker.cluster.bundles import SPLIT_ALGORITHMS, BundleRange, NamespaceBundles
from magnetar.broker.cluster.load_report import (
    LoadSampler,
    memory_limit_mb,
    nic_speed_kbps,
    topic_counters,
)
from magnetar.broker.cluster.records import BrokerData
from magnetar.broker.service import BrokerService
from magnetar.broker.topic_name import TopicName
from magnetar.metadata import MetadataStoreError

routes = RouteTable("cluster")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_FULL = NamespaceBundles.evenly(1)


def _bundle_of(request: web.Request) -> BundleRange:
    try:
        return BundleRange.parse(request.match_info["bundle"])
    except ValueError as exc:
        raise RestError(400, str(exc)) from None


def _redirect(request: web.Request, web_url: str, web_url_tls: str = "") -> NoReturn:
    """307 to the same request at another broker's web service: its TLS one when the
    request came over TLS and it has one (credentials stay encrypted)."""
    if request.secure and web_url_tls:
        web_url = web_url_tls
    query = dict(request.query)
    query["authoritative"] = "true"
    location = web_url.rstrip("/") + str(request.rel_url.with_query(query))
    raise web.HTTPTemporaryRedirect(location)


@routes.route("GET", "/admin/v2/broker-stats/load-report",
              "This broker's latest load report (LocalBrokerData: CPU, memory, bandwidth, "
              "message rates, per-bundle lastStats), as written to /loadbalance/brokers.")
async def load_report(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    cluster = service.cluster
    last = cluster.registry.last if cluster is not None else None
    if last is None:  # a broker alone: measured now, each namespace one bundle
        last = _standalone_report(request)
    return web.json_response(last.to_json())


#: a broker alone's load sampler, made at its first load-report request
_SAMPLERS: weakref.WeakKeyDictionary[BrokerService, LoadSampler] = weakref.WeakKeyDictionary()


def _standalone_report(request: web.Request) -> BrokerData:
    """The load report of a broker without a cluster, rates since the previous request
    (zero at the first)."""
    service = request.app[SERVICE]
    topics = {name: topic_counters(topic) for name, topic in service.topics.items()}

    def bundle_of(topic: str) -> str:
        return f"{TopicName.parse(topic).namespace}/{_FULL.ranges[0].name}"

    sampler = _SAMPLERS.get(service)
    if sampler is None:
        sampler = _SAMPLERS[service] = LoadSampler(
            os.cpu_count() or 1, nic_speed_kbps(service.config.loadBalancerOverrideBrokerNicSpeedGbps),
            memory_limit_mb())
        sampler.sample(topics, bundle_of)  # the baseline
    fields = sampler.sample(topics, bundle_of)
    owned = tuple(fields["bundle_stats"])
    return BrokerData(broker_service_url(request), "", web_service_url(request), "",
                      num_bundles=len(owned), bundles=owned,
                      last_update=int(time.time() * 1000), version=__version__, **fields)


@routes.route("GET", "/admin/v2/brokers/leaderBroker",
              "The leader broker: brokerId and serviceUrl (its web service).")
async def leader_broker(request: web.Request) -> web.Response:
    cluster = request.app[SERVICE].cluster
    if cluster is None:
        return web.json_response({"brokerId": f"{host_of(request)}:{request.url.port}",
                                  "serviceUrl": web_service_url(request)})
    leader = await cluster.leader()
    if leader is None:
        raise RestError(404, "the cluster has no leader broker right now")
    return web.json_response(leader.to_json())


@routes.route("GET", NS + "/bundles", "The namespace's bundles (BundlesData).")
async def bundles(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    cluster = request.app[SERVICE].cluster
    found = _FULL if cluster is None else await cluster.bundles(namespace)
    return web.json_response(found.to_json())


@routes.route("PUT", NS + "/unload", "Unload the namespace: every bundle, on its owner.")
async def unload(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    service = request.app[SERVICE]
    cluster = service.cluster
    if cluster is None:
        await unload_namespace(service, namespace)
        return no_content()
    async with aiohttp.ClientSession() as session:
        for bundle in (await cluster.bundles(namespace)).ranges:
            if await cluster.unload(namespace, bundle):
                continue
            owner = await cluster.ownership.owner_of(namespace, bundle)
            if owner is None or not owner.web_url:
                continue
            url = f"{owner.web_url}/admin/v2/namespaces/{namespace}/{bundle}/unload"
            headers = {k: v for k, v in request.headers.items() if k.lower() == "authorization"}
            async with session.put(url, params={"authoritative": "true"},
                                   headers=headers) as resp:
                if resp.status >= 300:
                    raise RestError(resp.status, f"unloading {bundle} at {owner.web_url}: "
                                    f"HTTP {resp.status}")
    return no_content()


@routes.route("PUT", NS + "/{bundle}/unload",
              "Unload a bundle (?destinationBroker=host:port): its topics closed, their clients "
              "sent to the next owner, its ownership released (307 to its owner).")
async def unload_bundle(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    bundle = _bundle_of(request)
    service = request.app[SERVICE]
    cluster = service.cluster
    if cluster is None:
        if bundle != _FULL.ranges[0]:
            raise RestError(404, f"bundle {bundle} is not a bundle of {namespace}")
        await unload_namespace(service, namespace)
        return no_content()
    if bundle not in await cluster.bundles(namespace):
        raise RestError(404, f"bundle {bundle} is not a bundle of {namespace}")
    if not await cluster.unload(namespace, bundle, request.query.get("destinationBroker")):
        owner = await cluster.ownership.owner_of(namespace, bundle)
        if owner is not None and owner.web_url and owner.web_url != cluster.me.web_url:
            return _redirect(request, owner.web_url, owner.web_url_tls)
    return no_content()


@routes.route("PUT", NS + "/{bundle}/split",
              "Split a bundle (?splitAlgorithmName=range_equally_divide|topic_count_equally_divide"
              "&unload=false); 307 to its owner.")
async def split_bundle(request: web.Request) -> web.Response:
    namespace = namespace_of(request)
    bundle = _bundle_of(request)
    service = request.app[SERVICE]
    cluster = service.cluster
    if cluster is None:
        raise RestError(412, "bundles are split in a cluster (metadataStoreUrl); a broker "
                        "alone serves each namespace as one bundle")
    algorithm = request.query.get("splitAlgorithmName") or "range_equally_divide"
    if algorithm not in SPLIT_ALGORITHMS[:2]:
        raise RestError(412, f"unsupported splitAlgorithmName {algorithm!r}")
    if not cluster.ownership.is_owned(namespace, bundle):
        owner = await cluster.ownership.owner_of(namespace, bundle)
        if owner is not None and owner.web_url and owner.web_url != cluster.me.web_url:
            return _redirect(request, owner.web_url, owner.web_url_tls)
    try:
        await cluster.split(namespace, bundle, algorithm, tuple(service.topics))
    except ValueError as exc:
        raise RestError(412, str(exc)) from None
    if request.query.get("unload", "false").lower() == "true":
        for child in (await cluster.bundles(namespace)).ranges:
            if bundle.lower <= child.lower < bundle.upper:
                await cluster.unload(namespace, child)
    return no_content()


_TOPIC_PATH = re.compile(
    r"^/admin/v2/(persistent|non-persistent)/([^/]+)/([^/]+)/([^/]+)(/.*)?$")
#: the transaction participants' paths (admin/transaction_participants.py): a persistent topic
_TXN_TOPIC_PATH = re.compile(
    r"^/admin/v3/transactions/(?:transactionBufferStats|pendingAckStats|transactionInBufferStats"
    r"|transactionInPendingAckStats)/([^/]+)/([^/]+)/([^/]+)(?:/.*)?$")
#: endpoints about a partitioned topic as a whole: no broker owns the base topic
_WHOLE_TOPIC = ("/partitions", "/partitioned-stats", "/partitioned-internalStats")


def _topic_of(path: str) -> str | None:
    """The topic a request's path is about, if it is a path its owner answers (not one
    about a partitioned topic as a whole)."""
    m = _TOPIC_PATH.match(path)
    if m is not None:
        if (m.group(5) or "").startswith(_WHOLE_TOPIC):
            return None
        return f"{m.group(1)}://{m.group(2)}/{m.group(3)}/{unquote(m.group(4))}"
    t = _TXN_TOPIC_PATH.match(path)
    if t is not None:
        return f"persistent://{t.group(1)}/{t.group(2)}/{unquote(t.group(3))}"
    return None


async def _read_through_namespace(request: web.Request) -> None:
    """A tenant or namespace in the request that this broker does not know is read from
    the metadata store: created at another broker a moment ago (and answered), its
    notification may not have arrived here yet."""
    service = request.app[SERVICE]
    tenant = request.match_info.get("tenant")
    namespace = request.match_info.get("namespace")
    if tenant is None or namespace is None or service.namespaces.exists(f"{tenant}/{namespace}"):
        return
    # a name that cannot exist, or the store down: the handler answers as without this
    with contextlib.suppress(ValueError, MetadataStoreError):
        if tenant not in service.namespaces.tenants():
            await service.metadata.read_through(f"tenants/{tenant}")
        await service.metadata.read_through(f"namespaces/{tenant}/{namespace}")


@web.middleware
async def owner_redirect_middleware(request: web.Request, handler: Handler
                                    ) -> web.StreamResponse:
    """In a cluster, a request about a topic another live broker serves (a v2 topic path,
    or a transaction participant's v3 path) is answered with a 307 to that broker
    (``authoritative=true``), as Pulsar answers it. A request about a
    partitioned topic as a whole is answered where it arrives (no broker owns it: the
    handler asks each partition's owner). A tenant or namespace not known here is read
    from the metadata store first."""
    cluster = request.app[SERVICE].cluster
    if cluster is not None:
        await _read_through_namespace(request)
    topic = _topic_of(request.path) if cluster is not None else None
    if cluster is None or topic is None or request.query.get("authoritative") == "true":
        return await handler(request)
    if request.app[SERVICE].metadata.get(f"partitioned/{topic}") is not None:
        return await handler(request)  # a partitioned topic as a whole: asked of each owner
    try:
        namespace, bundle = await cluster.bundle_of(topic)
    except ValueError:
        return await handler(request)  # a bad name: the handler says what is wrong
    owner = await cluster.ownership.owner_of(namespace, bundle)
    if owner is None:  # free: to the broker it was placed on, if that is not us
        owner = await cluster.placed_elsewhere(namespace, bundle)
    if owner is not None and owner.web_url and owner.web_url != cluster.me.web_url:
        _redirect(request, owner.web_url, owner.web_url_tls)
    return await handler(request)
