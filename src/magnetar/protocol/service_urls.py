"""Multi-host service URLs as Pulsar writes them: ``http://s1:8080,s2:8080,s3:8080`` (or each
host with its own scheme, ``http://s1:8080,http://s2:8080``) split into one URL per host,
for whoever tries a cluster's brokers in turn (the CLI's admin calls, a replicator's calls
to a remote cluster's admin API). Pure."""

from __future__ import annotations

__all__ = ["split_service_url"]


def split_service_url(url: str) -> list[str]:
    """One ``scheme://host:port[/path]`` per host of ``url`` (a path after the last host is
    kept on each); ``[url]`` when it names one host; ``[]`` for an empty one."""
    url = url.strip()
    scheme, sep, rest = url.partition("://")
    if not sep or "," not in rest:
        return [url] if url else []
    hosts = [h.strip() for h in rest.split(",") if h.strip()]
    last = hosts[-1]
    path = ""
    if "/" in last.split("://")[-1]:
        host_part = last.split("://")[-1]
        cut = host_part.index("/")
        path = host_part[cut:].rstrip("/")
        hosts[-1] = last[:len(last) - len(host_part)] + host_part[:cut]
    return [(h if "://" in h else f"{scheme}://{h}") + path for h in hosts]
