"""Pin the wire numbers of pulsar.proto against values taken from Apache Pulsar's schema.

If one of these fails, someone renumbered or retyped a field: the official clients would
no longer understand us. Fix the schema, not the test.
"""

from __future__ import annotations

import pytest
from google.protobuf.descriptor import FieldDescriptor

from magnetar.protocol import pb

BASE_COMMAND_TYPES = {
    "CONNECT": 2, "CONNECTED": 3, "SUBSCRIBE": 4, "PRODUCER": 5, "SEND": 6,
    "SEND_RECEIPT": 7, "SEND_ERROR": 8, "MESSAGE": 9, "ACK": 10, "FLOW": 11,
    "UNSUBSCRIBE": 12, "SUCCESS": 13, "ERROR": 14, "CLOSE_PRODUCER": 15,
    "CLOSE_CONSUMER": 16, "PRODUCER_SUCCESS": 17, "PING": 18, "PONG": 19,
    "REDELIVER_UNACKNOWLEDGED_MESSAGES": 20, "PARTITIONED_METADATA": 21,
    "PARTITIONED_METADATA_RESPONSE": 22, "LOOKUP": 23, "LOOKUP_RESPONSE": 24,
    "CONSUMER_STATS": 25, "CONSUMER_STATS_RESPONSE": 26, "REACHED_END_OF_TOPIC": 27,
    "SEEK": 28, "GET_LAST_MESSAGE_ID": 29, "GET_LAST_MESSAGE_ID_RESPONSE": 30,
    "ACTIVE_CONSUMER_CHANGE": 31, "GET_TOPICS_OF_NAMESPACE": 32,
    "GET_TOPICS_OF_NAMESPACE_RESPONSE": 33, "GET_SCHEMA": 34, "GET_SCHEMA_RESPONSE": 35,
    "AUTH_CHALLENGE": 36, "AUTH_RESPONSE": 37, "ACK_RESPONSE": 38,
    "GET_OR_CREATE_SCHEMA": 39, "GET_OR_CREATE_SCHEMA_RESPONSE": 40, "NEW_TXN": 50,
    "NEW_TXN_RESPONSE": 51, "ADD_PARTITION_TO_TXN": 52, "ADD_PARTITION_TO_TXN_RESPONSE": 53,
    "ADD_SUBSCRIPTION_TO_TXN": 54, "ADD_SUBSCRIPTION_TO_TXN_RESPONSE": 55, "END_TXN": 56,
    "END_TXN_RESPONSE": 57, "END_TXN_ON_PARTITION": 58, "END_TXN_ON_PARTITION_RESPONSE": 59,
    "END_TXN_ON_SUBSCRIPTION": 60, "END_TXN_ON_SUBSCRIPTION_RESPONSE": 61,
    "TC_CLIENT_CONNECT_REQUEST": 62, "TC_CLIENT_CONNECT_RESPONSE": 63,
    "WATCH_TOPIC_LIST": 64, "WATCH_TOPIC_LIST_SUCCESS": 65, "WATCH_TOPIC_UPDATE": 66,
    "WATCH_TOPIC_LIST_CLOSE": 67, "TOPIC_MIGRATED": 68,
}

# BaseCommand sub-message field name -> (number, message type)
BASE_COMMAND_FIELDS = {
    "connect": (2, "CommandConnect"), "connected": (3, "CommandConnected"),
    "subscribe": (4, "CommandSubscribe"), "producer": (5, "CommandProducer"),
    "send": (6, "CommandSend"), "send_receipt": (7, "CommandSendReceipt"),
    "send_error": (8, "CommandSendError"), "message": (9, "CommandMessage"),
    "ack": (10, "CommandAck"), "flow": (11, "CommandFlow"),
    "unsubscribe": (12, "CommandUnsubscribe"), "success": (13, "CommandSuccess"),
    "error": (14, "CommandError"), "close_producer": (15, "CommandCloseProducer"),
    "close_consumer": (16, "CommandCloseConsumer"),
    "producer_success": (17, "CommandProducerSuccess"), "ping": (18, "CommandPing"),
    "pong": (19, "CommandPong"),
    "redeliverUnacknowledgedMessages": (20, "CommandRedeliverUnacknowledgedMessages"),
    "partitionMetadata": (21, "CommandPartitionedTopicMetadata"),
    "partitionMetadataResponse": (22, "CommandPartitionedTopicMetadataResponse"),
    "lookupTopic": (23, "CommandLookupTopic"),
    "lookupTopicResponse": (24, "CommandLookupTopicResponse"),
    "consumerStats": (25, "CommandConsumerStats"),
    "consumerStatsResponse": (26, "CommandConsumerStatsResponse"),
    "reachedEndOfTopic": (27, "CommandReachedEndOfTopic"), "seek": (28, "CommandSeek"),
    "getLastMessageId": (29, "CommandGetLastMessageId"),
    "getLastMessageIdResponse": (30, "CommandGetLastMessageIdResponse"),
    "active_consumer_change": (31, "CommandActiveConsumerChange"),
    "getTopicsOfNamespace": (32, "CommandGetTopicsOfNamespace"),
    "getTopicsOfNamespaceResponse": (33, "CommandGetTopicsOfNamespaceResponse"),
    "getSchema": (34, "CommandGetSchema"), "getSchemaResponse": (35, "CommandGetSchemaResponse"),
    "authChallenge": (36, "CommandAuthChallenge"), "authResponse": (37, "CommandAuthResponse"),
    "ackResponse": (38, "CommandAckResponse"),
    "getOrCreateSchema": (39, "CommandGetOrCreateSchema"),
    "getOrCreateSchemaResponse": (40, "CommandGetOrCreateSchemaResponse"),
    "newTxn": (50, "CommandNewTxn"), "newTxnResponse": (51, "CommandNewTxnResponse"),
    "addPartitionToTxn": (52, "CommandAddPartitionToTxn"),
    "addPartitionToTxnResponse": (53, "CommandAddPartitionToTxnResponse"),
    "addSubscriptionToTxn": (54, "CommandAddSubscriptionToTxn"),
    "addSubscriptionToTxnResponse": (55, "CommandAddSubscriptionToTxnResponse"),
    "endTxn": (56, "CommandEndTxn"), "endTxnResponse": (57, "CommandEndTxnResponse"),
    "endTxnOnPartition": (58, "CommandEndTxnOnPartition"),
    "endTxnOnPartitionResponse": (59, "CommandEndTxnOnPartitionResponse"),
    "endTxnOnSubscription": (60, "CommandEndTxnOnSubscription"),
    "endTxnOnSubscriptionResponse": (61, "CommandEndTxnOnSubscriptionResponse"),
    "tcClientConnectRequest": (62, "CommandTcClientConnectRequest"),
    "tcClientConnectResponse": (63, "CommandTcClientConnectResponse"),
    "watchTopicList": (64, "CommandWatchTopicList"),
    "watchTopicListSuccess": (65, "CommandWatchTopicListSuccess"),
    "watchTopicUpdate": (66, "CommandWatchTopicUpdate"),
    "watchTopicListClose": (67, "CommandWatchTopicListClose"),
    "topicMigrated": (68, "CommandTopicMigrated"),
}

REQ = "required"
OPT = "optional"
REP = "repeated"
T = FieldDescriptor


def _label(f: FieldDescriptor) -> str:
    # protobuf 7 dropped FieldDescriptor.label in favour of is_required / is_repeated
    if hasattr(f, "is_repeated"):
        if f.is_repeated:
            return REP
        return REQ if f.is_required else OPT
    return {f.LABEL_REQUIRED: REQ, f.LABEL_OPTIONAL: OPT, f.LABEL_REPEATED: REP}[f.label]

# message -> {field: (number, label, type, default or None)}
FIELDS = {
    "MessageIdData": {
        "ledgerId": (1, REQ, T.TYPE_UINT64, None), "entryId": (2, REQ, T.TYPE_UINT64, None),
        "partition": (3, OPT, T.TYPE_INT32, -1), "batch_index": (4, OPT, T.TYPE_INT32, -1),
        "ack_set": (5, REP, T.TYPE_INT64, None), "batch_size": (6, OPT, T.TYPE_INT32, None),
        "first_chunk_message_id": (7, OPT, T.TYPE_MESSAGE, None),
    },
    "MessageMetadata": {
        "producer_name": (1, REQ, T.TYPE_STRING, None),
        "sequence_id": (2, REQ, T.TYPE_UINT64, None),
        "publish_time": (3, REQ, T.TYPE_UINT64, None),
        "properties": (4, REP, T.TYPE_MESSAGE, None),
        "partition_key": (6, OPT, T.TYPE_STRING, None),
        "compression": (8, OPT, T.TYPE_ENUM, 0),
        "uncompressed_size": (9, OPT, T.TYPE_UINT32, 0),
        "num_messages_in_batch": (11, OPT, T.TYPE_INT32, 1),
        "event_time": (12, OPT, T.TYPE_UINT64, 0),
        "schema_version": (16, OPT, T.TYPE_BYTES, None),
        "ordering_key": (18, OPT, T.TYPE_BYTES, None),
        "deliver_at_time": (19, OPT, T.TYPE_INT64, None),
        "marker_type": (20, OPT, T.TYPE_INT32, None),
        "txnid_least_bits": (22, OPT, T.TYPE_UINT64, None),
        "txnid_most_bits": (23, OPT, T.TYPE_UINT64, None),
        "highest_sequence_id": (24, OPT, T.TYPE_UINT64, 0),
        "null_value": (25, OPT, T.TYPE_BOOL, False),
        "uuid": (26, OPT, T.TYPE_STRING, None),
        "num_chunks_from_msg": (27, OPT, T.TYPE_INT32, None),
        "total_chunk_msg_size": (28, OPT, T.TYPE_INT32, None),
        "chunk_id": (29, OPT, T.TYPE_INT32, None),
        "null_partition_key": (30, OPT, T.TYPE_BOOL, False),
        "compacted_batch_indexes": (31, REP, T.TYPE_INT32, None),
        "schema_id": (32, OPT, T.TYPE_BYTES, None),
    },
    "SingleMessageMetadata": {
        "properties": (1, REP, T.TYPE_MESSAGE, None),
        "partition_key": (2, OPT, T.TYPE_STRING, None),
        "payload_size": (3, REQ, T.TYPE_INT32, None),
        "compacted_out": (4, OPT, T.TYPE_BOOL, False),
        "event_time": (5, OPT, T.TYPE_UINT64, 0),
        "partition_key_b64_encoded": (6, OPT, T.TYPE_BOOL, False),
        "ordering_key": (7, OPT, T.TYPE_BYTES, None),
        "sequence_id": (8, OPT, T.TYPE_UINT64, None),
        "null_value": (9, OPT, T.TYPE_BOOL, False),
        "null_partition_key": (10, OPT, T.TYPE_BOOL, False),
    },
    "BrokerEntryMetadata": {
        "broker_timestamp": (1, OPT, T.TYPE_UINT64, None), "index": (2, OPT, T.TYPE_UINT64, None),
    },
    "CommandConnect": {
        "client_version": (1, REQ, T.TYPE_STRING, None),
        "auth_method": (2, OPT, T.TYPE_ENUM, None),
        "auth_data": (3, OPT, T.TYPE_BYTES, None),
        "protocol_version": (4, OPT, T.TYPE_INT32, 0),
        "auth_method_name": (5, OPT, T.TYPE_STRING, None),
        "feature_flags": (10, OPT, T.TYPE_MESSAGE, None),
        "proxy_version": (11, OPT, T.TYPE_STRING, None),
    },
    "CommandConnected": {
        "server_version": (1, REQ, T.TYPE_STRING, None),
        "protocol_version": (2, OPT, T.TYPE_INT32, 0),
        "max_message_size": (3, OPT, T.TYPE_INT32, None),
        "feature_flags": (4, OPT, T.TYPE_MESSAGE, None),
    },
    "FeatureFlags": {
        "supports_auth_refresh": (1, OPT, T.TYPE_BOOL, False),
        "supports_broker_entry_metadata": (2, OPT, T.TYPE_BOOL, False),
        "supports_partial_producer": (3, OPT, T.TYPE_BOOL, False),
        "supports_topic_watchers": (4, OPT, T.TYPE_BOOL, False),
        "supports_get_partitioned_metadata_without_auto_creation": (5, OPT, T.TYPE_BOOL, False),
        "supports_repl_dedup_by_lid_and_eid": (6, OPT, T.TYPE_BOOL, False),
    },
    "CommandSubscribe": {
        "topic": (1, REQ, T.TYPE_STRING, None), "subscription": (2, REQ, T.TYPE_STRING, None),
        "subType": (3, REQ, T.TYPE_ENUM, None), "consumer_id": (4, REQ, T.TYPE_UINT64, None),
        "request_id": (5, REQ, T.TYPE_UINT64, None), "durable": (8, OPT, T.TYPE_BOOL, True),
        "start_message_id": (9, OPT, T.TYPE_MESSAGE, None),
        "initialPosition": (13, OPT, T.TYPE_ENUM, 0),
        "force_topic_creation": (15, OPT, T.TYPE_BOOL, True),
        "keySharedMeta": (17, OPT, T.TYPE_MESSAGE, None),
        "consumer_epoch": (19, OPT, T.TYPE_UINT64, None),
    },
    "CommandProducer": {
        "topic": (1, REQ, T.TYPE_STRING, None), "producer_id": (2, REQ, T.TYPE_UINT64, None),
        "request_id": (3, REQ, T.TYPE_UINT64, None),
        "user_provided_producer_name": (9, OPT, T.TYPE_BOOL, True),
        "producer_access_mode": (10, OPT, T.TYPE_ENUM, 0),
        "initial_subscription_name": (13, OPT, T.TYPE_STRING, None),
    },
    "CommandSend": {
        "producer_id": (1, REQ, T.TYPE_UINT64, None), "sequence_id": (2, REQ, T.TYPE_UINT64, None),
        "num_messages": (3, OPT, T.TYPE_INT32, 1),
        "highest_sequence_id": (6, OPT, T.TYPE_UINT64, 0),
        "is_chunk": (7, OPT, T.TYPE_BOOL, False), "marker": (8, OPT, T.TYPE_BOOL, False),
        "message_id": (9, OPT, T.TYPE_MESSAGE, None),
    },
    "CommandSendReceipt": {
        "producer_id": (1, REQ, T.TYPE_UINT64, None), "sequence_id": (2, REQ, T.TYPE_UINT64, None),
        "message_id": (3, OPT, T.TYPE_MESSAGE, None),
        "highest_sequence_id": (4, OPT, T.TYPE_UINT64, 0),
    },
    "CommandMessage": {
        "consumer_id": (1, REQ, T.TYPE_UINT64, None), "message_id": (2, REQ, T.TYPE_MESSAGE, None),
        "redelivery_count": (3, OPT, T.TYPE_UINT32, 0), "ack_set": (4, REP, T.TYPE_INT64, None),
        "consumer_epoch": (5, OPT, T.TYPE_UINT64, None),
    },
    "CommandAck": {
        "consumer_id": (1, REQ, T.TYPE_UINT64, None), "ack_type": (2, REQ, T.TYPE_ENUM, None),
        "message_id": (3, REP, T.TYPE_MESSAGE, None),
        "validation_error": (4, OPT, T.TYPE_ENUM, None),
        "properties": (5, REP, T.TYPE_MESSAGE, None),
        "txnid_least_bits": (6, OPT, T.TYPE_UINT64, 0),
        "txnid_most_bits": (7, OPT, T.TYPE_UINT64, 0),
        "request_id": (8, OPT, T.TYPE_UINT64, None),
    },
    "CommandFlow": {
        "consumer_id": (1, REQ, T.TYPE_UINT64, None),
        "messagePermits": (2, REQ, T.TYPE_UINT32, None),
    },
    "CommandProducerSuccess": {
        "request_id": (1, REQ, T.TYPE_UINT64, None),
        "producer_name": (2, REQ, T.TYPE_STRING, None),
        "last_sequence_id": (3, OPT, T.TYPE_INT64, -1),
        "schema_version": (4, OPT, T.TYPE_BYTES, None),
        "topic_epoch": (5, OPT, T.TYPE_UINT64, None),
        "producer_ready": (6, OPT, T.TYPE_BOOL, True),
    },
    "CommandLookupTopicResponse": {
        "brokerServiceUrl": (1, OPT, T.TYPE_STRING, None),
        "brokerServiceUrlTls": (2, OPT, T.TYPE_STRING, None),
        "response": (3, OPT, T.TYPE_ENUM, None), "request_id": (4, REQ, T.TYPE_UINT64, None),
        "authoritative": (5, OPT, T.TYPE_BOOL, False), "error": (6, OPT, T.TYPE_ENUM, None),
        "message": (7, OPT, T.TYPE_STRING, None),
        "proxy_through_service_url": (8, OPT, T.TYPE_BOOL, False),
    },
    "CommandPartitionedTopicMetadata": {
        "topic": (1, REQ, T.TYPE_STRING, None), "request_id": (2, REQ, T.TYPE_UINT64, None),
        "metadata_auto_creation_enabled": (6, OPT, T.TYPE_BOOL, True),
    },
    "KeySharedMeta": {
        "keySharedMode": (1, REQ, T.TYPE_ENUM, None), "hashRanges": (3, REP, T.TYPE_MESSAGE, None),
        "allowOutOfOrderDelivery": (4, OPT, T.TYPE_BOOL, False),
    },
    "Schema": {
        "name": (1, REQ, T.TYPE_STRING, None), "schema_data": (3, REQ, T.TYPE_BYTES, None),
        "type": (4, REQ, T.TYPE_ENUM, None), "properties": (5, REP, T.TYPE_MESSAGE, None),
    },
}


def _enum(enum_desc) -> dict[str, int]:
    return {v.name: v.number for v in enum_desc.values}


def test_base_command_type_values() -> None:
    assert _enum(pb.BaseCommand.DESCRIPTOR.enum_types_by_name["Type"]) == BASE_COMMAND_TYPES


def test_base_command_fields() -> None:
    fields = pb.BaseCommand.DESCRIPTOR.fields_by_name
    assert fields["type"].number == 1
    assert _label(fields["type"]) == REQ
    got = {
        name: (f.number, f.message_type.name)
        for name, f in fields.items()
        if name != "type"
    }
    assert got == BASE_COMMAND_FIELDS
    for name, f in fields.items():
        if name != "type":
            assert _label(f) == OPT, name


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_message_fields(message: str) -> None:
    desc = pb.DESCRIPTOR.message_types_by_name[message]
    for name, (number, label, ftype, default) in FIELDS[message].items():
        f = desc.fields_by_name[name]
        assert (f.number, _label(f), f.type) == (number, label, ftype), f"{message}.{name}"
        if default is not None:
            assert f.has_default_value, f"{message}.{name} default"
            assert f.default_value == default, f"{message}.{name} default"


def test_enums() -> None:
    assert _enum(pb.CompressionType.DESCRIPTOR) == {
        "NONE": 0, "LZ4": 1, "ZLIB": 2, "ZSTD": 3, "SNAPPY": 4,
    }
    assert _enum(pb.CommandSubscribe.SubType.DESCRIPTOR) == {
        "Exclusive": 0, "Shared": 1, "Failover": 2, "Key_Shared": 3,
    }
    assert _enum(pb.CommandSubscribe.InitialPosition.DESCRIPTOR) == {"Latest": 0, "Earliest": 1}
    assert _enum(pb.CommandAck.AckType.DESCRIPTOR) == {"Individual": 0, "Cumulative": 1}
    assert _enum(pb.CommandAck.ValidationError.DESCRIPTOR) == {
        "UncompressedSizeCorruption": 0, "DecompressionError": 1, "ChecksumMismatch": 2,
        "BatchDeSerializeError": 3, "DecryptionError": 4,
    }
    assert _enum(pb.CommandLookupTopicResponse.LookupType.DESCRIPTOR) == {
        "Redirect": 0, "Connect": 1, "Failed": 2,
    }
    assert _enum(pb.CommandPartitionedTopicMetadataResponse.LookupType.DESCRIPTOR) == {
        "Success": 0, "Failed": 1,
    }
    assert _enum(pb.ProducerAccessMode.DESCRIPTOR) == {
        "Shared": 0, "Exclusive": 1, "WaitForExclusive": 2, "ExclusiveWithFencing": 3,
    }
    assert _enum(pb.KeySharedMode.DESCRIPTOR) == {"AUTO_SPLIT": 0, "STICKY": 1}
    assert _enum(pb.TxnAction.DESCRIPTOR) == {"COMMIT": 0, "ABORT": 1}
    assert _enum(pb.CommandGetTopicsOfNamespace.Mode.DESCRIPTOR) == {
        "PERSISTENT": 0, "NON_PERSISTENT": 1, "ALL": 2,
    }
    assert _enum(pb.ProtocolVersion.DESCRIPTOR) == {f"v{i}": i for i in range(22)}
    server_errors = [
        "UnknownError", "MetadataError", "PersistenceError", "AuthenticationError",
        "AuthorizationError", "ConsumerBusy", "ServiceNotReady",
        "ProducerBlockedQuotaExceededError", "ProducerBlockedQuotaExceededException",
        "ChecksumError", "UnsupportedVersionError", "TopicNotFound", "SubscriptionNotFound",
        "ConsumerNotFound", "TooManyRequests", "TopicTerminatedError", "ProducerBusy",
        "InvalidTopicName", "IncompatibleSchema", "ConsumerAssignError",
        "TransactionCoordinatorNotFound", "InvalidTxnStatus", "NotAllowedError",
        "TransactionConflict", "TransactionNotFound", "ProducerFenced",
    ]
    assert _enum(pb.ServerError.DESCRIPTOR) == {n: i for i, n in enumerate(server_errors)}
    schema_types = [
        "None", "String", "Json", "Protobuf", "Avro", "Bool", "Int8", "Int16", "Int32",
        "Int64", "Float", "Double", "Date", "Time", "Timestamp", "KeyValue", "Instant",
        "LocalDate", "LocalTime", "LocalDateTime", "ProtobufNative", "AutoConsume", "External",
    ]
    assert _enum(pb.Schema.Type.DESCRIPTOR) == {n: i for i, n in enumerate(schema_types)}


def test_known_wire_bytes() -> None:
    # Hand-assembled: type=SEND (field 1 varint 6), send (field 6, len 4) {1:1, 2:2}.
    cmd = pb.BaseCommand(type=pb.BaseCommand.SEND, send=pb.CommandSend(producer_id=1, sequence_id=2))
    assert cmd.SerializeToString() == bytes.fromhex("0806" "3204" "0801" "1002")
    assert pb.DESCRIPTOR.package == "pulsar.proto"
