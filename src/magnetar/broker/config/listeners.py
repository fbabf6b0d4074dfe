"""Advertised listeners (Pulsar's ``advertisedListeners`` / ``internalListenerName``):
the addresses a lookup may hand out, chosen by the listener name a client asks for.

``advertisedListeners=internal:pulsar://10.0.0.5:6650,external:pulsar://broker.example.com:6650``
names one ``pulsar://`` (and optionally one ``pulsar+ssl://``) URL per listener. A lookup
without a listener name gets the internal listener's URL (``internalListenerName``, by
default the first listener); a lookup naming a listener the broker does not have is
refused with ServiceNotReady, as in Pulsar. Without ``advertisedListeners`` the broker has
one implicit listener, ``internalListenerName`` (default ``internal``), at the address the
connection used (or ``advertisedAddress``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from magnetar.broker.errors import BrokerError
from magnetar.protocol import pb

DEFAULT_INTERNAL = "internal"


class ListenerConfigError(ValueError):
    """advertisedListeners / internalListenerName that cannot be used."""


@dataclass(frozen=True)
class Listener:
    name: str
    url: str | None = None
    tls_url: str | None = None


def parse_listeners(text: str) -> dict[str, Listener]:
    """``name:url,name:url`` into listeners by name (ListenerConfigError when malformed)."""
    found: dict[str, dict[str, str]] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, url = item.partition(":")
        if not sep or not name or "://" not in url:
            raise ListenerConfigError(f"advertisedListeners: expected name:pulsar://host:port, got {item!r}")
        scheme = url.split("://", 1)[0]
        if scheme not in ("pulsar", "pulsar+ssl"):
            raise ListenerConfigError(f"advertisedListeners: {name} has an unknown scheme {scheme!r}")
        urls = found.setdefault(name.strip(), {})
        if scheme in urls:
            raise ListenerConfigError(f"advertisedListeners: {name} has two {scheme} URLs")
        urls[scheme] = url
    return {name: Listener(name, urls.get("pulsar"), urls.get("pulsar+ssl")) for name, urls in found.items()}


@dataclass
class Listeners:
    """Picks the URL a lookup answers with."""

    advertised: str = ""
    internal_name: str = ""
    by_name: dict[str, Listener] = field(init=False)

    def __post_init__(self) -> None:
        self.by_name = parse_listeners(self.advertised)
        if not self.internal_name:
            self.internal_name = next(iter(self.by_name), DEFAULT_INTERNAL)
        elif self.by_name and self.internal_name not in self.by_name:
            raise ListenerConfigError(
                f"internalListenerName {self.internal_name!r} is not one of advertisedListeners")

    def broker_url(self, listener_name: str | None, default: str) -> str:
        """The ``pulsar://`` URL for a lookup asking for ``listener_name`` (None: none asked);
        ``default`` is the address the client reached. BrokerError for an unknown listener."""
        if not self.by_name:
            if listener_name and listener_name != self.internal_name:
                raise BrokerError(pb.ServiceNotReady, f"the broker do not have {listener_name} listener")
            return default
        listener = self.by_name.get(listener_name or self.internal_name)
        if listener is None:
            raise BrokerError(pb.ServiceNotReady, f"the broker do not have {listener_name} listener")
        return listener.url or default
