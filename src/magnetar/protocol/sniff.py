"""Recognising HTTP where the Pulsar binary protocol was expected, from the first four
bytes of a connection (what a frame decoder reads as the frame's size).

A browser, ``curl`` or an ``http://`` service URL pointed at the binary port sends
``GET /...``; a ``pulsar://`` client pointed at the web service port gets ``HTTP/1.1 400``
back. Read as a big-endian frame size, either is about 1.2 GB: "frame too large" says
nothing useful, so both ends check these bytes first and say which port is which.
"""

from __future__ import annotations

__all__ = ["HTTP_ON_BINARY_PORT_REPLY", "is_http_request", "is_http_response"]

_METHODS = (b"GET ", b"POST", b"PUT ", b"HEAD", b"DELE", b"OPTI", b"PATC", b"CONN", b"TRAC")

#: What the broker answers an HTTP request on its binary port, before it closes.
_MESSAGE = (b"This is the Pulsar binary protocol port: use pulsar://host:port here, "
            b"and the web service port for http:// URLs.\n")
HTTP_ON_BINARY_PORT_REPLY = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    + b"Content-Length: %d\r\n\r\n" % len(_MESSAGE) + _MESSAGE
)


def _head(first: int | bytes) -> bytes:
    return first.to_bytes(4, "big") if isinstance(first, int) else bytes(first[:4])


def is_http_request(first: int | bytes) -> bool:
    """Whether a connection's first four bytes (or the frame size they make) start an
    HTTP request."""
    return _head(first) in _METHODS


def is_http_response(first: int | bytes) -> bool:
    """Whether a connection's first four bytes (or the frame size they make) start an
    HTTP response."""
    return _head(first) == b"HTTP"
