"""ACLs and SCRAM credentials in the metadata image: Kafka's AclsImage and ScramImage.

In a KRaft cluster these are cluster metadata (issue 13): the controller writes
AccessControlEntryRecord / RemoveAccessControlEntryRecord and UserScramCredentialRecord /
RemoveUserScramCredentialRecord, every node replays them into its :class:`SecurityImage`,
and each broker's publisher (:mod:`kafkakit.broker.security.metadata_publisher`) hands the
result to its authorizer and credential store. A credential is its salt, StoredKey,
ServerKey and iteration count, never the password.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from kafkakit.acls import AclBinding, AclOperation, AclPermissionType, PatternType, ResourceType
from kafkakit.security.scram import ScramCredential

from .records import (
    AccessControlEntryRecord,
    MetadataRecord,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)

if TYPE_CHECKING:
    from .image import MetadataDelta

#: The records this part of the image replays.
SECURITY_RECORDS = (
    AccessControlEntryRecord,
    RemoveAccessControlEntryRecord,
    UserScramCredentialRecord,
    RemoveUserScramCredentialRecord,
)

#: A SCRAM credential's key: (user name, Kafka's mechanism number: 1 = SHA-256, 2 = SHA-512).
ScramKey = tuple[str, int]


def binding_of(record: AccessControlEntryRecord) -> AclBinding:
    """The ACL an AccessControlEntryRecord creates."""
    return AclBinding(
        ResourceType(record.resource_type),
        record.resource_name,
        record.principal,
        AclOperation(record.operation),
        AclPermissionType(record.permission_type),
        PatternType(record.pattern_type),
        record.host,
    )


def acl_record(acl_id: uuid.UUID, binding: AclBinding) -> AccessControlEntryRecord:
    """The AccessControlEntryRecord that creates ``binding`` as ``acl_id``."""
    return AccessControlEntryRecord(
        acl_id,
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission_type),
    )


def scram_record(user: str, mechanism: int, credential: ScramCredential) -> UserScramCredentialRecord:
    """The UserScramCredentialRecord that sets ``user``'s ``credential`` for ``mechanism``."""
    return UserScramCredentialRecord(
        user, mechanism, credential.salt, credential.stored_key, credential.server_key, credential.iterations
    )


class SecurityImage:
    """ACLs by id and SCRAM credentials by (user, mechanism number)."""

    def __init__(self) -> None:
        self.acls: dict[uuid.UUID, AclBinding] = {}
        self.scram: dict[ScramKey, ScramCredential] = {}

    def apply(self, record: MetadataRecord, delta: MetadataDelta) -> None:
        """Replay one of :data:`SECURITY_RECORDS`; anything else is ignored."""
        if isinstance(record, AccessControlEntryRecord):
            self.acls[record.acl_id] = binding_of(record)
            delta.changed_acls.add(record.acl_id)
        elif isinstance(record, RemoveAccessControlEntryRecord):
            if self.acls.pop(record.acl_id, None) is not None:
                delta.changed_acls.add(record.acl_id)
        elif isinstance(record, UserScramCredentialRecord):
            key = (record.name, record.mechanism)
            self.scram[key] = ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)
            delta.changed_scram.add(key)
        elif isinstance(record, RemoveUserScramCredentialRecord):
            key = (record.name, record.mechanism)
            if self.scram.pop(key, None) is not None:
                delta.changed_scram.add(key)

    def bindings(self) -> set[AclBinding]:
        """Every ACL (the image never holds the same ACL twice)."""
        return set(self.acls.values())

    def to_records(self) -> list[MetadataRecord]:
        """The records that rebuild this part of an image (in a snapshot)."""
        out: list[MetadataRecord] = [acl_record(acl_id, b) for acl_id, b in self.acls.items()]
        out += [scram_record(user, mech, cred) for (user, mech), cred in self.scram.items()]
        return out


__all__ = [
    "SECURITY_RECORDS",
    "ScramKey",
    "SecurityImage",
    "acl_record",
    "binding_of",
    "scram_record",
]
