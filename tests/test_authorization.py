"""ACLs end to end, on broker_min and Apache Kafka with the same settings (tests/security_env.py).

``admin`` is a super user; ``alice`` and ``bob`` may do only what a test grants.
Every refusal must arrive as its typed error within a bounded time, not retried.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from kafkakit.errors import (
    AuthorizationError,
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
)

from tests.security_env import SecureBroker, SecureBrokerMin, client_config

FAST = 15.0  # seconds within which a refusal must surface


def _as(broker: SecureBroker, user: str) -> dict[str, Any]:
    return client_config(broker, "SASL_SSL", "SCRAM-SHA-256", user=user)


async def _setup(broker: SecureBroker, topic: str, *acls: AclBinding) -> None:
    async with Admin(**_as(broker, "admin")) as admin:
        await admin.create_topics([NewTopic(topic, num_partitions=1)])
        if acls:
            await admin.create_acls(list(acls))


async def _eventually(check: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> Any:
    """Retry ``check`` until it succeeds: Kafka applies new ACLs asynchronously."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await check()
        except AuthorizationError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.3)


def _allow(rtype: ResourceType, name: str, operation: AclOperation, user: str = "alice", **kw: Any) -> AclBinding:
    return AclBinding(rtype, name, f"User:{user}", operation, **kw)


async def _produce(broker: SecureBroker, user: str, topic: str, **kw: Any) -> int:
    async with Producer(**_as(broker, user), **kw) as producer:
        return (await producer.send_and_wait(topic, b"v", partition=0)).offset


async def test_produce_needs_write_and_is_refused_fast(secure_broker: SecureBroker, topic: str) -> None:
    await _setup(secure_broker, topic)
    started = time.monotonic()
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(secure_broker, "alice", topic)
    assert time.monotonic() - started < FAST
    async with Admin(**_as(secure_broker, "admin")) as admin:
        await admin.create_acls([_allow(ResourceType.TOPIC, topic, AclOperation.WRITE)])
    assert await _eventually(lambda: _produce(secure_broker, "alice", topic)) == 0


async def test_consume_needs_read(secure_broker: SecureBroker, topic: str) -> None:
    await _setup(secure_broker, topic, _allow(ResourceType.TOPIC, topic, AclOperation.WRITE))
    await _eventually(lambda: _produce(secure_broker, "alice", topic))

    async def consume() -> list[bytes]:
        async with Consumer(auto_offset_reset="earliest", **_as(secure_broker, "alice")) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                if batches:
                    return [r.value for records in batches.values() for r in records]
        return []

    started = time.monotonic()
    with pytest.raises(TopicAuthorizationFailedError):
        await consume()
    assert time.monotonic() - started < FAST
    async with Admin(**_as(secure_broker, "admin")) as admin:
        await admin.create_acls([_allow(ResourceType.TOPIC, topic, AclOperation.READ)])
    assert await _eventually(consume) == [b"v"]


async def test_prefixed_acl_and_deny_wins(secure_broker: SecureBroker) -> None:
    prefix = f"pfx-{uuid.uuid4().hex[:6]}-"
    topic, forbidden = prefix + "orders", prefix + "secret"
    await _setup(secure_broker, topic)
    await _setup(secure_broker, forbidden,
                 _allow(ResourceType.TOPIC, prefix, AclOperation.WRITE, pattern_type=PatternType.PREFIXED),
                 _allow(ResourceType.TOPIC, forbidden, AclOperation.WRITE, permission_type=AclPermissionType.DENY))  # fmt: skip
    assert await _eventually(lambda: _produce(secure_broker, "alice", topic)) == 0
    with pytest.raises(TopicAuthorizationFailedError):
        await _produce(secure_broker, "alice", forbidden)


async def test_listing_hides_topics_the_principal_may_not_describe(secure_broker: SecureBroker) -> None:
    visible, hidden = f"vis-{uuid.uuid4().hex[:8]}", f"hid-{uuid.uuid4().hex[:8]}"
    await _setup(secure_broker, hidden)
    await _setup(secure_broker, visible, _allow(ResourceType.TOPIC, visible, AclOperation.DESCRIBE, user="bob"))

    async def listed() -> set[str]:
        async with Admin(**_as(secure_broker, "bob")) as admin:
            names = await admin.list_topics()
        if visible not in names:
            raise TopicAuthorizationFailedError("not yet visible")
        return names

    names = await _eventually(listed)
    assert visible in names and hidden not in names


async def test_create_topics_needs_create(secure_broker: SecureBroker) -> None:
    name = f"new-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    with pytest.raises(TopicAuthorizationFailedError):
        async with Admin(**_as(secure_broker, "bob")) as admin:
            await admin.create_topics([NewTopic(name, num_partitions=1)])
    assert time.monotonic() - started < FAST
    async with Admin(**_as(secure_broker, "admin")) as admin:
        await admin.create_acls([
            _allow(ResourceType.CLUSTER, "kafka-cluster", AclOperation.CREATE, user="bob"),
            # Creating a topic grants nothing on it: Admin waits to see it, which needs DESCRIBE.
            _allow(ResourceType.TOPIC, name, AclOperation.DESCRIBE, user="bob"),
        ])  # fmt: skip

    async def create() -> None:
        async with Admin(**_as(secure_broker, "bob")) as admin:
            await admin.create_topics([NewTopic(name, num_partitions=1)])

    await _eventually(create)


async def test_group_needs_read_on_the_group(secure_broker: SecureBroker, topic: str) -> None:
    group = f"grp-{uuid.uuid4().hex[:8]}"
    await _setup(secure_broker, topic, _allow(ResourceType.TOPIC, topic, AclOperation.ALL))
    await _eventually(lambda: _produce(secure_broker, "alice", topic))

    async def consume_in_group() -> int:
        config = _as(secure_broker, "alice")
        async with Consumer(topic, group_id=group, auto_offset_reset="earliest", **config) as consumer:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                if await consumer.getmany(timeout_ms=500):
                    await consumer.commit()
                    return await consumer.committed(TopicPartition(topic, 0)) or 0
        return -1

    started = time.monotonic()
    with pytest.raises(GroupAuthorizationFailedError):
        await consume_in_group()
    assert time.monotonic() - started < FAST
    async with Admin(**_as(secure_broker, "admin")) as admin:
        await admin.create_acls([_allow(ResourceType.GROUP, group, AclOperation.READ)])
    assert await _eventually(consume_in_group) == 1


async def test_transactions_need_write_on_the_transactional_id(secure_broker: SecureBroker, topic: str) -> None:
    txn_id = f"txn-{uuid.uuid4().hex[:8]}"
    await _setup(secure_broker, topic, _allow(ResourceType.TOPIC, topic, AclOperation.WRITE))

    async def transact() -> None:
        async with Producer(transactional_id=txn_id, **_as(secure_broker, "alice")) as producer:
            await producer.init_transactions()
            async with producer.transaction():
                await producer.send(topic, b"in-txn", partition=0)

    started = time.monotonic()
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        await transact()
    assert time.monotonic() - started < FAST
    async with Admin(**_as(secure_broker, "admin")) as admin:
        await admin.create_acls([_allow(ResourceType.TRANSACTIONAL_ID, txn_id, AclOperation.WRITE)])
    await _eventually(transact)


async def test_a_principal_without_rights_cannot_produce(secure_broker: SecureBroker, topic: str) -> None:
    """bob has no ACL at all: Kafka and broker_min refuse him with the same error."""
    await _setup(secure_broker, topic)
    started = time.monotonic()
    with pytest.raises((TopicAuthorizationFailedError, ClusterAuthorizationFailedError)) as caught:
        await _produce(secure_broker, "bob", topic)
    assert time.monotonic() - started < FAST
    assert isinstance(caught.value, TopicAuthorizationFailedError)  # metadata is asked for first


async def test_acl_admin_needs_alter_on_the_cluster_and_round_trips(secure_broker: SecureBroker) -> None:
    name = f"acl-{uuid.uuid4().hex[:8]}"
    binding = _allow(ResourceType.GROUP, name, AclOperation.READ, user="bob")
    with pytest.raises(ClusterAuthorizationFailedError):
        async with Admin(**_as(secure_broker, "alice")) as admin:
            await admin.create_acls([binding])
    async with Admin(**_as(secure_broker, "admin")) as admin:
        await admin.create_acls([binding])
        found = await _eventually_listed(admin, AclBindingFilter(resource_type=ResourceType.GROUP, resource_name=name))
        assert found == [binding]
        deleted = await admin.delete_acls([AclBindingFilter(resource_type=ResourceType.GROUP, resource_name=name)])
        assert deleted == [binding]


async def _eventually_listed(admin: Admin, acl_filter: AclBindingFilter) -> list[AclBinding]:
    deadline = time.monotonic() + 10
    while True:
        found = await admin.describe_acls(acl_filter)
        if found or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.3)


async def test_broker_min_keeps_acls_and_credentials_across_restarts(tmp_path: Path, pki: Any) -> None:
    binding = _allow(ResourceType.TOPIC, "kept", AclOperation.READ)
    broker = SecureBrokerMin(tmp_path / "data", pki)
    broker.start()
    try:
        async with Admin(**_as(broker, "admin")) as admin:
            await admin.create_acls([binding])
    finally:
        broker.stop()
    again = SecureBrokerMin(tmp_path / "data", pki)
    again.start()
    try:
        async with Admin(**_as(again, "alice")) as alice_admin:  # her SCRAM credential survived too
            assert (await alice_admin.describe_cluster()).brokers
        async with Admin(**_as(again, "admin")) as admin:
            assert await admin.describe_acls(AclBindingFilter(resource_name="kept")) == [binding]
    finally:
        again.stop()


async def _raw_login(broker: SecureBroker, user: str) -> Any:
    """A raw connection authenticated with PLAIN on SASL_PLAINTEXT, for APIs kafkakit's Admin lacks."""
    from kafkakit.protocol import ApiKey
    from kafkakit.security.plain import client_message

    from tests.brokers import split_address
    from tests.raw_protocol import RawClient, req
    from tests.security_env import USERS

    host, port = split_address(broker.listener("SASL_PLAINTEXT"))
    client = RawClient(*await asyncio.open_connection(host, port))
    assert (await client.call(req(ApiKey.SASL_HANDSHAKE, 1, mechanism="PLAIN"))).error_code == 0
    answer = await client.call(req(ApiKey.SASL_AUTHENTICATE, 2, auth_bytes=client_message(user, USERS[user])))
    assert answer.error_code == 0
    return client


async def test_transaction_and_producer_descriptions_are_authorized(secure_broker: SecureBroker, topic: str) -> None:
    from kafkakit.protocol import ApiKey

    from tests.raw_protocol import req, sub

    await _setup(secure_broker, topic)
    txn_id = f"desc-{uuid.uuid4().hex[:8]}"
    for user, expected in (("alice", 53), ("admin", 105)):  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED, _NOT_FOUND
        client = await _raw_login(secure_broker, user)
        try:
            deadline = time.monotonic() + 15
            while True:  # a fresh Kafka creates __transaction_state on first use: wait for its coordinator
                described = await client.call(req(ApiKey.DESCRIBE_TRANSACTIONS, 0, transactional_ids=(txn_id,)))
                codes = [int(t.error_code) for t in described.transaction_states]
                if codes not in ([14], [15], [16]) or time.monotonic() > deadline:
                    break
                await client.call(req(ApiKey.FIND_COORDINATOR, 4, key_type=1, coordinator_keys=(txn_id,)))
                await asyncio.sleep(0.3)
            assert codes == [expected]
            producers = await client.call(req(ApiKey.DESCRIBE_PRODUCERS, 0, topics=(
                sub(ApiKey.DESCRIBE_PRODUCERS, 0, "TopicRequest", name=topic, partition_indexes=(0,)),)))  # fmt: skip
            code = int(producers.topics[0].partitions[0].error_code)
            assert code == (29 if user == "alice" else 0)
        finally:
            client.close()
