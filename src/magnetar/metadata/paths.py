"""Metadata paths: ZooKeeper-style absolute paths (``/admin/policies/public``), checked,
split and joined in one place for every backend."""

from __future__ import annotations

from .errors import InvalidPathError


def check_path(path: str) -> str:
    """``path`` if it is a valid absolute path, else `InvalidPathError`."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidPathError(f"metadata path must start with '/': {path!r}")
    if path == "/":
        return path
    if path.endswith("/") or "//" in path or "\0" in path:
        raise InvalidPathError(f"malformed metadata path: {path!r}")
    if "/." in path:  # (a relative segment starts so; most paths have none to look for)
        for part in path.split("/")[1:]:
            if part in (".", ".."):
                raise InvalidPathError(f"relative segment in metadata path: {path!r}")
    return path


def parent(path: str) -> str | None:
    """The parent of ``path`` (None for ``/``)."""
    if path == "/":
        return None
    head = path.rsplit("/", 1)[0]
    return head or "/"


def ancestors(path: str) -> list[str]:
    """Every proper ancestor of ``path`` except ``/``, outermost first."""
    parts = path.split("/")[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def join(*parts: str) -> str:
    """``join("/a", "b", "c") == "/a/b/c"``; parts may not contain empty segments."""
    out = "/".join(p.strip("/") for p in parts if p.strip("/"))
    return check_path("/" + out)


def child_name(parent_path: str, path: str) -> str:
    """The last segment of ``path``, a direct child of ``parent_path``."""
    return path[len(parent_path):].lstrip("/") if parent_path != "/" else path[1:]
