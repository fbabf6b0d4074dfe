"""Checking a password against a stored hash, in the formats htpasswd and Pulsar use.

- ``$apr1$salt$hash`` (``htpasswd -m``, what Pulsar's documentation suggests) and
  ``$1$salt$hash`` (``openssl passwd -1``): MD5-crypt, computed here;
- ``$2a$``/``$2b$``/``$2y$`` (``htpasswd -B``): bcrypt, with the ``bcrypt`` package;
- 13-character DES crypt (``htpasswd -d``, Pulsar's other accepted format), and SHA-crypt
  ``$5$``/``$6$``: through the C library's crypt(3) where Python still exposes it (the
  ``crypt`` module, up to Python 3.12); elsewhere such hashes are refused with a message.

Comparisons are constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import warnings

_ITOA64 = "./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
#: which digest bytes make up each four-character group of the MD5-crypt output
_MD5_GROUPS = ((0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5))


class UnsupportedHash(ValueError):
    """A stored hash in a format this broker cannot check."""


def _b64_int(value: int, chars: int) -> str:
    out = []
    for _ in range(chars):
        out.append(_ITOA64[value & 0x3F])
        value >>= 6
    return "".join(out)


def md5_crypt(password: bytes, salt: str, magic: str = "$1$") -> str:
    """The MD5-crypt hash of ``password`` (magic ``$1$``, or ``$apr1$`` as Apache's)."""
    salt_b = salt.encode()[:8]
    magic_b = magic.encode()
    alternate = hashlib.md5(password + salt_b + password).digest()
    buf = bytearray(password + magic_b + salt_b)
    remaining = len(password)
    while remaining > 0:
        buf += alternate[: min(16, remaining)]
        remaining -= 16
    bits = len(password)
    while bits:
        buf += b"\x00" if bits & 1 else password[:1]
        bits >>= 1
    digest = hashlib.md5(buf).digest()
    for i in range(1000):
        step = bytearray()
        step += password if i & 1 else digest
        if i % 3:
            step += salt_b
        if i % 7:
            step += password
        step += digest if i & 1 else password
        digest = hashlib.md5(step).digest()
    encoded = "".join(
        _b64_int((digest[a] << 16) | (digest[b] << 8) | digest[c], 4) for a, b, c in _MD5_GROUPS
    )
    encoded += _b64_int(digest[11], 2)
    return f"{magic}{salt_b.decode()}${encoded}"


def _libc_crypt(password: str, stored: str) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import crypt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise UnsupportedHash(
            "DES and SHA crypt hashes need Python's crypt module (Python <= 3.12); "
            "use htpasswd -m ($apr1$) or -B (bcrypt) hashes instead"
        ) from None
    result = crypt.crypt(password, stored)
    if not result:
        raise UnsupportedHash("the C library cannot check this crypt hash")
    return str(result)


def is_slow(stored: str) -> bool:
    """Whether checking against ``stored`` costs enough to be run off the event loop."""
    return stored.startswith(("$2", "$5$", "$6$"))


def check_password(password: str, stored: str) -> bool:
    """Whether ``password`` matches the stored hash."""
    pw = password.encode("utf-8")
    if stored.startswith(("$apr1$", "$1$")):
        magic = "$apr1$" if stored.startswith("$apr1$") else "$1$"
        salt = stored[len(magic):].split("$", 1)[0]
        computed = md5_crypt(pw, salt, magic)
    elif stored.startswith(("$2a$", "$2b$", "$2y$")):
        import bcrypt

        try:
            return bool(bcrypt.checkpw(pw, stored.encode()))
        except ValueError:
            return False
    elif stored.startswith(("$5$", "$6$")) or (len(stored) == 13 and not stored.startswith("$")):
        computed = _libc_crypt(password, stored)
    else:
        raise UnsupportedHash("unknown password hash format")
    return hmac.compare_digest(computed.encode(), stored.encode())
