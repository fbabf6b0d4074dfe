"""Durations written the way Pulsar's tools write them: the one parser for every place
Magnetar reads one (``magnetar tokens --expiry-time``, the admin CLI's ``--time``,
``--messageTTL``, ``--limitTime``, ``--expireTime``...).

``90`` (seconds), ``30s``, ``10m``, ``2h``, ``1d``, ``1w``, ``1y`` (365 days); units in
either case, blanks around the parts allowed. A negative number (``-1``: Pulsar's
"unlimited" for retention) is read only where the caller allows it.
"""

from __future__ import annotations

import re

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}
_DURATION = re.compile(r"\s*(-?\d+)\s*([smhdwy]?)\s*", re.IGNORECASE)


def parse_duration(text: str, allow_negative: bool = False) -> int:
    """The duration ``text`` in seconds (see the module docstring); ``ValueError`` with
    examples for anything else."""
    match = _DURATION.fullmatch(text)
    if not match or (match.group(1).startswith("-") and not allow_negative):
        raise ValueError(f"invalid duration {text!r} (examples: 90, 30s, 10m, 2h, 7d, 1w, 1y"
                         f"{', -1' if allow_negative else ''})")
    return int(match.group(1)) * UNITS[(match.group(2) or "s").lower()]
