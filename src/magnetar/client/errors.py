"""Exceptions raised by the client, named after the official client's ``Result`` values."""

from __future__ import annotations

from magnetar.protocol import pb


class PulsarException(Exception):
    """Base class of every client error."""


class Timeout(PulsarException):
    """An operation did not complete within its time limit."""


class ConnectError(PulsarException):
    """The broker could not be reached or the handshake failed."""


class WrongServiceUrl(ConnectError):
    """The service URL reaches something that is not a broker's binary port (an HTTP
    server, say): trying again will not help."""


class UnknownHost(WrongServiceUrl):
    """The service URL's host name does not resolve."""


class TlsError(ConnectError):
    """The TLS handshake failed (certificate not trusted, wrong host name...)."""


class AuthenticationError(PulsarException):
    """The broker refused our credentials."""


class AlreadyClosed(PulsarException):
    """The client, producer or consumer is closed."""


class ProducerQueueIsFull(PulsarException):
    """The pending-message queue is full and ``block_if_queue_full`` is off."""


class MessageTooBig(PulsarException):
    """The message exceeds the broker's maximum size and chunking is off."""


class LookupError(PulsarException):
    """Topic lookup failed."""


class NotConnected(PulsarException):
    """The connection went away while an operation was in flight."""


class ServerError(PulsarException):
    """The broker answered with an ``Error`` command (or an error inside a response)."""

    def __init__(self, code: int, message: str) -> None:
        try:
            name = pb.ServerError.Name(code)
        except ValueError:
            name = f"ServerError({code})"
        super().__init__(f"{name}: {message}")
        self.code = code
        self.name = name


class TopicNotFound(ServerError):
    pass


class ConsumerBusy(ServerError):
    pass


class ProducerBusy(ServerError):
    pass


class ProducerFenced(ServerError):
    """An exclusive producer lost the topic to a newer one (its sends fail from then on)."""


class IncompatibleSchema(ServerError):
    pass


class TopicTerminated(ServerError):
    pass


class TransactionCoordinatorNotFound(ServerError):
    """The coordinator of a transaction is not served by the broker asked (or does not
    exist); the client looks it up again."""


class InvalidTxnStatus(ServerError):
    """The transaction is not in a state that allows the operation (committed, aborted,
    timed out...)."""


class TransactionConflict(ServerError):
    """An acknowledgement conflicts with another transaction's (or a plain one)."""


class TransactionNotFound(ServerError):
    """The coordinator does not know the transaction (never made, or ended long ago)."""


class NotAllowed(ServerError):
    """The broker does not allow the operation (``NotAllowedError``: e.g. transactions
    disabled, a transactional send from a producer without ``txn_enabled``)."""


class TransactionHasOperationFailed(PulsarException):
    """A commit found that one of the transaction's sends or acks failed: the transaction
    was aborted instead."""


_BY_CODE: dict[int, type[ServerError]] = {
    pb.TopicNotFound: TopicNotFound,
    pb.ConsumerBusy: ConsumerBusy,
    pb.ProducerBusy: ProducerBusy,
    pb.ProducerFenced: ProducerFenced,
    pb.IncompatibleSchema: IncompatibleSchema,
    pb.TopicTerminatedError: TopicTerminated,
    pb.TransactionCoordinatorNotFound: TransactionCoordinatorNotFound,
    pb.InvalidTxnStatus: InvalidTxnStatus,
    pb.TransactionConflict: TransactionConflict,
    pb.TransactionNotFound: TransactionNotFound,
    pb.NotAllowedError: NotAllowed,
}

#: Errors after which retrying (reconnecting) makes sense.
RETRIABLE_CODES = frozenset({pb.ServiceNotReady, pb.MetadataError, pb.PersistenceError,
                             pb.TooManyRequests, pb.UnknownError})


def server_error(code: int, message: str) -> ServerError:
    """Build the most specific ``ServerError`` subclass for a wire error code."""
    return _BY_CODE.get(code, ServerError)(code, message)
