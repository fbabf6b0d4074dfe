"""ServerCnx: one client TCP connection, from bytes to broker calls and back.

Theory of operation: the transport reads into the sans-IO ``FrameDecoder``'s own buffer
(``get_buffer`` / ``buffer_updated``: a large frame lands in a buffer of its size, and a
producer's batch goes on to storage as a view of it, not copied); each decoded frame goes
to the handler named after its command type. A plain SEND comes as a ``SendFrame`` read
without protobuf and goes to ``run_send`` directly. Handlers never touch the socket:
they queue encoded frames with ``send``; everything queued during one event-loop turn goes
out in a single ``transport.write`` (``_flush`` runs once per turn). The handshake state
lives only here (``self.connected``): any command before Connect closes the connection.

Backpressure, as in Pulsar: once ``maxPendingPublishRequestsPerConnection`` sends wait for
their receipts, the connection stops reading until half of them are answered (0: no limit).
Across the broker, once the payload bytes of the sends not yet answered reach
``maxMessagePublishBufferSizeInMB`` (``PublishBuffer``), every connection with producers
stops reading until they drop below half of that (0 or less: no limit). A connection reads
again only when neither reason holds. The cost per send is one addition on the way in and
one subtraction on the way out, each followed by an integer comparison.

Parts: `ServerCnx` is one class made of its command families (mixins over `CnxBase`, so a
SEND is handled by the same object with the same lookups as before): ``base.py`` (transport,
frames, output, backpressure), ``connect.py`` (connect/auth, keep-alive), ``lookup.py``
(lookup, partitioned metadata, namespace topics, schemas), ``producers.py`` (producers, the
publish path), ``consumers.py`` (subscribe, flow, acks, seek, stats). Everything they log
goes to the one logger ``magnetar.broker.connection.server_cnx``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from magnetar.broker.connection.connect import ConnectCommands
from magnetar.broker.connection.consumers import ConsumerCommands
from magnetar.broker.connection.lookup import LookupCommands
from magnetar.broker.connection.producers import ProducerCommands
from magnetar.broker.connection.transactions import TransactionCommands
from magnetar.broker.connection.txn_participants import TxnParticipantCommands
from magnetar.protocol import pb
from magnetar.protocol.errors import ChecksumMismatch

if TYPE_CHECKING:
    from magnetar.broker.service import BrokerService

T = pb.BaseCommand


class ServerCnx(ConnectCommands, LookupCommands, ProducerCommands, ConsumerCommands,
                TransactionCommands, TxnParticipantCommands):
    """Serves one client connection; owns its producers and consumers by client-given id."""

    def __init__(self, service: BrokerService) -> None:
        super().__init__(service)
        self.handlers.update({
            T.CONNECT: self.handle_connect,
            T.PING: self.handle_ping,
            T.PONG: self.handle_pong,
            T.LOOKUP: self.handle_lookup,
            T.PARTITIONED_METADATA: self.handle_partitioned_metadata,
            T.PRODUCER: self.handle_producer,
            T.SEND: self.handle_send,
            T.CLOSE_PRODUCER: self.handle_close_producer,
            T.SUBSCRIBE: self.handle_subscribe,
            T.FLOW: self.handle_flow,
            T.ACK: self.handle_ack,
            T.REDELIVER_UNACKNOWLEDGED_MESSAGES: self.handle_redeliver,
            T.CLOSE_CONSUMER: self.handle_close_consumer,
            T.UNSUBSCRIBE: self.handle_unsubscribe,
            T.SEEK: self.handle_seek,
            T.GET_LAST_MESSAGE_ID: self.handle_get_last_message_id,
            T.CONSUMER_STATS: self.handle_consumer_stats,
            T.GET_TOPICS_OF_NAMESPACE: self.handle_get_topics_of_namespace,
            T.GET_SCHEMA: self.handle_get_schema,
            T.GET_OR_CREATE_SCHEMA: self.handle_get_or_create_schema,
            T.AUTH_RESPONSE: self.handle_auth_response,
            T.END_TXN_ON_PARTITION: self.handle_end_txn_on_partition,
            T.END_TXN_ON_SUBSCRIPTION: self.handle_end_txn_on_subscription,
        })
        self.handlers.update({  # transaction coordinator commands (transactions.py)
            T.TC_CLIENT_CONNECT_REQUEST: self.handle_tc_client_connect,
            T.NEW_TXN: self.handle_new_txn,
            T.ADD_PARTITION_TO_TXN: self.handle_add_partition_to_txn,
            T.ADD_SUBSCRIPTION_TO_TXN: self.handle_add_subscription_to_txn,
            T.END_TXN: self.handle_end_txn,
        })


__all__ = ["ChecksumMismatch", "ServerCnx"]
