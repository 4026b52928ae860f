"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31), v1-3.

Each needs the caller to be allowed DESCRIBE (describe) or ALTER (create, delete)
on the cluster.  Without an authorizer Kafka answers SECURITY_DISABLED.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.security.authorizer import InvalidAclError, validate
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
_DISABLED = "No Authorizer is configured."


def _filter(entry: Any) -> AclBindingFilter:
    """A request's filter; ValueError (an enum's) for numbers Kafka does not define."""
    return AclBindingFilter(
        ResourceType(int(entry.resource_type_filter)),
        entry.resource_name_filter,
        PatternType(int(entry.pattern_type_filter)),
        entry.principal_filter,
        entry.host_filter,
        AclOperation(int(entry.operation)),
        AclPermissionType(int(entry.permission_type)),
    )


def _refusal(state: BrokerState, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    if state.authorizer is None:
        return ErrorCode.security_disabled, _DISABLED
    if not state.allowed(operation, ResourceType.CLUSTER, "kafka-cluster"):
        return ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    return None


async def handle_describe_acls(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    cls = response_class(DESCRIBE_ACLS, header.api_version)
    refused = _refusal(state, AclOperation.DESCRIBE)
    if refused is not None:
        return make(cls, throttle_time=NO_THROTTLE, error_code=refused[0], error_message=refused[1], resources=())
    try:
        acl_filter = _filter(request)
    except ValueError as exc:
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request, error_message=str(exc), resources=())
    assert state.authorizer is not None
    grouped: dict[tuple[int, str, int], list[AclBinding]] = {}
    for binding in state.authorizer.describe(acl_filter):
        key = (int(binding.resource_type), binding.resource_name, int(binding.pattern_type))
        grouped.setdefault(key, []).append(binding)
    resource_cls, acl_cls = nested(cls, "DescribeAclsResource"), nested(cls, "AclDescription")
    resources = tuple(
        resource_cls(
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            acls=tuple(
                acl_cls(principal=b.principal, host=b.host, operation=int(b.operation), permission_type=int(b.permission_type))
                for b in bindings
            ),
        )
        for (rtype, name, pattern), bindings in grouped.items()
    )
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, resources=resources)


async def handle_create_acls(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    cls = response_class(CREATE_ACLS, header.api_version)
    result_cls = nested(cls, "AclCreationResult")
    refused = _refusal(state, AclOperation.ALTER)
    if refused is not None:
        result = result_cls(error_code=refused[0], error_message=refused[1])
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(result for _ in request.creations))
    results = []
    accepted: list[AclBinding] = []
    for creation in request.creations:
        try:
            binding = AclBinding(
                ResourceType(int(creation.resource_type)),
                creation.resource_name,
                creation.principal,
                AclOperation(int(creation.operation)),
                AclPermissionType(int(creation.permission_type)),
                PatternType(int(creation.resource_pattern_type)),
                creation.host,
            )
            validate(binding)
        except (ValueError, InvalidAclError) as exc:
            results.append(result_cls(error_code=ErrorCode.invalid_request, error_message=str(exc)))
            continue
        accepted.append(binding)
        results.append(result_cls(error_code=ErrorCode.none, error_message=None))
    assert state.authorizer is not None
    state.authorizer.create(accepted)
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def handle_delete_acls(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    cls = response_class(DELETE_ACLS, header.api_version)
    result_cls, match_cls = nested(cls, "DeleteAclsFilterResult"), nested(cls, "DeleteAclsMatchingAcl")
    refused = _refusal(state, AclOperation.ALTER)
    if refused is not None:
        result = result_cls(error_code=refused[0], error_message=refused[1], matching_acls=())
        return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(result for _ in request.filters))
    assert state.authorizer is not None
    results = []
    for entry in request.filters:
        try:
            removed = state.authorizer.delete(_filter(entry))
        except ValueError as exc:
            results.append(result_cls(error_code=ErrorCode.invalid_request, error_message=str(exc), matching_acls=()))
            continue
        matches = tuple(
            match_cls(
                error_code=ErrorCode.none, error_message=None, resource_type=int(b.resource_type),
                resource_name=b.resource_name, pattern_type=int(b.pattern_type), principal=b.principal,
                host=b.host, operation=int(b.operation), permission_type=int(b.permission_type),
            )  # fmt: skip
            for b in removed
        )
        results.append(result_cls(error_code=ErrorCode.none, error_message=None, matching_acls=matches))
    return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(results))


HANDLERS = (
    ApiHandler(DESCRIBE_ACLS, 1, 3, handle_describe_acls),
    ApiHandler(CREATE_ACLS, 1, 3, handle_create_acls),
    ApiHandler(DELETE_ACLS, 1, 3, handle_delete_acls),
)
