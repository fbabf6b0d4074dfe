"""The lookup and metadata commands of a connection (`LookupCommands`): topic lookup with
the advertised address, partitioned metadata, topics of a namespace, and schemas (get,
get-or-create).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from magnetar.broker.cluster.coordinator import lookup_response
from magnetar.broker.errors import BrokerError
from magnetar.broker.security.authorization import LOOKUP
from magnetar.protocol import pb
from magnetar.protocol.frames import (
    Frame,
    encode_command_with_part,
    repeated_string_part,
)

if TYPE_CHECKING:
    pass

from magnetar.broker.connection.base import CnxBase, error_response

#: topic names per slice of a GetTopicsOfNamespace answer serialized on the loop (~2 ms
#: each here; the whole list of 100,000 in one protobuf call held it 30-40 ms)
TOPICS_SLICE = 5000
_TOPICS_FIELD = pb.CommandGetTopicsOfNamespaceResponse.DESCRIPTOR.fields_by_name["topics"].number

T = pb.BaseCommand


class LookupCommands(CnxBase):
    """Lookup, partitioned metadata, namespace listings and schemas."""

    def _advertised_host(self) -> str:
        host = self.config.advertisedAddress
        if not host and self.transport is not None:
            sock = self.transport.get_extra_info("sockname")
            host = sock[0] if sock else "localhost"
            if ":" in host:
                host = f"[{host}]"
        return host

    def _advertised_url(self) -> str:
        if self.service.port < 0:  # TLS only
            return self._advertised_tls_url() or ""
        return f"pulsar://{self._advertised_host()}:{self.service.port}"

    def _advertised_tls_url(self) -> str | None:
        tls_port = self.security.tls_port
        return None if tls_port is None else f"pulsar+ssl://{self._advertised_host()}:{tls_port}"

    def _lookup_admitted(self, cmd: pb.BaseCommand) -> bool:
        """Take a ``maxConcurrentLookupRequest`` slot for a lookup (held until its answer is
        flushed), or answer ``TooManyRequests`` at once and return False."""
        limits = self.security.limits
        if limits.acquire_lookup(self.peer):
            self.lookups_held += 1
            return True
        refusal = error_response(
            cmd, pb.TooManyRequests, "too many lookup requests in progress on the broker "
            f"(maxConcurrentLookupRequest={self.config.maxConcurrentLookupRequest}); retry")
        assert refusal is not None
        self.send(refusal)
        return False

    def handle_lookup(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        if not self._lookup_admitted(cmd):
            return
        lookup = cmd.lookupTopic
        listener = lookup.advertised_listener_name if lookup.HasField("advertised_listener_name") else None
        if self.service.cluster is not None:  # owned here, or redirect to the owner
            self._cluster_lookup(cmd, listener)
            return
        self.service.check_topic_name(lookup.topic)
        self.authorize(lookup.topic, LOOKUP)
        response = pb.CommandLookupTopicResponse(
            request_id=lookup.request_id,
            response=pb.CommandLookupTopicResponse.Connect,
            brokerServiceUrl=self.service.listeners.broker_url(listener, self._advertised_url()),
            authoritative=True,
            proxy_through_service_url=False,
        )
        tls_url = self._advertised_tls_url()
        if tls_url is not None:
            response.brokerServiceUrlTls = tls_url
        self.send(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))

    def _cluster_lookup(self, cmd: pb.BaseCommand, listener: str | None) -> None:
        """`handle_lookup` in a cluster: the metadata store is asked off the event loop."""
        cluster = self.service.cluster
        assert cluster is not None
        lookup = cmd.lookupTopic
        limits = self.security.limits
        self.lookups_held -= 1  # the slot goes with the task, until its answer is sent

        async def answer() -> None:
            try:
                # a namespace created at another broker a moment ago is read from the store
                await self.service.known_topic_name(lookup.topic)
                self.authorize(lookup.topic, LOOKUP)
                result = await cluster.lookup(lookup.topic, lookup.authoritative)
                own = self.service.listeners.broker_url(listener, self._advertised_url()) \
                    if result.connect else ""
                response = lookup_response(result, lookup.request_id, listener, own,
                                           self._advertised_tls_url())
                self.send(T(type=T.LOOKUP_RESPONSE, lookupTopicResponse=response))
            finally:
                limits.release_lookups(1)

        task = self.run_async(cmd, answer())
        self.lookup_tasks.add(task)
        task.add_done_callback(self.lookup_tasks.discard)

    def handle_partitioned_metadata(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        if not self._lookup_admitted(cmd):
            return
        req = cmd.partitionMetadata
        limits = self.security.limits
        self.lookups_held -= 1  # the slot goes with the task, until its answer is sent

        async def answer() -> None:  # the metadata store is read off the event loop
            try:
                # (in a cluster, a namespace created elsewhere a moment ago is read first)
                await self.service.known_topic_name(req.topic)
                self.authorize(req.topic, LOOKUP)
                partitions = await self.service.partitioned_metadata_async(req.topic)
            except BrokerError as exc:
                self.send_partitioned_metadata(req.request_id, exc)
            else:
                self.send_partitioned_metadata(req.request_id, partitions)
            finally:
                limits.release_lookups(1)

        self.run_async(cmd, answer())

    def send_partitioned_metadata(self, request_id: int, outcome: int | BrokerError) -> None:
        if isinstance(outcome, BrokerError):
            resp = pb.CommandPartitionedTopicMetadataResponse(
                request_id=request_id,
                response=pb.CommandPartitionedTopicMetadataResponse.Failed,
                error=outcome.code,
                message=str(outcome),
            )
        else:
            resp = pb.CommandPartitionedTopicMetadataResponse(
                request_id=request_id,
                partitions=outcome,
                response=pb.CommandPartitionedTopicMetadataResponse.Success,
            )
        self.send(T(type=T.PARTITIONED_METADATA_RESPONSE, partitionMetadataResponse=resp))

    def handle_get_topics_of_namespace(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.getTopicsOfNamespace
        if self.security.authorization.enabled:
            identity = self.identity
            self.security.authorization.check_namespace(
                identity.role if identity else None,
                identity.original_principal if identity else None, req.namespace, self.peer)

        async def answer() -> None:  # the metadata store is listed off the event loop
            topics, filtered = await self.service.topics_of_namespace_async(
                req.namespace, req.mode, req.topics_pattern if req.HasField("topics_pattern") else None
            )
            resp = pb.CommandGetTopicsOfNamespaceResponse(
                request_id=req.request_id, filtered=filtered, changed=True
            )
            cmd = T(type=T.GET_TOPICS_OF_NAMESPACE_RESPONSE, getTopicsOfNamespaceResponse=resp)
            if len(topics) <= TOPICS_SLICE:
                cmd.getTopicsOfNamespaceResponse.topics.extend(topics)
                self.send(cmd)
                return
            parts = []
            for at in range(0, len(topics), TOPICS_SLICE):
                if at:
                    await asyncio.sleep(0)
                parts.append(repeated_string_part(_TOPICS_FIELD, topics[at:at + TOPICS_SLICE]))
            for piece in encode_command_with_part(cmd, "getTopicsOfNamespaceResponse", parts):
                self.write(piece)

        self.run_async(cmd, answer())

    def handle_get_schema(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.getSchema
        version = req.schema_version if req.HasField("schema_version") else None
        resp = pb.CommandGetSchemaResponse(request_id=req.request_id)

        async def answer() -> None:  # the topic's versions are read off the loop
            found = await self.service.topic_schemas.get_schema_async(req.topic, version)
            if found is None:
                resp.error_code = pb.TopicNotFound
                resp.error_message = f"no schema for {req.topic}"
            else:
                schema, version_bytes = found
                resp.schema.CopyFrom(schema)
                resp.schema_version = version_bytes
            if not self.closed:
                self.send(T(type=T.GET_SCHEMA_RESPONSE, getSchemaResponse=resp))

        self.run_async(cmd, answer())

    def handle_get_or_create_schema(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        req = cmd.getOrCreateSchema
        resp = pb.CommandGetOrCreateSchemaResponse(request_id=req.request_id)

        async def answer() -> None:  # stored off the loop, answered once stored
            try:
                resp.schema_version = await self.service.topic_schemas.get_or_create_async(
                    req.topic, req.schema)
            except BrokerError as exc:
                resp.error_code = exc.code
                resp.error_message = str(exc)
            if not self.closed:
                self.send(T(type=T.GET_OR_CREATE_SCHEMA_RESPONSE, getOrCreateSchemaResponse=resp))

        self.run_async(cmd, answer())
