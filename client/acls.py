"""ACLs and SCRAM credentials as the Admin client manages them (Kafka's AclBinding model).

The enums carry Kafka's wire numbers.  :class:`AclBinding` is one rule ("User:alice
may READ topic orders from any host"); :class:`AclBindingFilter` matches rules
for describe and delete, with ``ANY`` fields and ``None`` names matching
everything.  SCRAM credentials are changed with
:class:`UserScramCredentialUpsertion` (the password is salted and hashed here,
so it never crosses the wire) and :class:`UserScramCredentialDeletion`.
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Any

from kafkakit.errors import KafkaConfigError
from kafkakit.security import scram


class ResourceType(enum.IntEnum):
    """What an ACL protects."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    """How an ACL's resource name matches: exactly (LITERAL, ``*`` = all) or as a prefix."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    """The operation an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class AclPermissionType(enum.IntEnum):
    """Whether an ACL allows or denies (DENY wins)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` (``User:alice``) may or may not do ``operation`` on a resource from ``host``."""

    resource_type: ResourceType
    resource_name: str
    principal: str
    operation: AclOperation
    permission_type: AclPermissionType = AclPermissionType.ALLOW
    pattern_type: PatternType = PatternType.LITERAL
    host: str = "*"


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Matches ACLs for :meth:`Admin.describe_acls` and :meth:`Admin.delete_acls`; the defaults match all."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def to_request(self) -> dict[str, Any]:
        return {
            "resource_type_filter": int(self.resource_type),
            "resource_name_filter": self.resource_name,
            "pattern_type_filter": int(self.pattern_type),
            "principal_filter": self.principal,
            "host_filter": self.host,
            "operation": int(self.operation),
            "permission_type": int(self.permission_type),
        }


def creation(binding: AclBinding) -> dict[str, Any]:
    """CreateAcls' entry for ``binding``."""
    if not isinstance(binding, AclBinding):
        raise TypeError(f"create_acls() takes AclBinding objects, not {type(binding).__name__}")
    return {
        "resource_type": int(binding.resource_type),
        "resource_name": binding.resource_name,
        "resource_pattern_type": int(binding.pattern_type),
        "principal": binding.principal,
        "host": binding.host,
        "operation": int(binding.operation),
        "permission_type": int(binding.permission_type),
    }


def binding_from(resource_type: int, resource_name: str, pattern_type: int, acl: Any) -> AclBinding:
    """An AclBinding from a DescribeAcls/DeleteAcls response entry."""
    return AclBinding(
        ResourceType(resource_type),
        resource_name,
        str(acl.principal),
        AclOperation(int(acl.operation)),
        AclPermissionType(int(acl.permission_type)),
        PatternType(pattern_type),
        str(acl.host),
    )


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """A user's SCRAM credential as the broker describes it: the mechanism and iteration count."""

    mechanism: str
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Create or replace ``user``'s credential for ``mechanism`` (``SCRAM-SHA-256`` or ``SCRAM-SHA-512``)."""

    user: str
    mechanism: str
    password: str
    iterations: int = 4096
    salt: bytes | None = None

    def to_request(self) -> dict[str, Any]:
        info = _mechanism(self.mechanism)
        if not isinstance(self.password, str) or not self.password:
            raise KafkaConfigError("password", f"a SCRAM credential for {self.user!r} needs a non-empty password")
        salt = self.salt or os.urandom(32)
        salted = scram.salted_password(self.mechanism, self.password, salt, self.iterations)
        return {
            "name": self.user,
            "mechanism": info.type,
            "iterations": self.iterations,
            "salt": salt,
            "salted_password": salted,
        }


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: str

    def to_request(self) -> dict[str, Any]:
        return {"name": self.user, "mechanism": _mechanism(self.mechanism).type}


def _mechanism(name: str) -> scram.ScramMechanism:
    info = scram.MECHANISMS.get(name.upper())
    if info is None:
        raise KafkaConfigError("mechanism", f"expected one of {', '.join(scram.MECHANISMS)}, got {name!r}")
    return info


def mechanism_name(wire_type: int) -> str:
    """``SCRAM-SHA-256`` for Kafka's mechanism number 1, etc."""
    return scram.mechanism_by_type(wire_type).name
