"""ACLs on the controller: Kafka's AclControlManager (CreateAcls, DeleteAcls).

The ACLs are the image's (``image.security.acls``, by ACL id), so this manager keeps no state:

- :meth:`AclControlManager.create_acls`: each binding is validated as Kafka's controller does
  (``validateNewAcl``) plus the broker-side checks broker_min's authorizer makes (principal
  ``Type:name``, host ``*`` or an IP address, ``kafka-cluster`` for the cluster resource);
  INVALID_REQUEST with a message for a bad one. A new ACL becomes an AccessControlEntryRecord
  with a fresh id; creating an ACL that exists (or twice in one request) succeeds without a
  record, as in Kafka.
- :meth:`AclControlManager.delete_acls`: each filter (INVALID_REQUEST when a field is UNKNOWN,
  as Kafka's ``validateFilter``) is matched against the image with Kafka's
  ``AclBindingFilter.matches`` (``filter_matches``); every match is answered and becomes one
  RemoveAccessControlEntryRecord (an ACL matched by two filters is removed once, listed in
  both answers). All filters' records are one batch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkakit.broker.metadata import MetadataImage, MetadataRecord, RemoveAccessControlEntryRecord
from kafkakit.broker.metadata.security_image import acl_record
from kafkakit.broker.security.authorizer import InvalidAclError, filter_matches, validate
from kio.schema.errors import ErrorCode


@dataclass(frozen=True, slots=True)
class AclCreateResult:
    """The answer for one creation of a CreateAcls request."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(slots=True)
class AclDeleteResult:
    """The answer for one filter of a DeleteAcls request: the ACLs it deleted, or an error."""

    error: ErrorCode = ErrorCode.none
    message: str | None = None
    deleted: list[AclBinding] = field(default_factory=list)


def validate_new_acl(binding: AclBinding) -> None:
    """Kafka's ``AclControlManager.validateNewAcl`` and broker_min's authorizer checks; InvalidAclError."""
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise InvalidAclError(f"Invalid resourceType {binding.resource_type.name}")
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAclError(f"Invalid patternType {binding.pattern_type.name}")
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise InvalidAclError(f"Invalid operation {binding.operation.name}")
    if binding.permission_type not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise InvalidAclError(f"Invalid permissionType {binding.permission_type.name}")
    if not binding.resource_name:
        raise InvalidAclError("Resource name should not be empty")
    validate(binding)


def validate_filter(acl_filter: AclBindingFilter) -> None:
    """Kafka's ``AclControlManager.validateFilter``: no UNKNOWN field; InvalidAclError."""
    if ResourceType.UNKNOWN == acl_filter.resource_type or PatternType.UNKNOWN == acl_filter.pattern_type:
        raise InvalidAclError("Unknown patternFilter.")
    if AclOperation.UNKNOWN == acl_filter.operation or AclPermissionType.UNKNOWN == acl_filter.permission_type:
        raise InvalidAclError("Unknown entryFilter.")


class AclControlManager:
    """Turns CreateAcls and DeleteAcls into ACL records, against the image's ACLs."""

    def __init__(self, new_id: Callable[[], uuid.UUID] = uuid.uuid4) -> None:
        self._new_id = new_id

    def create_acls(
        self, image: MetadataImage, bindings: Sequence[AclBinding | InvalidAclError]
    ) -> tuple[list[AclCreateResult], list[MetadataRecord]]:
        """The answer per creation (an InvalidAclError entry: a creation the caller could not
        even parse) and the records of the new ACLs."""
        existing = image.security.bindings()
        taken = set(image.security.acls)
        results: list[AclCreateResult] = []
        records: list[MetadataRecord] = []
        for binding in bindings:
            try:
                if isinstance(binding, InvalidAclError):
                    raise binding
                validate_new_acl(binding)
            except InvalidAclError as exc:
                results.append(AclCreateResult(ErrorCode.invalid_request, str(exc)))
                continue
            if binding not in existing:
                existing.add(binding)
                acl_id = self._new_id()
                while acl_id in taken:
                    acl_id = self._new_id()
                taken.add(acl_id)
                records.append(acl_record(acl_id, binding))
            results.append(AclCreateResult())
        return results, records

    def delete_acls(
        self, image: MetadataImage, filters: Sequence[AclBindingFilter | InvalidAclError]
    ) -> tuple[list[AclDeleteResult], list[MetadataRecord]]:
        """The answer per filter and the records removing every ACL some filter matched."""
        results: list[AclDeleteResult] = []
        removed: dict[uuid.UUID, None] = {}
        for acl_filter in filters:
            try:
                if isinstance(acl_filter, InvalidAclError):
                    raise acl_filter
                validate_filter(acl_filter)
            except InvalidAclError as exc:
                results.append(AclDeleteResult(ErrorCode.invalid_request, str(exc)))
                continue
            result = AclDeleteResult()
            for acl_id, binding in image.security.acls.items():
                if filter_matches(acl_filter, binding):
                    result.deleted.append(binding)
                    removed[acl_id] = None
            results.append(result)
        return results, [RemoveAccessControlEntryRecord(acl_id) for acl_id in removed]


__all__ = ["AclControlManager", "AclCreateResult", "AclDeleteResult", "validate_filter", "validate_new_acl"]
