"""Key hashes that must agree bit for bit with the official Pulsar clients.

* ``murmur3_32``: Pulsar's ``Murmur3_32Hash`` (MurmurHash3 x86 32-bit, seed 0), masked to
  31 bits. Used for Key_Shared sticky ranges and by clients with ``Murmur3_32Hash``
  routing.
* ``java_string_hash``: ``JavaStringHash``, i.e. Java's ``String.hashCode`` masked to
  31 bits (Java client default for partition routing).
* ``boost_hash``: the C++ (and so Python) client's default ``BoostHash``:
  ``boost::hash<std::string>`` of the UTF-8 key, low 31 bits. Modern Boost hashes byte
  strings with a 64-bit multiply-xor ("mulx") scheme, reproduced here.
"""

from __future__ import annotations

import struct

__all__ = [
    "STICKY_KEY_HASH_RANGE",
    "boost_hash",
    "java_string_hash",
    "murmur3_32",
    "sticky_key_hash",
]

#: Key_Shared hash space: sticky hashes fall in ``[0, 65536)``.
STICKY_KEY_HASH_RANGE = 65536

_M32 = 0xFFFFFFFF
_M64 = 0xFFFFFFFFFFFFFFFF
_INT_MAX = 0x7FFFFFFF


def _as_bytes(key: str | bytes | bytearray | memoryview) -> bytes:
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


# ------------------------------------------------------------------ murmur3


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _M32
    k1 = ((k1 << 15) | (k1 >> 17)) & _M32
    return (k1 * 0x1B873593) & _M32


def murmur3_32(data: str | bytes | bytearray | memoryview) -> int:
    """MurmurHash3 x86_32 with seed 0, as a non-negative 31-bit int (Pulsar's Murmur3_32Hash)."""
    data = _as_bytes(data)
    length = len(data)
    nblocks = length // 4
    h1 = 0
    for (k1,) in struct.iter_unpack("<I", data[: nblocks * 4]):
        h1 ^= _mix_k1(k1)
        h1 = ((h1 << 13) | (h1 >> 19)) & _M32
        h1 = (h1 * 5 + 0xE6546B64) & _M32
    # 0..3 trailing bytes, little-endian; mixing an all-zero tail is a no-op
    tail = int.from_bytes(data[nblocks * 4 :], "little")
    h1 ^= _mix_k1(tail)
    h1 ^= length & _M32
    # final avalanche
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _M32
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _M32
    h1 ^= h1 >> 16
    return h1 & _INT_MAX


def sticky_key_hash(key: str | bytes | bytearray | memoryview) -> int:
    """Key_Shared slot of a key: ``murmur3_32(key) % 65536``."""
    return murmur3_32(key) % STICKY_KEY_HASH_RANGE


# ------------------------------------------------------------------ Java String.hashCode


def java_string_hash(s: str | bytes) -> int:
    """``JavaStringHash``: 31-bit ``String.hashCode``.

    For ``str`` this is Java's definition, over UTF-16 code units (what the Java client
    computes). For ``bytes`` it is the C++ client's variant, which runs the same recurrence
    over the key's bytes taken as signed chars; both agree on ASCII keys.
    """
    h = 0
    if isinstance(s, str):
        units = struct.unpack(f"<{len(s.encode('utf-16-le')) // 2}H", s.encode("utf-16-le"))
        for unit in units:
            h = (31 * h + unit) & _M32
    else:
        for byte in bytes(s):
            h = (31 * h + (byte - 256 if byte >= 128 else byte)) & _M32
    return h & _INT_MAX


# ------------------------------------------------------------------ boost::hash<std::string>

_Q = 0x9E3779B97F4A7C15  # golden-ratio increment
_K = 0xDF442D22CE4859B9  # multiplier (inverse of _Q mod 2**64)


def _mulx(x: int, y: int) -> int:
    """Fold the 128-bit product of two 64-bit words: low half xor high half."""
    r = (x & _M64) * y
    return (r ^ (r >> 64)) & _M64


def _boost_hash_bytes(data: bytes, seed: int = 0) -> int:
    n = len(data)
    w = _mulx(seed + _Q, _K)
    h = w ^ n
    pos = 0
    while n >= 8:
        (word,) = struct.unpack_from("<Q", data, pos)
        w = (w + _Q) & _M64
        h ^= _mulx(word + w, _K)
        pos += 8
        n -= 8
    word = 0
    if n >= 4:
        # 4..7 bytes: two overlapping 32-bit reads
        (lo,) = struct.unpack_from("<I", data, pos)
        (hi,) = struct.unpack_from("<I", data, pos + n - 4)
        word = (hi << ((n - 4) * 8)) | lo
    elif n >= 1:
        # 1..3 bytes: first, middle and last byte
        x1 = (n - 1) & 2
        x2 = n >> 1
        word = (data[pos + x1] << (x1 * 8)) | (data[pos + x2] << (x2 * 8)) | data[pos]
    w = (w + _Q) & _M64
    h ^= _mulx(word + w, _K)
    return _mulx(h + w, _K)


def boost_hash(s: str | bytes) -> int:
    """The official C++/Python client's ``BoostHash`` of a key (UTF-8 for ``str``), 31 bits."""
    return _boost_hash_bytes(_as_bytes(s)) & _INT_MAX
