"""Reader and writer options: parsed and checked once, on the driver, at planning time.

``SourceOptions.parse(options)`` turns Spark's string options (case-insensitive keys) into
a small picklable dataclass, or raises ``PulsarOptionError`` whose message says what to
set. Names follow the Scala connector users know (``service.url``, ``topic`` / ``topics`` /
``topicsPattern``, ``startingOffsets`` ...). ``pulsar.client.*``, ``pulsar.reader.*`` and
``pulsar.producer.*`` are handed to the client's ``Client`` / ``create_reader`` /
``create_producer`` keyword arguments; the option's name may be the keyword itself
(``operation_timeout_seconds``) or its camelCase Java spelling (``operationTimeoutSeconds``),
and the value is converted to the keyword's type.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from magnetar.spark.offsets import Bound, parse_offsets_option


class PulsarOptionError(ValueError):
    """A missing, malformed or conflicting option (raised at planning time)."""


TOPIC_KEYS = ("topic", "topics", "topicspattern")


@dataclass(frozen=True)
class ClientSettings:
    """Everything an executor needs to build its own client (travels in partitions)."""

    service_url: str
    client_kwargs: dict[str, Any] = field(default_factory=dict)
    auth: tuple[str, str] | None = None  # (plugin kind, params)


@dataclass(frozen=True)
class SourceOptions:
    client: ClientSettings
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting: str | dict[str, str | Bound] = "earliest"
    ending: str | dict[str, str | Bound] = "latest"
    starting_time: int | None = None
    ending_time: int | None = None
    fail_on_data_loss: bool = True
    max_records_per_trigger: int | None = None
    subscription_name: str | None = None
    reader_kwargs: dict[str, Any] = field(default_factory=dict)
    poll_timeout_ms: int = 120_000

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool = False) -> SourceOptions:
        opts = lower(options)
        client = parse_client(opts)
        topics, pattern = parse_subject(opts)
        starting = parse_offsets_option(opts.get("startingoffsets", "earliest" if not streaming
                                                  else "latest"), "startingOffsets",
                                        PulsarOptionError)
        ending = parse_offsets_option(opts.get("endingoffsets", "latest"), "endingOffsets",
                                      PulsarOptionError)
        if streaming and "endingoffsets" in opts:
            raise PulsarOptionError("'endingOffsets' applies to batch queries only; a stream "
                                    "has no end (use Trigger.AvailableNow to stop)")
        if starting == "latest" and not streaming:
            raise PulsarOptionError("'startingOffsets' cannot be 'latest' for a batch query "
                                    "(nothing would be read); use 'earliest' or a JSON offset")
        if ending == "earliest":
            raise PulsarOptionError("'endingOffsets' cannot be 'earliest'; use 'latest' or JSON")
        starting_time = _int(opts, "startingtime", "startingTime", minimum=0)
        ending_time = _int(opts, "endingtime", "endingTime", minimum=0)
        if starting_time is not None and "startingoffsets" in opts:
            raise PulsarOptionError("set 'startingOffsets' or 'startingTime', not both")
        if ending_time is not None and "endingoffsets" in opts:
            raise PulsarOptionError("set 'endingOffsets' or 'endingTime', not both")
        if streaming and ending_time is not None:
            raise PulsarOptionError("'endingTime' applies to batch queries only")
        limit = _int(opts, "maxrecordspertrigger", "maxRecordsPerTrigger", minimum=1)
        alias = _int(opts, "maxentriespertrigger", "maxEntriesPerTrigger", minimum=1)
        if limit is not None and alias is not None and limit != alias:
            raise PulsarOptionError("'maxRecordsPerTrigger' and its alias "
                                    "'maxEntriesPerTrigger' disagree; set one")
        limit = limit if limit is not None else alias
        if limit is not None and not streaming:
            raise PulsarOptionError("'maxRecordsPerTrigger' applies to streaming reads only")
        sub = opts.get("subscriptionname") or None
        if sub is not None and not streaming:
            raise PulsarOptionError("'subscriptionName' applies to streaming reads only")
        return cls(
            client=client, topics=topics, pattern=pattern, starting=starting, ending=ending,
            starting_time=starting_time, ending_time=ending_time,
            fail_on_data_loss=_bool(opts, "failondataloss", "failOnDataLoss", True),
            max_records_per_trigger=limit, subscription_name=sub,
            reader_kwargs=passthrough(opts, "pulsar.reader.", _reader_signature()),
            poll_timeout_ms=_int(opts, "pollTimeoutMs".lower(), "pollTimeoutMs", minimum=1)
            or 120_000,
        )


EXACTLY_ONCE = "exactly-once"
AT_LEAST_ONCE = "at-least-once"
GUARANTEES = (AT_LEAST_ONCE, EXACTLY_ONCE)
DEFAULT_TXN_TIMEOUT_MS = 3_600_000  # one hour: longer than any write task we expect


@dataclass(frozen=True)
class SinkOptions:
    client: ClientSettings
    topic: str | None = None
    producer_kwargs: dict[str, Any] = field(default_factory=dict)
    guarantee: str = AT_LEAST_ONCE
    txn_timeout_ms: int = DEFAULT_TXN_TIMEOUT_MS
    log_topic: str | None = None  # exactly-once: the commit log's topic (prefix)

    @property
    def exactly_once(self) -> bool:
        return self.guarantee == EXACTLY_ONCE

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = lower(options)
        client = parse_client(opts)
        for bad in ("topics", "topicspattern"):
            if opts.get(bad):
                raise PulsarOptionError(
                    f"'{bad}' is for reading; a write takes 'topic', or a '__topic' column "
                    "to route each row")
        topic = opts.get("topic") or None
        guarantee = opts.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower()
        if guarantee not in GUARANTEES:
            raise PulsarOptionError(
                f"unknown 'deliveryGuarantee' {opts['deliveryguarantee']!r}; accepted: "
                + ", ".join(repr(g) for g in GUARANTEES))
        timeout = _int(opts, "transactiontimeoutms", "transactionTimeoutMs", minimum=1000)
        log_topic = opts.get("transactionlogtopic") or None
        if guarantee != EXACTLY_ONCE:
            for key, label in (("transactiontimeoutms", "transactionTimeoutMs"),
                               ("transactionlogtopic", "transactionLogTopic")):
                if key in opts:
                    raise PulsarOptionError(f"'{label}' applies to "
                                            "deliveryGuarantee=exactly-once only")
        return cls(client=client, topic=topic,
                   producer_kwargs=passthrough(opts, "pulsar.producer.", _producer_signature()),
                   guarantee=guarantee,
                   txn_timeout_ms=timeout if timeout is not None else DEFAULT_TXN_TIMEOUT_MS,
                   log_topic=log_topic)


def parse_subject(opts: dict[str, str]) -> tuple[tuple[str, ...], str | None]:
    """(topics, pattern) from exactly one of ``topic``, ``topics``, ``topicsPattern``."""
    given = [k for k in TOPIC_KEYS if opts.get(k)]
    if len(given) != 1:
        what = "none" if not given else " and ".join(given)
        raise PulsarOptionError(
            "set exactly one of the options 'topic', 'topics' (comma-separated) or "
            f"'topicsPattern' (a regex); got {what}")
    topics: tuple[str, ...] = ()
    pattern = None
    if given[0] == "topicspattern":
        pattern = opts["topicspattern"]
        try:
            import re

            re.compile(pattern)
        except re.error as exc:
            raise PulsarOptionError(f"'topicsPattern' is not a valid regex: {exc}") from None
    else:
        raw = opts[given[0]]
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if given[0] == "topic" and len(topics) != 1:
            raise PulsarOptionError(
                "'topic' takes one topic name; use 'topics' for a comma-separated list")
        if not topics:
            raise PulsarOptionError(f"'{given[0]}' names no topic")
    return topics, pattern


# --------------------------------------------------------------------------- helpers
def lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items() if v is not None}


def parse_client(opts: dict[str, str]) -> ClientSettings:
    url = opts.get("service.url") or opts.get("serviceurl")
    if not url:
        raise PulsarOptionError("set option 'service.url', e.g. pulsar://localhost:6650 "
                                "(no admin URL is needed)")
    if not url.startswith(("pulsar://", "pulsar+ssl://")):
        raise PulsarOptionError(f"'service.url' must start with pulsar:// or pulsar+ssl://, "
                                f"got {url!r}")
    auth = None
    plugin = opts.get("pulsar.client.authpluginclassname")
    params = opts.get("pulsar.client.authparams", "")
    if plugin:
        low = plugin.lower()
        kind = "token" if "token" in low else "basic" if "basic" in low else None
        if kind is None:
            raise PulsarOptionError(f"unsupported 'pulsar.client.authPluginClassName' "
                                    f"{plugin!r}: use a token or basic authentication plugin")
        auth = (kind, params)
    skip = {"authpluginclassname", "authparams"}
    kwargs = passthrough(opts, "pulsar.client.", _client_signature(), skip)
    return ClientSettings(service_url=url, client_kwargs=kwargs, auth=auth)


def _norm(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def passthrough(opts: dict[str, str], prefix: str, signature: dict[str, Any],
                skip: set[str] | frozenset[str] = frozenset()) -> dict[str, Any]:
    """Options under ``prefix`` as keyword arguments of a client call (typed, checked)."""
    by_norm = {_norm(name): (name, default) for name, default in signature.items()}
    out: dict[str, Any] = {}
    for key, value in opts.items():
        if not key.startswith(prefix):
            continue
        short = key[len(prefix):]
        if short in skip:
            continue
        hit = by_norm.get(_norm(short))
        if hit is None:
            known = ", ".join(sorted(signature))
            raise PulsarOptionError(f"unknown option '{key}'; known after '{prefix}': {known}")
        name, default = hit
        out[name] = _convert(key, value, default)
    return out


def _convert(key: str, value: str, default: Any) -> Any:
    try:
        if isinstance(default, bool):
            return _parse_bool(key, value)
        if isinstance(default, int) and not isinstance(default, bool):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise PulsarOptionError(f"option '{key}' expects a number, got {value!r}") from None
    if value.startswith(("{", "[")):
        try:
            return json.loads(value)
        except ValueError:
            pass
    return value


def _signature(fn: Callable[..., Any], drop: set[str]) -> dict[str, Any]:
    out = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name in drop or p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL):
            continue
        out[name] = p.default
    return out


def _client_signature() -> dict[str, Any]:
    from magnetar.client.client import Client

    return _signature(Client.__init__, {"self", "service_url", "authentication",
                                        "ssl_context"})


def _reader_signature() -> dict[str, Any]:
    from magnetar.client.client import Client

    return _signature(Client.create_reader, {"self", "topic", "start_message_id", "schema",
                                             "reader_listener", "start_message_id_inclusive"})


def _producer_signature() -> dict[str, Any]:
    from magnetar.client.client import Client

    return _signature(Client.create_producer, {"self", "topic", "producer_name", "schema",
                                               "initial_sequence_id", "message_router"})


def _parse_bool(key: str, value: str) -> bool:
    low = value.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise PulsarOptionError(f"option '{key}' expects true or false, got {value!r}")


def _bool(opts: dict[str, str], key: str, label: str, default: bool) -> bool:
    return default if key not in opts else _parse_bool(label, opts[key])


def _int(opts: dict[str, str], key: str, label: str, minimum: int) -> int | None:
    if key not in opts:
        return None
    try:
        value = int(opts[key])
    except ValueError:
        raise PulsarOptionError(f"option '{label}' expects an integer, got {opts[key]!r}") \
            from None
    if value < minimum:
        raise PulsarOptionError(f"option '{label}' must be >= {minimum}, got {value}")
    return value
