"""BrokerError: a failure to report to the client as a Pulsar ServerError code."""

from __future__ import annotations

from magnetar.protocol import pb


class BrokerError(Exception):
    """Raised by broker logic; the connection turns it into Error/SendError with ``code``."""

    def __init__(self, code: pb.ServerError, message: str) -> None:
        super().__init__(message)
        self.code = code
