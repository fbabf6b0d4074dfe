"""The admin layer: Pulsar's REST admin API, HTTP lookup and Prometheus metrics (aiohttp),
above the broker layer (it imports ``magnetar.broker``; the broker never imports it)."""

from magnetar.admin.server import AdminServer, build_app

__all__ = ["AdminServer", "build_app"]
