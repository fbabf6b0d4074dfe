"""Argument types for the CLI: what argparse's ``int`` and ``float`` accept that no command can
use (``99999999999999999999``, ``nan``, ``inf``) is refused as a usage error naming the
value, as pulsar-admin's Java ``int`` and ``double`` options refuse it; so is text that is
not UTF-8 (argv bytes Python keeps as lone surrogates), which no message or name can carry."""

from __future__ import annotations

import argparse
import math

__all__ = ["finite", "int32", "utf8"]

_INT_MIN, _INT_MAX = -(2**31), 2**31 - 1


def int32(text: str) -> int:
    """An integer that fits a Java ``int``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not _INT_MIN <= value <= _INT_MAX:
        raise argparse.ArgumentTypeError(f"{text} is out of range (at most {_INT_MAX})")
    return value


def finite(text: str) -> float:
    """A finite number (no ``nan`` or ``inf``), at most a Java ``int``'s worth."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value) or abs(value) > _INT_MAX:
        raise argparse.ArgumentTypeError(f"{text} is not a usable number")
    return value


def utf8(text: str) -> str:
    """Text that can go on the wire (UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"not valid UTF-8 text: {text!r}") from None
    return text


def boolean(text: str) -> bool:
    """``true`` or ``false`` (any case), as pulsar-admin's Boolean options take them."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, not {text!r}")
    return value == "true"
