"""Configuration: ``BrokerConfig`` read from ``broker.conf`` with Pulsar's key names, the
security settings it inherits, and the advertised-listener settings.

``magnetar.broker.config`` keeps its public names (``BrokerConfig``, ``ConfigError``)."""

from magnetar.broker.config.broker_config import BrokerConfig, ConfigError

__all__ = ["BrokerConfig", "ConfigError"]
