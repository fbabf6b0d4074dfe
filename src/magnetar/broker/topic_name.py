"""The broker's name for ``magnetar.protocol.naming``: topic, namespace and tenant names are
checked in that one module (client and broker alike); this re-exports it for broker code."""

from __future__ import annotations

from magnetar.protocol import naming
from magnetar.protocol.naming import *  # noqa: F403 - the whole of naming, as it is

__all__ = naming.__all__
