"""Authorization: which role may produce to, consume from or look up which topic.

As Pulsar's default provider: with ``authorizationEnabled``, the roles of
``superUserRoles`` may do everything; any other role needs a permission granted on the
topic's namespace or on the topic (a partition inherits its partitioned topic's grants).
Actions are Pulsar's ``AuthAction`` names; ``produce`` and ``consume`` are enforced,
``functions``, ``sources``, ``sinks`` and ``packages`` are stored and listed only. A lookup
(Lookup, PartitionedMetadata) needs produce or consume; listing a namespace's topics needs
some permission on the namespace. A proxied connection needs both its own role and the
client's ``original_principal`` to be allowed (a superuser proxy passes for its part).

Permissions live in the metadata store, one record per namespace under
``permissions/{tenant}/{namespace}``: ``{"namespace": {role: [actions]},
"topics": {full topic name: {role: [actions]}}}``. ``grant_*``, ``revoke_*`` and
``*_permissions`` are the Python API the admin HTTP layer calls. The records are read once,
at start, and kept in memory (in cluster mode the store's ``watch`` brings in grants and
revocations made through other brokers), so a check (on every Lookup, Producer and Subscribe) never
touches the store; a grant or revoke applies at once and is stored off the loop, in order
(`KeyWriter`): it returns the write's future, which the admin handlers await.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from magnetar.broker.errors import BrokerError
from magnetar.broker.namespaces.key_writes import KeyWriter, Write
from magnetar.broker.topic_name import TopicName
from magnetar.protocol import pb

log = logging.getLogger(__name__)

ACTIONS = frozenset({"produce", "consume", "functions", "sources", "sinks", "packages"})
PRODUCE = "produce"
CONSUME = "consume"
LOOKUP = "lookup"  # produce or consume


def _key(namespace: str) -> str:
    return f"permissions/{namespace}"


def _check_actions(actions: Any) -> list[str]:
    wanted = sorted({str(a).lower() for a in actions})
    unknown = [a for a in wanted if a not in ACTIONS]
    if unknown:
        raise ValueError(f"unknown actions {unknown}; known: {', '.join(sorted(ACTIONS))}")
    return wanted


class AuthorizationService:
    """Checks and stores permissions (see the module docstring)."""

    def __init__(self, metadata: Any, config: Any, write: Write | None = None) -> None:
        self.metadata = metadata
        self._writes = KeyWriter(metadata, write)
        # the stored records by namespace (read once: this is the only writer)
        self._records: dict[str, dict[str, Any]] = {
            key[len("permissions/"):]: value for key, value in metadata.list("permissions/").items()
        }
        if hasattr(metadata, "watch"):  # cluster mode: grants made through other brokers
            metadata.watch("permissions/", self._changed)
        self.enabled = bool(config.authorizationEnabled)
        self.super_users: set[str] = config.super_user_roles
        self.proxy_roles: set[str] = config.proxy_roles

    # ------------------------------------------------------------------ storage

    def _changed(self, key: str, value: Any) -> None:
        if value is None:
            self._records.pop(key[len("permissions/"):], None)
        else:
            self._records[key[len("permissions/"):]] = value

    def _record(self, namespace: str) -> dict[str, Any]:
        record = self._records.get(namespace) or {}
        return {"namespace": dict(record.get("namespace", {})),
                "topics": {t: dict(r) for t, r in record.get("topics", {}).items()}}

    def _store(self, namespace: str, record: dict[str, Any]) -> asyncio.Future[Any] | None:
        self._records[namespace] = record
        return self._writes.put(_key(namespace), record)

    def grant_namespace(self, namespace: str, role: str, actions: Any) -> asyncio.Future[Any] | None:
        record = self._record(namespace)
        record["namespace"][role] = _check_actions(actions)
        log.info("namespace %s: granted %s to role %s", namespace, ",".join(record["namespace"][role]), role)
        return self._store(namespace, record)

    def replace_namespace(self, namespace: str, grants: dict[str, list[str]],
                          topic_grants: dict[str, dict[str, list[str]]],
                          ) -> asyncio.Future[Any] | None:
        """Set every permission of a namespace at once (a namespace created with Pulsar's
        ``auth_policies``): what it had before, from an earlier namespace of that name,
        is dropped."""
        record: dict[str, Any] = {
            "namespace": {role: _check_actions(actions) for role, actions in grants.items()},
            "topics": {str(TopicName.parse(topic)): {r: _check_actions(a) for r, a in roles.items()}
                       for topic, roles in topic_grants.items()},
        }
        if not record["namespace"] and not record["topics"] and namespace not in self._records:
            return None
        log.info("namespace %s: permissions set for roles %s", namespace,
                 ",".join(sorted(record["namespace"])) or "(none)")
        return self._store(namespace, record)

    def revoke_namespace(self, namespace: str, role: str) -> asyncio.Future[Any] | None:
        record = self._record(namespace)
        if record["namespace"].pop(role, None) is None:
            return None
        log.info("namespace %s: revoked the permissions of role %s", namespace, role)
        return self._store(namespace, record)

    def namespace_permissions(self, namespace: str) -> dict[str, list[str]]:
        permissions: dict[str, list[str]] = self._record(namespace)["namespace"]
        return permissions

    def topic_grants(self, namespace: str) -> dict[str, dict[str, list[str]]]:
        """The grants made on single topics of a namespace: ``{topic: {role: [actions]}}``."""
        grants: dict[str, dict[str, list[str]]] = self._record(namespace)["topics"]
        return grants

    def grant_topic(self, topic: str, role: str, actions: Any) -> asyncio.Future[Any] | None:
        name = TopicName.parse(topic)
        record = self._record(name.namespace)
        record["topics"].setdefault(str(name), {})[role] = _check_actions(actions)
        log.info("topic %s: granted %s to role %s", name, ",".join(_check_actions(actions)), role)
        return self._store(name.namespace, record)

    def revoke_topic(self, topic: str, role: str) -> asyncio.Future[Any] | None:
        name = TopicName.parse(topic)
        record = self._record(name.namespace)
        roles = record["topics"].get(str(name), {})
        if roles.pop(role, None) is None:
            return None
        if not roles:
            record["topics"].pop(str(name), None)
        log.info("topic %s: revoked the permissions of role %s", name, role)
        return self._store(name.namespace, record)

    def topic_level_permissions(self, topic: str) -> dict[str, list[str]]:
        """The grants made on the topic itself (not its namespace's)."""
        name = TopicName.parse(topic)
        return dict(self._record(name.namespace)["topics"].get(str(name), {}))

    def topic_permissions(self, topic: str) -> dict[str, list[str]]:
        """The effective grants on a topic: its namespace's, its partitioned topic's and its own."""
        name = TopicName.parse(topic)
        record = self._record(name.namespace)
        merged: dict[str, set[str]] = {r: set(a) for r, a in record["namespace"].items()}
        for key in {name.partitioned_base, str(name)}:
            for role, actions in record["topics"].get(key, {}).items():
                merged.setdefault(role, set()).update(actions)
        return {role: sorted(actions) for role, actions in merged.items()}

    # ------------------------------------------------------------------ checks

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self.super_users

    def role_allowed(self, role: str | None, topic: str, action: str) -> bool:
        if role is None:
            return False
        if role in self.super_users:
            return True
        granted = set(self.topic_permissions(topic).get(role, ()))
        if action == LOOKUP:
            return bool(granted & {PRODUCE, CONSUME})
        return action in granted

    def allowed(self, role: str | None, original_principal: str | None, topic: str,
                action: str) -> bool:
        if not self.enabled:
            return True
        if original_principal and role in self.proxy_roles:
            return (self.role_allowed(role, topic, action)
                    and self.role_allowed(original_principal, topic, action))
        return self.role_allowed(role, topic, action)

    def check(self, role: str | None, original_principal: str | None, topic: str,
              action: str, peer: str = "?") -> None:
        """Raise ``AuthorizationError`` (logged once) unless the role may do ``action``."""
        if self.allowed(role, original_principal, topic, action):
            return
        who = role if not original_principal else f"{original_principal} (via proxy {role})"
        log.warning("%s: role %s is not authorized to %s on %s", peer, who, action, topic)
        raise BrokerError(pb.AuthorizationError,
                          f"role {who} is not authorized to {action} on {topic}")

    def check_namespace(self, role: str | None, original_principal: str | None,
                        namespace: str, peer: str = "?") -> None:
        """Listing a namespace's topics: some permission on the namespace (or a superuser)."""
        if not self.enabled:
            return
        roles = [r for r in (role, original_principal) if r] if (
            original_principal and role in self.proxy_roles) else [role]
        record = self._record(namespace)
        for r in roles:
            if not (r and (r in self.super_users or r in record["namespace"] or any(
                    r in grants for grants in record["topics"].values()))):
                log.warning("%s: role %s is not authorized to list the topics of %s",
                            peer, r, namespace)
                raise BrokerError(pb.AuthorizationError,
                                  f"role {r} is not authorized on namespace {namespace}")
