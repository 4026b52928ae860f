"""DescribeAcls (key 29), CreateAcls (30) and DeleteAcls (31), v1-3.

Each needs the caller to be allowed DESCRIBE (describe) or ALTER (create, delete)
on the cluster.  Without an authorizer Kafka answers SECURITY_DISABLED.

In cluster mode ACLs are cluster metadata: after its own checks (authorization, and each
creation or filter parsed and validated) the broker forwards CreateAcls and DeleteAcls, in
the client's version, to the active controller, which writes the ACL records; the broker then
waits (a few seconds at most) until the change is in its own image, and so in its
authorizer, before answering. DescribeAcls reads the local authorizer, which the metadata
publisher keeps equal to the image.
"""

from __future__ import annotations

import dataclasses
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
from kafkakit.broker.security.metadata_publisher import wait_for_image
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
_DISABLED = "No Authorizer is configured."
#: Seconds a forwarding broker waits for the controller's ACL change to reach its own image.
_PROPAGATION_WAIT = 5.0
#: Seconds a forwarded request may wait for the active controller.
_FORWARD_TIMEOUT = 30.0


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
    results: list[Any] = []
    accepted: list[AclBinding] = []
    forwarded: list[tuple[int, Any, AclBinding]] = []
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
        if state.controller_channel is not None:
            forwarded.append((len(results), creation, binding))
            results.append(None)
            continue
        accepted.append(binding)
        results.append(result_cls(error_code=ErrorCode.none, error_message=None))
    if state.controller_channel is not None:
        if forwarded:
            await _forward_creations(state, request, forwarded, results, result_cls)
        return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))
    assert state.authorizer is not None
    state.authorizer.create(accepted)
    return make(cls, throttle_time=NO_THROTTLE, results=tuple(results))


async def _forward_creations(
    state: BrokerState, request: Any, forwarded: list[tuple[int, Any, AclBinding]], results: list[Any], result_cls: type
) -> None:
    """Cluster mode: the controller creates the ``forwarded`` ACLs; its answers go to their places in ``results``."""
    channel = state.controller_channel
    assert channel is not None
    subset = dataclasses.replace(request, creations=tuple(creation for _, creation, _ in forwarded))
    try:
        answer = await channel.send(subset, _FORWARD_TIMEOUT)
    except (TimeoutError, ConnectionError) as exc:
        for index, _, _ in forwarded:
            results[index] = result_cls(error_code=ErrorCode.request_timed_out, error_message=f"controller: {exc!r}")
        return
    created = set()
    for (index, _, binding), result in zip(forwarded, answer.results, strict=True):
        results[index] = result
        if result.error_code == ErrorCode.none:
            created.add(binding)
    if created:
        await wait_for_image(state, lambda image: created <= image.security.bindings(), _PROPAGATION_WAIT)


async def handle_delete_acls(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    cls = response_class(DELETE_ACLS, header.api_version)
    result_cls, match_cls = nested(cls, "DeleteAclsFilterResult"), nested(cls, "DeleteAclsMatchingAcl")
    refused = _refusal(state, AclOperation.ALTER)
    if refused is not None:
        result = result_cls(error_code=refused[0], error_message=refused[1], matching_acls=())
        return make(cls, throttle_time=NO_THROTTLE, filter_results=tuple(result for _ in request.filters))
    assert state.authorizer is not None
    if state.controller_channel is not None:
        return make(cls, throttle_time=NO_THROTTLE, filter_results=await _forward_deletions(state, request, result_cls))
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


async def _forward_deletions(state: BrokerState, request: Any, result_cls: type) -> tuple[Any, ...]:
    """Cluster mode: the controller deletes what the request's filters match; one result per filter."""
    channel = state.controller_channel
    assert channel is not None
    results: list[Any] = []
    forwarded: list[tuple[int, Any]] = []
    for entry in request.filters:
        try:
            _filter(entry)
        except ValueError as exc:
            results.append(result_cls(error_code=ErrorCode.invalid_request, error_message=str(exc), matching_acls=()))
            continue
        forwarded.append((len(results), entry))
        results.append(None)
    if not forwarded:
        return tuple(results)
    subset = dataclasses.replace(request, filters=tuple(entry for _, entry in forwarded))
    try:
        answer = await channel.send(subset, _FORWARD_TIMEOUT)
    except (TimeoutError, ConnectionError) as exc:
        failed = result_cls(error_code=ErrorCode.request_timed_out, error_message=f"controller: {exc!r}", matching_acls=())
        return tuple(failed if r is None else r for r in results)
    gone: set[AclBinding] = set()
    for (index, _), result in zip(forwarded, answer.filter_results, strict=True):
        results[index] = result
        for m in result.matching_acls:
            gone.add(AclBinding(
                ResourceType(int(m.resource_type)), m.resource_name, m.principal, AclOperation(int(m.operation)),
                AclPermissionType(int(m.permission_type)), PatternType(int(m.pattern_type)), m.host,
            ))  # fmt: skip
    if gone:
        await wait_for_image(state, lambda image: not gone & image.security.bindings(), _PROPAGATION_WAIT)
    return tuple(results)


HANDLERS = (
    ApiHandler(DESCRIBE_ACLS, 1, 3, handle_describe_acls),
    ApiHandler(CREATE_ACLS, 1, 3, handle_create_acls),
    ApiHandler(DELETE_ACLS, 1, 3, handle_delete_acls),
)
