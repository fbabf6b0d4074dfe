"""What the cluster keeps in the metadata store: Pulsar's paths and JSON shapes.

- ``/loadbalance/brokers/{host}:{webPort}`` (ephemeral): `BrokerData`, Pulsar's
  ``LocalBrokerData`` (URLs, advertised listeners, a load report with each owned bundle's
  rates in ``lastStats``, `BundleStats`, Pulsar's ``NamespaceBundleStats``);
- ``/namespace/{tenant}/{ns}/{0xLLLLLLLL_0xUUUUUUUU}`` (ephemeral): `OwnerData`, Pulsar's
  ``NamespaceEphemeralData`` (the owner's URLs; ``disabled`` while it unloads the bundle);
- ``/loadbalance/leader`` (ephemeral): `LeaderData`, Pulsar's ``LeaderBroker``;
- ``/admin/local-policies/{tenant}/{ns}``: the namespace's ``bundles`` (``BundlesData``);
- ``/magnetar/ledger-ids`` (Magnetar's own): the next ledger id nobody has taken (a JSON
  integer; brokers sharing storage take blocks of ids from it, `magnetar.metadata.IdBlocks`).

Values go to and from plain JSON dicts here; unknown fields are ignored on the way in, as
a Pulsar broker ignores them, so records written by a newer version still read. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from magnetar.broker.cluster.bundles import BundleRange

__all__ = [
    "BROKERS_ROOT",
    "LEADER_PATH",
    "LEDGER_IDS_PATH",
    "LOCAL_POLICIES_ROOT",
    "OWNERSHIP_ROOT",
    "BrokerData",
    "BundleStats",
    "LeaderData",
    "ListenerUrls",
    "OwnerData",
    "broker_path",
    "handoff_path",
    "local_policies_path",
    "owner_path",
    "parse_owner_path",
]

BROKERS_ROOT = "/loadbalance/brokers"
LEADER_PATH = "/loadbalance/leader"
OWNERSHIP_ROOT = "/namespace"
LOCAL_POLICIES_ROOT = "/admin/local-policies"
LEDGER_IDS_PATH = "/magnetar/ledger-ids"
HANDOFF_ROOT = "/magnetar/handoff"


def broker_path(broker_id: str) -> str:
    """The registry key of a broker (its id is ``host:webPort``)."""
    return f"{BROKERS_ROOT}/{broker_id}"


def owner_path(namespace: str, bundle: BundleRange) -> str:
    """The ownership key of a bundle of ``tenant/ns``."""
    return f"{OWNERSHIP_ROOT}/{namespace}/{bundle.name}"


def handoff_path(namespace: str, bundle: BundleRange) -> str:
    """Magnetar's own key: where an unloading owner says which broker a bundle goes to."""
    return f"{HANDOFF_ROOT}/{namespace}/{bundle.name}"


def parse_owner_path(path: str) -> tuple[str, BundleRange] | None:
    """``(namespace, bundle)`` of an ownership key, None for any other path."""
    prefix = OWNERSHIP_ROOT + "/"
    if not path.startswith(prefix):
        return None
    namespace, _, last = path[len(prefix):].rpartition("/")
    if not namespace:
        return None
    try:
        return namespace, BundleRange.parse(last)
    except ValueError:
        return None


def local_policies_path(namespace: str) -> str:
    return f"{LOCAL_POLICIES_ROOT}/{namespace}"


def _str(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    return value if isinstance(value, str) else ""


@dataclass(frozen=True, slots=True)
class ListenerUrls:
    """One advertised listener's URLs (Pulsar's ``AdvertisedListener``)."""

    service_url: str = ""
    service_url_tls: str = ""

    def to_json(self) -> dict[str, str]:
        out = {"brokerServiceUrl": self.service_url}
        if self.service_url_tls:
            out["brokerServiceUrlTls"] = self.service_url_tls
        return out

    @staticmethod
    def from_json(data: Any) -> ListenerUrls:
        if not isinstance(data, dict):
            return ListenerUrls()
        return ListenerUrls(_str(data, "brokerServiceUrl"), _str(data, "brokerServiceUrlTls"))


def _listeners_from(data: dict[str, Any]) -> dict[str, ListenerUrls]:
    raw = data.get("advertisedListeners")
    if not isinstance(raw, dict):
        return {}
    return {str(k): ListenerUrls.from_json(v) for k, v in raw.items()}


@dataclass(frozen=True, slots=True)
class _Urls:
    """The URLs every record names a broker by."""

    service_url: str
    service_url_tls: str = ""
    web_url: str = ""
    web_url_tls: str = ""
    listeners: dict[str, ListenerUrls] = field(default_factory=dict)

    def urls_for(self, listener: str | None) -> ListenerUrls:
        """The binary URLs a client asking for ``listener`` should use (None: the default
        ones). ``KeyError`` when the broker has advertised listeners but not that one."""
        if listener and self.listeners:
            return self.listeners[listener]
        return ListenerUrls(self.service_url, self.service_url_tls)


@dataclass(frozen=True, slots=True)
class OwnerData(_Urls):
    """The value of a bundle's ownership key."""

    disabled: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "nativeUrl": self.service_url, "nativeUrlTls": self.service_url_tls,
            "httpUrl": self.web_url, "httpUrlTls": self.web_url_tls,
            "disabled": self.disabled,
            "advertisedListeners": {k: v.to_json() for k, v in self.listeners.items()},
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> OwnerData:
        return OwnerData(_str(data, "nativeUrl"), _str(data, "nativeUrlTls"),
                         _str(data, "httpUrl"), _str(data, "httpUrlTls"),
                         _listeners_from(data), bool(data.get("disabled", False)))


def _num(data: dict[str, Any], key: str) -> float:
    value = data.get(key, 0)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _usage(data: dict[str, Any], key: str, default_limit: float = 0.0) -> tuple[float, float]:
    """``(usage, limit)`` of a ``{"usage": u, "limit": l}`` resource (Pulsar's ResourceUsage)."""
    raw = data.get(key)
    if not isinstance(raw, dict):
        return 0.0, default_limit
    return _num(raw, "usage"), _num(raw, "limit") if "limit" in raw else default_limit


def _percent(usage: float, limit: float) -> float:
    return 100.0 * usage / limit if limit > 0 else 0.0


@dataclass(frozen=True, slots=True)
class BundleStats:
    """One owned bundle's traffic over the last report interval (Pulsar's
    ``NamespaceBundleStats``, kept per bundle in the report's ``lastStats``)."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0  # bytes/s
    msg_throughput_out: float = 0.0
    producer_count: int = 0
    consumer_count: int = 0
    topics: int = 0

    @property
    def throughput(self) -> float:
        """Bytes/s in and out: what shedding ranks bundles by."""
        return self.msg_throughput_in + self.msg_throughput_out

    def to_json(self) -> dict[str, Any]:
        return {"msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out,
                "msgThroughputIn": self.msg_throughput_in,
                "msgThroughputOut": self.msg_throughput_out,
                "producerCount": self.producer_count, "consumerCount": self.consumer_count,
                "topics": self.topics, "cacheSize": 0}

    @staticmethod
    def from_json(data: Any) -> BundleStats:
        if not isinstance(data, dict):
            return BundleStats()
        return BundleStats(_num(data, "msgRateIn"), _num(data, "msgRateOut"),
                           _num(data, "msgThroughputIn"), _num(data, "msgThroughputOut"),
                           int(_num(data, "producerCount")), int(_num(data, "consumerCount")),
                           int(_num(data, "topics")))


@dataclass(frozen=True, slots=True)
class BrokerData(_Urls):
    """A broker's registry entry: its URLs and its latest load report.

    Resources are Pulsar's ``{usage, limit}`` pairs: CPU in percent of one core (the limit
    is 100 per core), memory in MB (the process's resident set; the limit is the machine's
    memory), bandwidth in KB/s (the broker's message traffic; the limit is the NIC speed,
    0 when unknown: not counted). Rates are over the last report interval."""

    cpu_usage: float = 0.0
    cpu_limit: float = 100.0
    memory_usage: float = 0.0
    memory_limit: float = 0.0
    bandwidth_in_usage: float = 0.0
    bandwidth_in_limit: float = 0.0
    bandwidth_out_usage: float = 0.0
    bandwidth_out_limit: float = 0.0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    num_topics: int = 0
    num_bundles: int = 0
    num_producers: int = 0
    num_consumers: int = 0
    bundles: tuple[str, ...] = ()
    bundle_stats: dict[str, BundleStats] = field(default_factory=dict)  # "lastStats"
    last_update: int = 0  # ms since the epoch
    version: str = ""

    @property
    def cpu_percent(self) -> float:
        return _percent(self.cpu_usage, self.cpu_limit)

    @property
    def usages(self) -> dict[str, float]:
        """Each resource's use in percent of its limit (those with a known limit)."""
        return {"cpu": self.cpu_percent,
                "memory": _percent(self.memory_usage, self.memory_limit),
                "bandwidthIn": _percent(self.bandwidth_in_usage, self.bandwidth_in_limit),
                "bandwidthOut": _percent(self.bandwidth_out_usage, self.bandwidth_out_limit)}

    @property
    def max_resource_usage(self) -> float:
        """The broker's load as Pulsar's OverloadShedder sees it: its most used resource,
        in percent of that resource's limit."""
        return max(self.usages.values())

    @property
    def msg_rate(self) -> float:
        """Messages/s in and out."""
        return self.msg_rate_in + self.msg_rate_out

    @property
    def throughput(self) -> float:
        """Bytes/s in and out."""
        return self.msg_throughput_in + self.msg_throughput_out

    def owner_data(self) -> OwnerData:
        return OwnerData(self.service_url, self.service_url_tls, self.web_url, self.web_url_tls,
                         dict(self.listeners))

    def to_json(self) -> dict[str, Any]:
        return {
            "webServiceUrl": self.web_url, "webServiceUrlTls": self.web_url_tls,
            "pulsarServiceUrl": self.service_url, "pulsarServiceUrlTls": self.service_url_tls,
            "persistentTopicsEnabled": True, "nonPersistentTopicsEnabled": True,
            "cpu": {"usage": self.cpu_usage, "limit": self.cpu_limit},
            "memory": {"usage": self.memory_usage, "limit": self.memory_limit},
            "directMemory": {"usage": 0.0, "limit": 0.0},
            "bandwidthIn": {"usage": self.bandwidth_in_usage, "limit": self.bandwidth_in_limit},
            "bandwidthOut": {"usage": self.bandwidth_out_usage,
                             "limit": self.bandwidth_out_limit},
            "msgRateIn": self.msg_rate_in, "msgRateOut": self.msg_rate_out,
            "msgThroughputIn": self.msg_throughput_in,
            "msgThroughputOut": self.msg_throughput_out,
            "numTopics": self.num_topics, "numBundles": self.num_bundles,
            "numProducers": self.num_producers, "numConsumers": self.num_consumers,
            "bundles": list(self.bundles), "lastUpdate": self.last_update,
            "lastStats": {k: v.to_json() for k, v in self.bundle_stats.items()},
            "brokerVersionString": self.version,
            "advertisedListeners": {k: v.to_json() for k, v in self.listeners.items()},
            "loadReportType": "LocalBrokerData",
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> BrokerData:
        def num(key: str) -> float:
            return _num(data, key)

        bundles = data.get("bundles")
        stats = data.get("lastStats")
        cpu, memory = _usage(data, "cpu", 100.0), _usage(data, "memory")
        bw_in, bw_out = _usage(data, "bandwidthIn"), _usage(data, "bandwidthOut")
        return BrokerData(
            _str(data, "pulsarServiceUrl"), _str(data, "pulsarServiceUrlTls"),
            _str(data, "webServiceUrl"), _str(data, "webServiceUrlTls"), _listeners_from(data),
            cpu_usage=cpu[0], cpu_limit=cpu[1], memory_usage=memory[0], memory_limit=memory[1],
            bandwidth_in_usage=bw_in[0], bandwidth_in_limit=bw_in[1],
            bandwidth_out_usage=bw_out[0], bandwidth_out_limit=bw_out[1],
            msg_rate_in=num("msgRateIn"), msg_rate_out=num("msgRateOut"),
            msg_throughput_in=num("msgThroughputIn"), msg_throughput_out=num("msgThroughputOut"),
            num_topics=int(num("numTopics")), num_bundles=int(num("numBundles")),
            num_producers=int(num("numProducers")), num_consumers=int(num("numConsumers")),
            bundles=tuple(str(b) for b in bundles) if isinstance(bundles, list) else (),
            bundle_stats={str(k): BundleStats.from_json(v) for k, v in stats.items()}
            if isinstance(stats, dict) else {},
            last_update=int(num("lastUpdate")), version=_str(data, "brokerVersionString"))


@dataclass(frozen=True, slots=True)
class LeaderData:
    """The leader election key's value: the leader's id and web service URL."""

    broker_id: str
    service_url: str

    def to_json(self) -> dict[str, str]:
        return {"brokerId": self.broker_id, "serviceUrl": self.service_url}

    @staticmethod
    def from_json(data: dict[str, Any]) -> LeaderData:
        return LeaderData(_str(data, "brokerId"), _str(data, "serviceUrl"))
