"""DescribeUserScramCredentials (key 50) and AlterUserScramCredentials (51), v0.

Describe needs DESCRIBE on the cluster, alter needs ALTER.  Alter carries the
salted password (never the password); the broker derives and stores StoredKey
and ServerKey from it, as Kafka does.

In cluster mode credentials are cluster metadata: after checking ALTER on the cluster the
broker forwards AlterUserScramCredentials to the active controller (which validates it as
Kafka's ScramControlManager does and writes the credential records) and waits, a few seconds
at most, until the changes are in its own image, and so in its credential store, before
answering. Describe reads the local store, which the metadata publisher keeps equal to the image.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.acls import AclOperation, ResourceType
from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.broker.metadata import MetadataImage
from kafkakit.broker.security.metadata_publisher import wait_for_image
from kafkakit.protocol import RequestHeaderInfo, response_class
from kafkakit.security import scram
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
_CLUSTER = "kafka-cluster"
#: Seconds a forwarding broker waits for the controller's change to reach its own image.
_PROPAGATION_WAIT = 5.0
#: Seconds a forwarded request may wait for the active controller.
_FORWARD_TIMEOUT = 30.0


async def handle_describe(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    cls = response_class(DESCRIBE_USER_SCRAM_CREDENTIALS, header.api_version)
    if not state.allowed(AclOperation.DESCRIBE, ResourceType.CLUSTER, _CLUSTER):
        return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.cluster_authorization_failed,
                    error_message="Cluster authorization failed.", results=())  # fmt: skip
    result_cls, info_cls = nested(cls, "DescribeUserScramCredentialsResult"), nested(cls, "CredentialInfo")
    store = state.scram_credentials
    asked = None if request.users is None else [u.name for u in request.users]
    names = store.users() if not asked else asked
    duplicates = {name for name in names if names.count(name) > 1}
    results = []
    for name in dict.fromkeys(names):
        if name in duplicates:
            results.append(result_cls(user=name, error_code=ErrorCode.duplicate_resource,
                                      error_message=f"Cannot describe SCRAM credentials for the same user twice in a single request: {name}",
                                      credential_infos=()))  # fmt: skip
            continue
        infos = store.describe(name)
        if not infos:
            results.append(result_cls(user=name, error_code=ErrorCode.resource_not_found,
                                      error_message=f"Attempt to describe a user credential that does not exist: {name}",
                                      credential_infos=()))  # fmt: skip
            continue
        results.append(result_cls(
            user=name, error_code=ErrorCode.none, error_message=None,
            credential_infos=tuple(info_cls(mechanism=scram.mechanism(m).type, iterations=i) for m, i in infos),
        ))  # fmt: skip
    return make(cls, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None, results=tuple(results))


async def handle_alter(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    cls = response_class(ALTER_USER_SCRAM_CREDENTIALS, header.api_version)
    result_cls = nested(cls, "AlterUserScramCredentialsResult")
    users = [d.name for d in request.deletions] + [u.name for u in request.upsertions]
    if not state.allowed(AclOperation.ALTER, ResourceType.CLUSTER, _CLUSTER):
        results = tuple(result_cls(user=name, error_code=ErrorCode.cluster_authorization_failed,
                                   error_message="Cluster authorization failed.") for name in dict.fromkeys(users))  # fmt: skip
        return make(cls, throttle_time=NO_THROTTLE, results=results)
    if state.controller_channel is not None:
        return make(cls, throttle_time=NO_THROTTLE, results=await _forward_alter(state, request, result_cls, users))
    errors: dict[str, tuple[ErrorCode, str]] = {}
    seen: set[tuple[str, int]] = set()
    for item in (*request.deletions, *request.upsertions):
        key = (item.name, int(item.mechanism))
        if key in seen:
            errors.setdefault(item.name, (ErrorCode.duplicate_resource,
                              "A user credential cannot be altered twice in the same request"))  # fmt: skip
        seen.add(key)
        if not item.name:
            errors.setdefault(item.name, (ErrorCode.unacceptable_credential, "Username must not be empty"))
        try:
            scram.mechanism_by_type(int(item.mechanism))
        except ValueError:
            errors.setdefault(item.name, (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"))
    store = state.scram_credentials
    for deletion in request.deletions:
        if deletion.name in errors:
            continue
        mechanism = scram.mechanism_by_type(int(deletion.mechanism)).name
        if store.lookup(mechanism, deletion.name) is None:
            errors[deletion.name] = (ErrorCode.resource_not_found,
                                     "Attempt to delete a user credential that does not exist")  # fmt: skip
    for upsertion in request.upsertions:
        if upsertion.name in errors:
            continue
        info = scram.mechanism_by_type(int(upsertion.mechanism))
        if not info.min_iterations <= int(upsertion.iterations) <= scram.MAX_ITERATIONS:
            errors[upsertion.name] = (ErrorCode.unacceptable_credential,
                                      f"Iterations must be between {info.min_iterations} and {scram.MAX_ITERATIONS}")  # fmt: skip
    for deletion in request.deletions:
        if deletion.name not in errors:
            store.delete(deletion.name, scram.mechanism_by_type(int(deletion.mechanism)).name)
    for upsertion in request.upsertions:
        if upsertion.name not in errors:
            name = scram.mechanism_by_type(int(upsertion.mechanism)).name
            credential = scram.credential_from_salted_password(
                name, bytes(upsertion.salted_password), bytes(upsertion.salt), int(upsertion.iterations)
            )
            store.upsert(upsertion.name, name, credential)
    results = tuple(
        result_cls(user=name, error_code=errors.get(name, (ErrorCode.none, None))[0],
                   error_message=errors.get(name, (ErrorCode.none, None))[1])  # fmt: skip
        for name in dict.fromkeys(users)
    )
    return make(cls, throttle_time=NO_THROTTLE, results=results)


async def _forward_alter(state: BrokerState, request: Any, result_cls: type, users: list[str]) -> tuple[Any, ...]:
    """Cluster mode: the controller applies the request; its answers, once this node's image has the changes."""
    channel = state.controller_channel
    assert channel is not None
    try:
        answer = await channel.send(request, _FORWARD_TIMEOUT)
    except (TimeoutError, ConnectionError) as exc:
        return tuple(result_cls(user=name, error_code=ErrorCode.request_timed_out, error_message=f"controller: {exc!r}")
                     for name in dict.fromkeys(users))  # fmt: skip
    applied = {r.user for r in answer.results if r.error_code == ErrorCode.none}
    deleted = {(d.name, int(d.mechanism)) for d in request.deletions if d.name in applied}
    upserted = {(u.name, int(u.mechanism)): bytes(u.salt) for u in request.upsertions if u.name in applied}

    def arrived(image: MetadataImage) -> bool:
        credentials = image.security.scram
        if any(key in credentials for key in deleted):
            return False
        return all((c := credentials.get(key)) is not None and c.salt == salt for key, salt in upserted.items())

    if deleted or upserted:
        await wait_for_image(state, arrived, _PROPAGATION_WAIT)
    return tuple(answer.results)


HANDLERS = (
    ApiHandler(DESCRIBE_USER_SCRAM_CREDENTIALS, 0, 0, handle_describe),
    ApiHandler(ALTER_USER_SCRAM_CREDENTIALS, 0, 0, handle_alter),
)
