"""Service URLs that name several brokers (``pulsar://h1:6650,h2:6650``, the same with
``pulsar+ssl://``, ``http://`` or ``https://``): each host becomes its own address, and a
``ServiceNameResolver`` hands them out in turn, as the official clients do, so discovery
requests spread over the hosts and a host that is down is passed over."""

from __future__ import annotations

from urllib.parse import urlsplit

_DEFAULT_PORTS = {"pulsar": 6650, "pulsar+ssl": 6651, "pulsars": 6651,
                  "http": 80, "https": 443}


def service_hosts(url: str) -> list[str]:
    """``scheme://h1:p1,h2:p2/...`` -> ``["scheme://h1:p1", "scheme://h2:p2"]`` (a missing
    port is the scheme's default; a URL without scheme is ``pulsar://``)."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep:
        scheme, rest = "pulsar", url.strip()
    scheme = scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        raise ValueError(f"unsupported service URL {url!r} (use pulsar://, pulsar+ssl://, "
                         "http:// or https://)")
    authority = rest.split("/", 1)[0]
    hosts = [h.strip() for h in authority.split(",") if h.strip()]
    if not hosts:
        raise ValueError(f"service URL {url!r} names no host")
    out = []
    for host in hosts:
        parts = urlsplit(f"{scheme}://{host}")
        try:
            port = parts.port or _DEFAULT_PORTS[scheme]
        except ValueError:
            raise ValueError(f"service URL {url!r}: bad port in {host!r}") from None
        name = parts.hostname or "localhost"
        if ":" in name:  # an IPv6 literal keeps its brackets
            name = f"[{name}]"
        out.append(f"{scheme}://{name}:{port}")
    return out


class ServiceNameResolver:
    """Round robin over a service URL's hosts: each ``next()`` is the following host."""

    def __init__(self, addresses: list[str]) -> None:
        if not addresses:
            raise ValueError("a service URL needs at least one host")
        self.addresses = list(addresses)
        self._index = 0

    def __len__(self) -> int:
        return len(self.addresses)

    def next(self) -> str:
        address = self.addresses[self._index % len(self.addresses)]
        self._index += 1
        return address
