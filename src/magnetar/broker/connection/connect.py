"""The connect/auth and liveness commands of a connection (`ConnectCommands`): Connect,
AuthResponse (through `handshake`), Ping/Pong and the keep-alive tick.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from magnetar.broker.connection import handshake
from magnetar.broker.errors import BrokerError
from magnetar.protocol import pb
from magnetar.protocol.frames import (
    Frame,
)
from magnetar.protocol.peers import ends_txn_after_sends, understands_reached_end_of_topic
from magnetar.protocol.version import PROTOCOL_VERSION

if TYPE_CHECKING:
    from magnetar.broker.security.auth.service import Identity

from magnetar.broker.connection.base import NO_REQUEST, SERVER_VERSION, CnxBase

T = pb.BaseCommand


class ConnectCommands(CnxBase):
    """Connect, authentication and keep-alive."""

    def handle_connect(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        if self.connected or self.auth_task is not None:  # answered too, then closed
            self.send_error(NO_REQUEST, pb.NotAllowedError, "a second Connect on one connection")
            self._protocol_violation("second Connect on one connection")
            return
        connect = cmd.connect
        if self.security.authentication.enabled:
            self.supports_auth_refresh = bool(
                connect.HasField("feature_flags") and connect.feature_flags.supports_auth_refresh)
            handshake.start_connect(self._whole, connect, lambda ident: self._connected(connect, ident))
            return
        try:
            self.principal = self.service.authenticate(connect)
        except BrokerError as exc:
            self.send_error(NO_REQUEST, exc.code, str(exc))
            self.close()
            return
        self._connected(connect, None)

    def _connected(self, connect: pb.CommandConnect, identity: Identity | None) -> None:
        """The Connect is accepted (authenticated as ``identity`` when auth is on)."""
        if identity is not None:
            self.identity = identity
            self.principal = identity.principal
        self.security.limits.handshake_done(self)
        self.client_version = connect.client_version
        self.ends_txn_after_sends = ends_txn_after_sends(connect.client_version)
        self.remote_protocol_version = connect.protocol_version
        self.understands_end_of_topic = understands_reached_end_of_topic(
            connect.client_version, connect.protocol_version
        )
        self.supports_entry_metadata = bool(
            connect.HasField("feature_flags")
            and connect.feature_flags.supports_broker_entry_metadata
        )
        self.connected = True
        connected = pb.CommandConnected(
            server_version=SERVER_VERSION,
            protocol_version=min(PROTOCOL_VERSION, connect.protocol_version),
            max_message_size=self.config.maxMessageSize,
        )
        connected.feature_flags.supports_auth_refresh = self.identity is not None
        connected.feature_flags.supports_broker_entry_metadata = True
        connected.feature_flags.supports_partial_producer = True
        self.send(T(type=T.CONNECTED, connected=connected))

    def handle_auth_response(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        handshake.handle_auth_response(self._whole, cmd)

    def handle_ping(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        self.send(T(type=T.PONG, pong=pb.CommandPong()))

    def handle_pong(self, cmd: pb.BaseCommand, frame: Frame) -> None:
        self.ping_outstanding = False

    def keepalive_tick(self) -> None:
        """Called by the service every keepAliveIntervalSeconds."""
        if self.closed:
            return
        silent = time.monotonic() - self.last_received > self.config.keepAliveIntervalSeconds
        if not self.connected:
            if silent:
                self._protocol_violation("no Connect within the keep-alive interval")
            return
        held = self.reading_paused or self.buffer_paused or self.rate_holds
        if self.ping_outstanding and silent and not held:
            # (while reading is paused for backpressure, the Pong may be waiting unread)
            self.abort("peer did not answer Ping")
            return
        if self.remote_protocol_version < 1:  # Ping/Pong arrived with protocol v1
            return
        self.ping_outstanding = True
        self.send(T(type=T.PING, ping=pb.CommandPing()))
