"""The console: a browser UI for the cluster, served under ``/console/`` by every broker
(and by ``magnetar console --admin-url URL`` beside a cluster, cli/console.py).

- ``/console/...`` pages: one HTML shell (``console_files/index.html``) whose ES module
  (``app.js``) reads the address and draws the page; ``/console/static/{file}`` the files.
  Served without credentials (they hold no data) with ``Content-Security-Policy:
  default-src 'self'``, no inline script, no framing.
- ``/console/api/{admin path}``: the page's only way to the admin API. It forwards the call
  (its ``Authorization`` header included) to an admin service (this broker's own port, or
  the ``--admin-url``), follows the 307 a cluster answers for a bundle another broker owns
  on the server side (a browser would drop the token there), and refuses a state-changing
  call without the ``X-Magnetar-Console`` header or from another site: a cross-site form
  cannot set that header, and a cross-site script's preflight is never granted.
- ``/admin/v2/console/broker`` and ``/admin/v2/console/overview``: a broker's state at a glance
  (version, uptime, CPU, disk, metadata store, its loaded topics' totals and those needing
  attention), and every live broker's, asked of each; ``/admin/v2/console/bundles/{t}/{ns}``:
  a namespace's bundles and their owners (superuser only, as the brokers' endpoints are).
- ``cross_site_middleware``: on the admin API too, a state-changing request a browser marks
  as coming from another site (``Sec-Fetch-Site``, ``Origin``) is refused.
"""

from __future__ import annotations

import asyncio
import heapq
import mimetypes
import os
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from magnetar import __version__
from magnetar.admin.namespaces import namespace_of
from magnetar.admin.routing import PORTS, SERVICE, Handler, RouteTable, error_response, rates_of
from magnetar.broker.topics.dedup import REPLICATOR_PREFIX
from magnetar.broker.topics.stats import RateTracker
from magnetar.broker.topics.topic import PersistentTopic, Topic

routes = RouteTable("console")

FILES = Path(__file__).with_name("console_files")
#: the console's custom header: state-changing calls through /console/api need it
CONSOLE_HEADER = "X-Magnetar-Console"
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
_PAGE_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                 "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                 "Cache-Control": "no-cache"}
_SAFE = frozenset({"GET", "HEAD"})
#: request headers forwarded to the admin service, response headers forwarded back
_FORWARD = ("Authorization", "Content-Type", "Accept")
_BACK_PREFIX = "x-pulsar-"
_MAX_HOPS = 4
STARTED: web.AppKey[float] = web.AppKey("console_started", float)
UPSTREAM: web.AppKey[str] = web.AppKey("console_upstream", str)
SESSION: web.AppKey[list[aiohttp.ClientSession]] = web.AppKey("console_session", list)
_CPU: web.AppKey[list[float]] = web.AppKey("console_cpu", list)
_SUMMARY: web.AppKey[list[Any]] = web.AppKey("console_summary", list)
SUMMARY_TTL = 2.0  # seconds a broker's summary is shared (the overview polls every 5 s)
TOP = 10  # rows of each "needs attention" list


def is_console_path(path: str) -> bool:
    return path == "/console" or path.startswith("/console/")


# ---------------------------------------------------------------------- pages

async def _index(request: web.Request) -> web.StreamResponse:
    if request.path == "/console":
        raise web.HTTPMovedPermanently("/console/")
    return web.FileResponse(FILES / "index.html", headers={
        **_PAGE_HEADERS, "Content-Type": "text/html; charset=utf-8"})


async def _static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    path = FILES / name
    if "/" in name or name.startswith(".") or not path.is_file():
        return error_response(404, f"no console file {name!r}")
    kind = "text/javascript" if name.endswith(".js") else (
        mimetypes.guess_type(name)[0] or "application/octet-stream")
    return web.FileResponse(path, headers={**_PAGE_HEADERS, "Content-Type": kind})


# ---------------------------------------------------------------------- the API proxy

def _cross_site(request: web.Request) -> bool:
    """Whether a browser says this request comes from another site (or another origin)."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return True
    origin = request.headers.get("Origin")
    if origin is not None:
        try:
            url = URL(origin)
        except ValueError:
            return True
        return url.host != request.url.host or url.port != request.url.port
    return False


def _upstream(request: web.Request) -> tuple[str, bool]:
    """The admin service to forward to, and whether to verify its TLS certificate: the
    configured URL, else this broker's own port on the address the request came in on."""
    configured = request.app.get(UPSTREAM)
    if configured:
        return configured.rstrip("/"), True
    ports = request.app[PORTS]
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    host = str(sock[0]) if sock else "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    if (request.secure and ports.web_tls is not None) or ports.web is None:
        return f"https://{host}:{ports.web_tls}", False  # ourselves: no name to verify
    return f"http://{host}:{ports.web}", True


def _session(app: web.Application) -> aiohttp.ClientSession:
    holder = app[SESSION]
    if not holder or holder[0].closed:
        holder[:] = [aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60))]
    return holder[0]


async def _close_session(app: web.Application) -> None:
    for session in app[SESSION]:
        await session.close()


async def proxy(request: web.Request) -> web.StreamResponse:
    """Forward one admin call (module docstring)."""
    method = request.method
    if method == "OPTIONS":  # no preflight is ever granted: no other site may call this
        return error_response(403, "the console API is not offered to other sites")
    if method not in _SAFE:
        if _cross_site(request):
            return error_response(403, "refused: a state-changing call from another site")
        if request.headers.get(CONSOLE_HEADER) != "1":
            return error_response(403, f"refused: a state-changing call needs the "
                                  f"{CONSOLE_HEADER} header")
    path = request.match_info["path"]  # decoded, to check; forwarded as it came (encoded)
    if not path.startswith(("admin/v2/", "lookup/v2/")) or ".." in path.split("/"):
        return error_response(404, "the console API forwards /admin/v2 and /lookup/v2 only")
    raw = request.rel_url.raw_path.removeprefix("/console/api/")
    base, verify = _upstream(request)
    target = URL(base + "/" + raw, encoded=True).with_query(request.query)
    headers = {h: request.headers[h] for h in _FORWARD if h in request.headers}
    body = await request.read() if request.body_exists else None
    session = _session(request.app)
    for _ in range(_MAX_HOPS):
        try:
            async with session.request(method, target, data=body, headers=headers,
                                       allow_redirects=False,
                                       ssl=verify) as resp:
                if resp.status in (301, 302, 307, 308) and "Location" in resp.headers:
                    target = target.join(URL(resp.headers["Location"], encoded=True))
                    continue
                data = await resp.read()
                back = {k: v for k, v in resp.headers.items()
                        if k.lower().startswith(_BACK_PREFIX)}
                back["Cache-Control"] = "no-store"
                return web.Response(status=resp.status, body=data, headers=back,
                                    content_type=resp.content_type)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return error_response(502, f"the admin service at {target.origin()} did not "
                                  f"answer: {exc or type(exc).__name__}")
    return error_response(502, "too many redirects")


@web.middleware
async def cross_site_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a state-changing admin request a browser marks as coming from another site
    (programs such as pulsar-admin send neither header: unaffected)."""
    if request.method not in _SAFE and not is_console_path(request.path) and _cross_site(request):
        return error_response(403, "refused: a state-changing request from another site")
    return await handler(request)


def install(app: web.Application, upstream: str = "") -> None:
    """Serve the console on ``app``: its API calls go to ``upstream`` (an admin URL), or,
    when empty, to the app's own admin service."""
    app[STARTED] = time.time()
    app[_CPU] = []
    app[_SUMMARY] = []
    app[SESSION] = []
    if upstream:
        app[UPSTREAM] = upstream
    app.on_cleanup.append(_close_session)
    app.router.add_route("*", "/console/api/{path:.*}", proxy)
    app.router.add_get("/console/static/{name}", _static)
    app.router.add_get("/console", _index)
    app.router.add_get("/console/{tail:.*}", _index)


# ---------------------------------------------------------------------- broker summaries

def _cpu_percent(app: web.Application) -> float:
    """This process's CPU since the previous call, in percent of one core."""
    times = os.times()
    now, used = time.monotonic(), times.user + times.system
    last = app[_CPU]
    app[_CPU][:] = [now, used]
    if not last or now - last[0] <= 0:
        return 0.0
    return 100.0 * (used - last[1]) / (now - last[0])


#: topics summed between two yields to the event loop (a few ms of work each time)
SLICE = 500


def _row(topic: Topic, rates: RateTracker, replication: list[dict[str, Any]]) -> dict[str, Any]:
    """What the overview needs of one loaded topic: the numbers of its stats, without
    building them (no per-producer or per-consumer documents)."""
    backlog = consumers = 0
    for sub in topic.subscriptions.values():
        backlog += sub.backlog()
        consumers += len(sub.consumers)
    rate_in, rate_out = rates.rate("in", topic.name), rates.rate("out", topic.name)
    for remote, replicator in getattr(topic, "replicators", {}).items():
        if not replicator.connected:
            cursor = replicator.cursor
            replication.append({"topic": topic.name, "remote": remote, "replicationBacklog":
                                cursor.backlog() if cursor is not None and not cursor.closed else 0})
    return {"topic": topic.name, "msgBacklog": backlog, "msgRateIn": rate_in[0],
            "msgRateOut": rate_out[0], "msgThroughputIn": rate_in[1],
            "msgThroughputOut": rate_out[1],
            "storageSize": topic.ledger.size_bytes() if isinstance(topic, PersistentTopic) else 0,
            "consumers": consumers, "subscriptions": len(topic.subscriptions),
            "producers": sum(1 for p in topic.producers.values()
                             if not p.name.startswith(REPLICATOR_PREFIX))}


async def broker_summary(request: web.Request) -> dict[str, Any]:
    """This broker's summary (``_summarize``), shared for ``SUMMARY_TTL`` seconds by every
    page asking: many open overviews cost the broker what one does."""
    cached = request.app[_SUMMARY]
    now = time.monotonic()
    if cached and now - cached[0] < SUMMARY_TTL:
        found: dict[str, Any] = cached[1]
        return found
    summary = await _summarize(request)
    cached[:] = [now, summary]
    return summary


async def _summarize(request: web.Request) -> dict[str, Any]:
    """This broker's state and its loaded topics' totals and attention lists, summed in
    slices of ``SLICE`` topics with a yield to the event loop between them (a broker of
    10,000 topics is not stalled for the whole sum)."""
    service = request.app[SERVICE]
    rates = rates_of(request)
    totals = {"topics": 0, "producers": 0, "consumers": 0, "msgRateIn": 0.0,
              "msgRateOut": 0.0, "msgThroughputIn": 0.0, "msgThroughputOut": 0.0,
              "msgBacklog": 0, "storageSize": 0}
    rows: list[dict[str, Any]] = []
    replication: list[dict[str, Any]] = []
    loaded = list(service.topics.values())
    for i, topic in enumerate(loaded):
        if i and i % SLICE == 0:
            await asyncio.sleep(0)
        row = _row(topic, rates, replication)
        rows.append(row)
        for key in totals:
            totals[key] += 1 if key == "topics" else row[key]
    cluster = service.cluster
    broker_id = cluster.broker_id if cluster is not None else (
        f"{service.config.advertisedAddress or request.url.host}:{request.url.port}")
    last = cluster.registry.last if cluster is not None else None
    # a broker alone owns one bundle per namespace (of its loaded topics, as its load report)
    bundles = last.num_bundles if last is not None else len(
        {name.split("://", 1)[-1].rsplit("/", 1)[0] for name in service.topics})
    return {
        "brokerId": broker_id,
        "version": __version__,
        "uptimeSeconds": time.time() - request.app[STARTED],
        "cpuPercent": _cpu_percent(request.app),
        "bundles": bundles,
        "serving": service.serving(),
        "readOnly": service.disk.refusal(),
        "metadataStore": service.metadata.unavailable_reason(),
        "totals": totals,
        "largestBacklogs": heapq.nlargest(TOP, (r for r in rows if r["msgBacklog"]),
                                          key=lambda r: r["msgBacklog"]),
        "unconsumedBacklogs": heapq.nlargest(
            TOP, (r for r in rows if r["msgBacklog"] and not r["consumers"]),
            key=lambda r: (r["msgRateIn"] > 0, r["msgBacklog"])),  # growing ones first
        "replicationDisconnected": replication[:TOP * 10],
    }


@routes.route("GET", "/admin/v2/console/broker",
              "This broker at a glance (the console's overview): version, uptime, CPU, disk "
              "read-only or not, metadata store, its loaded topics' totals and largest backlogs.")
async def broker_state(request: web.Request) -> web.Response:
    return web.json_response(await broker_summary(request))


async def _ask(session: aiohttp.ClientSession, url: str, headers: dict[str, str]
               ) -> dict[str, Any]:
    try:
        async with session.get(url + "/admin/v2/console/broker", headers=headers,
                               timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return {"error": f"{resp.status}: {(await resp.text())[:200]}"}
            found: dict[str, Any] = await resp.json()
            return found
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return {"error": f"not reachable: {exc or type(exc).__name__}"}


@routes.route("GET", "/admin/v2/console/overview",
              "Every live broker of the cluster at a glance (/admin/v2/console/broker of each, "
              "asked with the caller's credentials) with their load reports.")
async def overview(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    mine = await broker_summary(request)
    brokers = [mine]
    cluster = service.cluster
    if cluster is not None:
        live = await cluster.registry.live()
        headers = {h: request.headers[h] for h in ("Authorization",) if h in request.headers}
        others = [(bid, data) for bid, data in sorted(live.items()) if bid != cluster.broker_id]
        session = _session(request.app)
        answers = await asyncio.gather(*(
            _ask(session, (data.web_url or "").rstrip("/"), headers) for _, data in others))
        for (bid, _), answer in zip(others, answers, strict=True):
            brokers.append({**answer, "brokerId": bid})
        for b in brokers:
            data = live.get(b["brokerId"])
            if data is not None:
                b["load"] = data.to_json()
                b["bundles"] = data.num_bundles
                b.setdefault("webServiceUrl", data.web_url)
    return web.json_response({"cluster": service.config.clusterName, "brokers": brokers})


@routes.route("GET", "/admin/v2/console/bundles/{tenant}/{namespace}",
              "The namespace's bundles and the broker owning each (its web service URL; "
              "null: not owned now).")
async def bundle_owners(request: web.Request) -> web.Response:
    service = request.app[SERVICE]
    namespace = namespace_of(request)
    cluster = service.cluster
    if cluster is None:  # a broker alone: one bundle, its own
        return web.json_response([{"bundle": "0x00000000_0xffffffff",
                                   "owner": f"{request.scheme}://{request.host}"}])
    out = []
    for bundle in (await cluster.bundles(namespace)).ranges:
        owner = await cluster.ownership.owner_of(namespace, bundle)
        out.append({"bundle": bundle.name,
                    "owner": (owner.web_url or owner.service_url) if owner is not None else None})
    return web.json_response(out)
