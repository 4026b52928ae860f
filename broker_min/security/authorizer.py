"""The authorizer: Kafka's StandardAuthorizer rules over ACLs kept durably on disk.

A request is allowed when:

1. the principal is a super user (``super.users=User:admin;User:ANONYMOUS``); else
2. no DENY ACL matches (its operation is the one asked for, or ALL); and
3. an ALLOW ACL matches, where ALLOW of READ, WRITE, DELETE or ALTER also
   allows DESCRIBE, and ALLOW of ALTER_CONFIGS allows DESCRIBE_CONFIGS; or
4. no ACL at all names the resource and ``allow.everyone.if.no.acl.found=true``.

An ACL matches a resource when its pattern is LITERAL with the same name or
``*``, or PREFIXED with a prefix of the name; its principal is the caller's or
``User:*``; its host is the caller's address or ``*``.

broker_min accepts Kafka's class names for ``authorizer.class.name``
(``org.apache.kafka.metadata.authorizer.StandardAuthorizer``, and the older
``kafka.security.authorizer.AclAuthorizer``), so one configuration serves both.
ACLs live in ``<data dir>/.kafkakit-security/acls.json`` on a single node; in a KRaft cluster
they are cluster metadata, and :meth:`Authorizer.replace_bindings` sets them from the
metadata image (:mod:`kafkakit.broker.security.metadata_publisher`), without the file.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from pathlib import Path

from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.security.principal import Session
from kafkakit.broker.security.store import JsonDocument
from kafkakit.errors import KafkaConfigError

FILE_NAME = "acls.json"
AUTHORIZER_CLASSES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "kafkakit.broker.security.authorizer.Authorizer",
    }
)
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
_IMPLIES_DESCRIBE = frozenset({AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE, AclOperation.ALTER})


class InvalidAclError(ValueError):
    """An ACL that cannot be stored (Kafka's INVALID_REQUEST with a message)."""


def validate(binding: AclBinding) -> None:
    """Refuse what Kafka refuses to create: ANY/UNKNOWN values, bad principals or hosts."""
    if binding.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAclError("resource type must be concrete")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError("pattern type must be LITERAL or PREFIXED")
    if binding.operation in (AclOperation.ANY, AclOperation.UNKNOWN):
        raise InvalidAclError("operation must be concrete")
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError("permission type must be ALLOW or DENY")
    kind, sep, name = binding.principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAclError(f"invalid principal {binding.principal!r}: expected Type:name")
    if not binding.resource_name:
        raise InvalidAclError("resource name must not be empty")
    if binding.resource_type == ResourceType.CLUSTER and binding.resource_name != "kafka-cluster":
        raise InvalidAclError("the cluster resource is named kafka-cluster")
    if binding.host != WILDCARD:
        try:
            ipaddress.ip_address(binding.host)
        except ValueError:
            raise InvalidAclError(f"invalid host {binding.host!r}: an IP address or *") from None


def filter_matches(acl_filter: AclBindingFilter, binding: AclBinding) -> bool:
    """Whether DescribeAcls/DeleteAcls' ``acl_filter`` selects ``binding``."""
    if acl_filter.resource_type not in (ResourceType.ANY, binding.resource_type):
        return False
    if not _pattern_matches(acl_filter, binding):
        return False
    if acl_filter.principal is not None and acl_filter.principal != binding.principal:
        return False
    if acl_filter.host is not None and acl_filter.host != binding.host:
        return False
    if acl_filter.operation not in (AclOperation.ANY, binding.operation):
        return False
    return acl_filter.permission_type in (AclPermissionType.ANY, binding.permission_type)


def _pattern_matches(acl_filter: AclBindingFilter, binding: AclBinding) -> bool:
    pattern, name = acl_filter.pattern_type, acl_filter.resource_name
    if pattern == PatternType.MATCH:  # every ACL that would apply to the resource called ``name``
        return name is None or _applies(binding, name)
    if pattern not in (PatternType.ANY, binding.pattern_type):
        return False
    return name is None or name == binding.resource_name


def _applies(binding: AclBinding, name: str) -> bool:
    if binding.pattern_type == PatternType.LITERAL:
        return binding.resource_name in (name, WILDCARD)
    return name.startswith(binding.resource_name)


def _to_json(binding: AclBinding) -> list[object]:
    return [
        int(binding.resource_type), binding.resource_name, int(binding.pattern_type), binding.principal,
        binding.host, int(binding.operation), int(binding.permission_type),
    ]  # fmt: skip


def _from_json(row: list[object]) -> AclBinding:
    rtype, name, pattern, principal, host, operation, permission = row
    return AclBinding(
        ResourceType(int(str(rtype))), str(name), str(principal), AclOperation(int(str(operation))),
        AclPermissionType(int(str(permission))), PatternType(int(str(pattern))), str(host),
    )  # fmt: skip


class Authorizer:
    """ACL storage and the allow/deny decision for one broker."""

    def __init__(self, directory: Path, super_users: frozenset[str], allow_if_no_acl: bool) -> None:
        self._document = JsonDocument(directory / FILE_NAME)
        self._bindings: list[AclBinding] = [_from_json(row) for row in self._document.load([])]
        self.super_users = super_users
        self.allow_if_no_acl = allow_if_no_acl

    @classmethod
    def from_config(cls, config: BrokerConfig, directory: Path) -> Authorizer | None:
        """The configured authorizer, or None when ``authorizer.class.name`` is empty."""
        name = config.authorizer_class_name.strip()
        if not name:
            return None
        if name not in AUTHORIZER_CLASSES:
            raise KafkaConfigError(
                "authorizer.class.name", f"{name!r} is not supported; use one of {', '.join(sorted(AUTHORIZER_CLASSES))}"
            )
        return cls(directory, config.super_user_set(), config.allow_everyone_if_no_acl_found)

    # -- ACL storage -------------------------------------------------------------

    def bindings(self) -> list[AclBinding]:
        return list(self._bindings)

    def describe(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self._bindings if filter_matches(acl_filter, b)]

    def create(self, bindings: Iterable[AclBinding]) -> None:
        """Store ``bindings`` (already validated); creating an existing ACL again is a no-op, as in Kafka."""
        known = set(self._bindings)
        for binding in bindings:
            if binding not in known:
                self._bindings.append(binding)
                known.add(binding)
        self._save()

    def delete(self, acl_filter: AclBindingFilter) -> list[AclBinding]:
        """Remove and return the ACLs ``acl_filter`` matches."""
        removed = [b for b in self._bindings if filter_matches(acl_filter, b)]
        if removed:
            gone = set(removed)
            self._bindings = [b for b in self._bindings if b not in gone]
            self._save()
        return removed

    def _save(self) -> None:
        self._document.save([_to_json(b) for b in self._bindings])

    def replace_bindings(self, bindings: Iterable[AclBinding]) -> None:
        """Cluster mode: hold exactly ``bindings`` (the metadata image's ACLs); the file is not written."""
        self._bindings = list(bindings)

    # -- decisions ---------------------------------------------------------------

    def authorize(self, session: Session, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """Whether ``session`` may do ``operation`` on the resource ``resource_type:name``."""
        principal = str(session.principal)
        if principal in self.super_users:
            return True
        on_resource = [b for b in self._bindings if b.resource_type == resource_type and _applies(b, name)]
        if not on_resource:
            return self.allow_if_no_acl
        mine = [b for b in on_resource if _principal_matches(b, principal) and _host_matches(b, session.client_host)]
        if any(b.permission_type == AclPermissionType.DENY and _denies(b, operation) for b in mine):
            return False
        return any(b.permission_type == AclPermissionType.ALLOW and _allows(b, operation) for b in mine)

    def authorize_any(self, session: Session, operation: AclOperation, resource_type: ResourceType) -> bool:
        """Whether ``session`` may do ``operation`` on some resource of this type (idempotent produce's check)."""
        principal = str(session.principal)
        if principal in self.super_users:
            return True
        mine = [
            b for b in self._bindings
            if b.resource_type == resource_type and _principal_matches(b, principal)
            and _host_matches(b, session.client_host)
        ]  # fmt: skip
        # Kafka's authorizeByResourceType: an ALLOW not cancelled by a DENY of the same or a wider pattern.
        allows = [b for b in mine if b.permission_type == AclPermissionType.ALLOW and _allows(b, operation)]
        denies = [b for b in mine if b.permission_type == AclPermissionType.DENY and _denies(b, operation)]
        if any(d.pattern_type == PatternType.LITERAL and d.resource_name == WILDCARD for d in denies):
            return False
        return any(not any(_applies(d, a.resource_name) for d in denies) for a in allows)


def _principal_matches(binding: AclBinding, principal: str) -> bool:
    return binding.principal in (principal, WILDCARD_PRINCIPAL)


def _host_matches(binding: AclBinding, host: str) -> bool:
    return binding.host in (WILDCARD, host)


def _denies(binding: AclBinding, operation: AclOperation) -> bool:
    return binding.operation in (operation, AclOperation.ALL)


def _allows(binding: AclBinding, operation: AclOperation) -> bool:
    if binding.operation in (operation, AclOperation.ALL):
        return True
    if operation == AclOperation.DESCRIBE:
        return binding.operation in _IMPLIES_DESCRIBE
    return operation == AclOperation.DESCRIBE_CONFIGS and binding.operation == AclOperation.ALTER_CONFIGS
