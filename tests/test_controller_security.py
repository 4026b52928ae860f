"""ACLs and SCRAM credentials as cluster metadata: records, image, AclControlManager, ScramControlManager
and the controller's CreateAcls / DeleteAcls / AlterUserScramCredentials on a 3-voter quorum.

The quorum is tests/test_controller.py's: three RaftNodes with the controller's APIs on real
sockets in this event loop; requests go through a follower's ControllerChannel (which finds the
active controller) unless a test wants to see what an inactive one answers.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkakit.broker.controller.acl_control import AclControlManager
from kafkakit.broker.controller.scram_control import ScramControlManager, ScramDeletion, ScramUpsertion
from kafkakit.broker.metadata import (
    AccessControlEntryRecord,
    MetadataDelta,
    MetadataImage,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    decode,
    encode,
)
from kafkakit.broker.raft import RaftPeers
from kafkakit.broker.security.authorizer import InvalidAclError
from kafkakit.protocol.build import make_request
from kafkakit.security import scram
from kio.schema.errors import ErrorCode

from tests.test_controller import Cluster, settings

SHA256, SHA512 = 1, 2
ALICE_READS = AclBinding(ResourceType.TOPIC, "orders", "User:alice", AclOperation.READ)
BOB_WRITES = AclBinding(
    ResourceType.TOPIC, "pay-", "User:bob", AclOperation.WRITE, AclPermissionType.DENY, PatternType.PREFIXED, "10.0.0.1"
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    c = Cluster(tmp_path, settings())
    await c.start()
    try:
        yield c
    finally:
        await c.stop()


def upsertion(user: str, password: str, mechanism: int = SHA256, iterations: int = 4096, salt: bytes = b"salt") -> ScramUpsertion:
    name = scram.mechanism_by_type(mechanism).name if mechanism in (SHA256, SHA512) else "SCRAM-SHA-256"
    salted = scram.salted_password(name, password, salt, min(max(iterations, 4096), scram.MAX_ITERATIONS))
    return ScramUpsertion(user, mechanism, iterations, salt, salted)


def image_with(*records: Any) -> MetadataImage:
    image = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(record, offset)
    return image


# -- records and image ---------------------------------------------------------------------------


def test_the_four_records_round_trip_with_bytes_as_base64() -> None:
    acl_id = uuid.uuid4()
    records = [
        AccessControlEntryRecord(acl_id, 2, "orders", 3, "User:alice", "*", 3, 3),
        RemoveAccessControlEntryRecord(acl_id),
        UserScramCredentialRecord("alice", SHA512, b"\x00salt\xff", b"stored", b"server", 8192),
        RemoveUserScramCredentialRecord("alice", SHA512),
    ]
    for record in records:
        assert decode(encode(record)) == record
    assert b'"salt":"AHNhbHT/"' in encode(records[2])
    assert b"password" not in encode(records[2])


def test_the_image_holds_acls_by_id_and_credentials_by_user_and_mechanism() -> None:
    image = MetadataImage()
    first, second = uuid.uuid4(), uuid.uuid4()
    delta = image.apply(AccessControlEntryRecord(first, 2, "orders", 3, "User:alice", "*", 3, 3), 0)
    assert delta.changed_acls == {first} and delta
    image.apply(AccessControlEntryRecord(second, 2, "pay-", 4, "User:bob", "10.0.0.1", 4, 2), 1)
    assert image.security.acls == {first: ALICE_READS, second: BOB_WRITES}
    delta = image.apply(RemoveAccessControlEntryRecord(first), 2)
    assert delta.changed_acls == {first} and image.security.bindings() == {BOB_WRITES}
    assert not image.apply(RemoveAccessControlEntryRecord(first), 3)  # unknown id: nothing changes

    credential = scram.make_credential("SCRAM-SHA-256", "alice-secret", 4096, b"salt")
    delta = image.apply(UserScramCredentialRecord("alice", SHA256, b"salt", credential.stored_key, credential.server_key, 4096), 4)
    assert delta.changed_scram == {("alice", SHA256)}
    assert image.security.scram[("alice", SHA256)] == credential
    merged = MetadataDelta()
    merged.merge(delta)
    merged.merge(image.apply(RemoveUserScramCredentialRecord("alice", SHA256), 5))
    assert merged.changed_scram == {("alice", SHA256)} and not image.security.scram

    image.apply(UserScramCredentialRecord("bob", SHA512, b"s", b"k1", b"k2", 4096), 6)
    rebuilt = image_with(*image.to_records())
    assert rebuilt.security.acls == image.security.acls
    assert rebuilt.security.scram == image.security.scram


# -- AclControlManager ---------------------------------------------------------------------------


def test_create_acls_validates_like_kafka_and_writes_each_new_acl_once() -> None:
    existing = uuid.uuid4()
    image = image_with(AccessControlEntryRecord(existing, 2, "orders", 3, "User:alice", "*", 3, 3))
    ids = iter([existing, uuid.UUID(int=7), uuid.UUID(int=8)])  # the first id is taken: drawn again
    manager = AclControlManager(new_id=lambda: next(ids))
    bad = [
        AclBinding(ResourceType.ANY, "x", "User:a", AclOperation.READ),
        AclBinding(ResourceType.TOPIC, "x", "User:a", AclOperation.READ, pattern_type=PatternType.MATCH),
        AclBinding(ResourceType.TOPIC, "x", "User:a", AclOperation.ANY),
        AclBinding(ResourceType.TOPIC, "x", "User:a", AclOperation.READ, AclPermissionType.ANY),
        AclBinding(ResourceType.TOPIC, "", "User:a", AclOperation.READ),
        AclBinding(ResourceType.TOPIC, "x", "alice", AclOperation.READ),
        AclBinding(ResourceType.CLUSTER, "my-cluster", "User:a", AclOperation.ALTER),
        AclBinding(ResourceType.TOPIC, "x", "User:a", AclOperation.READ, host="not-an-ip"),
        InvalidAclError("99 is not a valid ResourceType"),
    ]
    results, records = manager.create_acls(image, [ALICE_READS, BOB_WRITES, BOB_WRITES, *bad])
    assert [r.error for r in results[:3]] == [ErrorCode.none] * 3
    assert all(r.error is ErrorCode.invalid_request and r.message for r in results[3:]), results
    assert results[3].message == "Invalid resourceType ANY"
    assert records == [AccessControlEntryRecord(uuid.UUID(int=7), 2, "pay-", 4, "User:bob", "10.0.0.1", 4, 2)]


def test_delete_acls_matches_filters_against_the_image_and_removes_each_acl_once() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    image = image_with(
        AccessControlEntryRecord(a, 2, "orders", 3, "User:alice", "*", 3, 3),
        AccessControlEntryRecord(b, 2, "pay-", 4, "User:bob", "10.0.0.1", 4, 2),
    )
    manager = AclControlManager()
    filters = [
        AclBindingFilter(ResourceType.TOPIC, "pay-now", PatternType.MATCH),  # the prefixed ACL applies to it
        AclBindingFilter(),  # everything
        AclBindingFilter(principal="User:carol"),
        AclBindingFilter(ResourceType.UNKNOWN),
        AclBindingFilter(operation=AclOperation.UNKNOWN),
        InvalidAclError("bad number"),
    ]
    results, records = manager.delete_acls(image, filters)
    assert results[0].deleted == [BOB_WRITES]
    assert sorted(results[1].deleted, key=str) == sorted([ALICE_READS, BOB_WRITES], key=str)
    assert results[2].deleted == [] and results[2].error is ErrorCode.none
    assert [(r.error, r.message) for r in results[3:5]] == [
        (ErrorCode.invalid_request, "Unknown patternFilter."),
        (ErrorCode.invalid_request, "Unknown entryFilter."),
    ]
    assert results[5].error is ErrorCode.invalid_request
    assert sorted(records, key=str) == sorted([RemoveAccessControlEntryRecord(a), RemoveAccessControlEntryRecord(b)], key=str)


# -- ScramControlManager ---------------------------------------------------------------------------


def test_alter_credentials_derives_the_keys_and_answers_kafkas_errors() -> None:
    stored = scram.make_credential("SCRAM-SHA-512", "old", 4096, b"s")
    image = image_with(UserScramCredentialRecord("carol", SHA512, b"s", stored.stored_key, stored.server_key, 4096))
    manager = ScramControlManager()
    results, records = manager.alter_credentials(
        image,
        [ScramDeletion("carol", SHA512), ScramDeletion("dave", SHA256), ScramDeletion("erin", SHA256),
         ScramDeletion("erin", SHA512)],
        [
            upsertion("alice", "alice-secret", SHA256, 8192, b"alice-salt"),
            upsertion("bob", "x", SHA256), upsertion("bob", "x", SHA512),  # one user twice: refused
            upsertion("", "x"),
            upsertion("frank", "x", mechanism=9),
            upsertion("gina", "x", iterations=4095),
            upsertion("hank", "x", iterations=16385),
            upsertion("carol", "new"),  # carol's deletion is in the same request
        ],
    )  # fmt: skip
    answers = {r.user: (r.error, r.message) for r in results}
    assert answers == {
        "alice": (ErrorCode.none, None),
        "carol": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        "dave": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "erin": (ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        "bob": (ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request"),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "frank": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "gina": (ErrorCode.unacceptable_credential, "Too few iterations"),
        "hank": (ErrorCode.unacceptable_credential, "Too many iterations"),
    }
    assert results[0].user == "alice"  # the applied changes first, then the errors
    expected = scram.make_credential("SCRAM-SHA-256", "alice-secret", 8192, b"alice-salt")
    assert records == [
        UserScramCredentialRecord("alice", SHA256, b"alice-salt", expected.stored_key, expected.server_key, 8192)
    ]

    results, records = manager.alter_credentials(image, [ScramDeletion("carol", SHA512)], [upsertion("bob", "x", SHA512)])
    assert [(r.user, r.error) for r in results] == [("carol", ErrorCode.none), ("bob", ErrorCode.none)]
    assert records[0] == RemoveUserScramCredentialRecord("carol", SHA512)


# -- the controller on the wire --------------------------------------------------------------------


def create_acls(*bindings: AclBinding, version: int = 3) -> Any:
    creations = [
        {
            "resource_type": int(b.resource_type), "resource_name": b.resource_name,
            "resource_pattern_type": int(b.pattern_type), "principal": b.principal, "host": b.host,
            "operation": int(b.operation), "permission_type": int(b.permission_type),
        }
        for b in bindings
    ]  # fmt: skip
    return make_request(30, version, creations=creations)


def delete_acls(*filters: AclBindingFilter, version: int = 3) -> Any:
    return make_request(31, version, filters=[f.to_request() for f in filters])


def alter_scram(deletions: list[tuple[str, int]], upsertions: list[ScramUpsertion]) -> Any:
    return make_request(
        51,
        0,
        deletions=[{"name": n, "mechanism": m} for n, m in deletions],
        upsertions=[
            {"name": u.user, "mechanism": u.mechanism, "iterations": u.iterations, "salt": u.salt,
             "salted_password": u.salted_password}
            for u in upsertions
        ],
    )  # fmt: skip


async def test_acls_created_and_deleted_through_any_node_reach_every_image(cluster: Cluster) -> None:
    for version in (1, 3):
        response = await cluster.send(create_acls(ALICE_READS, BOB_WRITES, version=version))
        assert [r.error_code for r in response.results] == [ErrorCode.none, ErrorCode.none]
        await cluster.everywhere(lambda image: image.security.bindings() == {ALICE_READS, BOB_WRITES})
    assert all(len(n.image.security.acls) == 2 for n in cluster.running())  # created once
    ids = {n.node_id: dict(n.image.security.acls) for n in cluster.running()}
    assert len({tuple(sorted(map(str, acls))) for acls in ids.values()}) == 1  # the same ids everywhere

    bad = create_acls(AclBinding(ResourceType.TOPIC, "t", "nobody", AclOperation.READ))
    result = (await cluster.send(bad)).results[0]
    assert result.error_code == ErrorCode.invalid_request and "principal" in result.error_message

    # A late publisher gets every ACL and credential named in its first delta.
    seen: list[MetadataDelta] = []
    (await cluster.follower()).loader.add_publisher(lambda image, delta: seen.append(delta))
    assert set(seen[0].changed_acls) == set(next(iter(ids.values())))

    response = await cluster.send(delete_acls(AclBindingFilter(principal="User:bob"), AclBindingFilter(), version=1))
    first, second = response.filter_results
    assert [(m.principal, m.resource_name, m.pattern_type) for m in first.matching_acls] == [("User:bob", "pay-", 4)]
    assert len(second.matching_acls) == 2
    await cluster.everywhere(lambda image: not image.security.acls)


async def test_scram_credentials_altered_through_any_node_reach_every_image(cluster: Cluster) -> None:
    alice = upsertion("alice", "alice-secret", SHA512, 8192, b"alice-salt")
    response = await cluster.send(alter_scram([], [alice, upsertion("bob", "b", SHA256)]))
    assert [(r.user, r.error_code) for r in response.results] == [("alice", ErrorCode.none), ("bob", ErrorCode.none)]
    expected = scram.make_credential("SCRAM-SHA-512", "alice-secret", 8192, b"alice-salt")
    await cluster.everywhere(lambda image: image.security.scram.get(("alice", SHA512)) == expected)

    response = await cluster.send(alter_scram([("bob", SHA256), ("alice", SHA256)], []))
    answers = {r.user: ErrorCode(r.error_code) for r in response.results}
    assert answers == {"bob": ErrorCode.none, "alice": ErrorCode.resource_not_found}
    await cluster.everywhere(lambda image: set(image.security.scram) == {("alice", SHA512)})


async def test_an_inactive_controller_answers_not_controller_in_each_result(cluster: Cluster) -> None:
    follower = await cluster.follower()
    peers = RaftPeers(cluster.voters)
    try:
        created = await peers.send(follower.node_id, create_acls(ALICE_READS), 5.0)
        deleted = await peers.send(follower.node_id, delete_acls(AclBindingFilter()), 5.0)
        altered = await peers.send(follower.node_id, alter_scram([], [upsertion("alice", "a")]), 5.0)
    finally:
        await peers.close()
    assert created.results[0].error_code == ErrorCode.not_controller
    assert deleted.filter_results[0].error_code == ErrorCode.not_controller
    assert [(r.user, r.error_code) for r in altered.results] == [("alice", ErrorCode.not_controller)]
    assert not follower.image.security.acls and not follower.image.security.scram
