"""ACLs and SCRAM credentials in a 3-node broker_min cluster are cluster metadata, not one node's files.

Three ``python -m kafkakit.broker`` processes (a :class:`LocalCluster` with one more listener
per node, ``SASL_PLAINTEXT`` for SCRAM logins; replication, the quorum and the harness stay on
PLAINTEXT, whose ``User:ANONYMOUS`` is a super user), the StandardAuthorizer on with no
allow-if-no-ACL. Each request below goes to one chosen node (a kafkakit BrokerConnection to
that node's listener), so "created on node 1, used on node 3" means exactly that.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, NewTopic
from kafkakit.acls import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    ResourceType,
    UserScramCredentialUpsertion,
    binding_from,
    creation,
)
from kafkakit.broker import LocalCluster
from kafkakit.broker.ports import free_ports
from kafkakit.errors import KafkaError
from kafkakit.net.connection import BrokerConnection
from kafkakit.net.security import SecurityConfig
from kafkakit.protocol import ApiKey
from kio.schema.errors import ErrorCode

from tests.brokers import split_address

pytestmark = [pytest.mark.timeout(240)]

TOPIC = "secured"
ALICE_READS = AclBinding(ResourceType.TOPIC, TOPIC, "User:alice", AclOperation.READ)
BOOT = ("boot", "boot-secret")
SETTINGS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:admin;User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "false",
    "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
    "inter.broker.listener.name": "PLAINTEXT",
    "metadata.snapshot.records": "6",  # snapshots are taken (and replayed at the restart) on the way
}


class SecureCluster(LocalCluster):
    """A LocalCluster whose nodes also listen on SASL_PLAINTEXT; ``add_scram``: node -> --add-scram specs."""

    def __init__(self, data_dir: Path, add_scram: dict[int, list[str]], config: dict[str, str] | None = None) -> None:
        super().__init__(3, data_dir, config={**SETTINGS, **(config or {})})
        self.sasl_ports = dict(zip(self.node_ids, free_ports(len(self.node_ids)), strict=True))
        self.add_scram = add_scram

    def sasl_address(self, node_id: int) -> str:
        return f"{self.host}:{self.sasl_ports[node_id]}"

    def _command(self, node: Any) -> list[str]:
        command = super()._command(node)
        index = next(i for i, arg in enumerate(command) if arg.startswith("listeners="))
        command[index] += f",SASL_PLAINTEXT://{self.host}:{self.sasl_ports[node.node_id]}"
        for spec in self.add_scram.get(node.node_id, []):
            command += ["--add-scram", spec]
        return command


async def _call(address: str, api_key: int, security: SecurityConfig | None = None, **fields: Any) -> Any:
    """One request to the broker at ``address`` (PLAINTEXT, i.e. User:ANONYMOUS, unless ``security``)."""
    host, port = split_address(address)
    conn = BrokerConnection(host, port, security=security or SecurityConfig())
    await conn.connect()
    try:
        return await conn.call(api_key, **fields)
    finally:
        await conn.close()


def _scram(user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> SecurityConfig:
    return SecurityConfig(security_protocol="SASL_PLAINTEXT", sasl_mechanism=mechanism, sasl_plain_username=user,
                          sasl_plain_password=password)  # fmt: skip


async def _topic_error(cluster: SecureCluster, node_id: int, user: str, password: str) -> ErrorCode:
    """What node ``node_id`` answers ``user`` (logged in with SCRAM there) about TOPIC in Metadata."""
    response = await _call(
        cluster.sasl_address(node_id), ApiKey.METADATA, _scram(user, password),
        topics=[{"name": TOPIC, "topic_id": uuid.UUID(int=0)}], allow_auto_topic_creation=False,
        include_cluster_authorized_operations=False, include_topic_authorized_operations=False,
    )  # fmt: skip
    return ErrorCode(int(response.topics[0].error_code))


async def _eventually(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 15.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while loop.time() < deadline:
        try:
            if await check():
                return
            last = "not yet"
        except (KafkaError, OSError) as exc:
            last = exc
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


async def _described(cluster: SecureCluster, node_id: int) -> set[AclBinding]:
    """The ACLs node ``node_id``'s authorizer holds (DescribeAcls there)."""
    response = await _call(cluster.address(node_id), ApiKey.DESCRIBE_ACLS, **AclBindingFilter().to_request())
    assert response.error_code == ErrorCode.none, response
    return {
        binding_from(int(r.resource_type), r.resource_name, int(r.pattern_type), acl)
        for r in response.resources
        for acl in r.acls
    }


async def test_users_and_acls_are_cluster_wide_and_survive_a_whole_cluster_restart(tmp_path: Path) -> None:
    spec = f"SCRAM-SHA-512=[name={BOOT[0]},password={BOOT[1]}]"
    cluster = SecureCluster(tmp_path, add_scram={2: [spec]})
    async with cluster:
        # --add-scram on node 2 reaches the controller, then every node: boot logs in on node 3.
        await _eventually(lambda: _logs_in(cluster, 3, *BOOT, "SCRAM-SHA-512"), "node 2's --add-scram user on node 3")

        # A SCRAM user created through node 1 logs in on node 3 (and node 1 had it when it answered).
        upsert = UserScramCredentialUpsertion("alice", "SCRAM-SHA-256", "alice-secret", 8192).to_request()
        answer = await _call(cluster.address(1), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, deletions=[], upsertions=[upsert])
        assert [(r.user, r.error_code) for r in answer.results] == [("alice", ErrorCode.none)]
        assert await _logs_in(cluster, 1, "alice", "alice-secret")
        await _eventually(lambda: _logs_in(cluster, 3, "alice", "alice-secret"), "alice's login on node 3")
        assert not await _logs_in(cluster, 3, "alice", "wrong")
        # The controller's errors come back through the forwarding node.
        missing = await _call(cluster.address(3), ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                              deletions=[{"name": "nobody", "mechanism": 1}], upsertions=[])  # fmt: skip
        assert missing.results[0].error_code == ErrorCode.resource_not_found

        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(TOPIC, 1, 3)])
        for node_id in (1, 3):
            assert await _topic_error(cluster, node_id, "alice", "alice-secret") is ErrorCode.topic_authorization_failed

        # alice may not create ACLs (the forwarding broker checks ALTER on the cluster itself).
        refused = await _call(cluster.sasl_address(3), ApiKey.CREATE_ACLS, _scram("alice", "alice-secret"),
                              creations=[creation(ALICE_READS)])  # fmt: skip
        assert refused.results[0].error_code == ErrorCode.cluster_authorization_failed

        # An ACL created through node 2 is enforced on nodes 1 and 3.
        created = await _call(cluster.address(2), ApiKey.CREATE_ACLS, creations=[creation(ALICE_READS)])
        assert created.results[0].error_code == ErrorCode.none
        assert ALICE_READS in await _described(cluster, 2)
        for node_id in (1, 3):
            await _eventually(
                lambda n=node_id: _is(_topic_error(cluster, n, "alice", "alice-secret"), ErrorCode.none),
                f"alice's READ on node {node_id}",
            )
            assert ALICE_READS in await _described(cluster, node_id)

        # Deleted through node 3: gone everywhere.
        deleted = await _call(cluster.address(3), ApiKey.DELETE_ACLS,
                              filters=[AclBindingFilter(principal="User:alice").to_request()])  # fmt: skip
        assert [m.principal for m in deleted.filter_results[0].matching_acls] == ["User:alice"]
        assert await _topic_error(cluster, 3, "alice", "alice-secret") is ErrorCode.topic_authorization_failed
        await _eventually(
            lambda: _is(_topic_error(cluster, 1, "alice", "alice-secret"), ErrorCode.topic_authorization_failed),
            "the deletion on node 1",
        )

        # What should survive the restart: the ACL again, a second user, a second ACL.
        kept = AclBinding(ResourceType.TOPIC, "audit-", "User:bob", AclOperation.WRITE, pattern_type=PatternType.PREFIXED)
        await _call(cluster.address(1), ApiKey.CREATE_ACLS, creations=[creation(ALICE_READS), creation(kept)])
        bob = UserScramCredentialUpsertion("bob", "SCRAM-SHA-512", "bob-secret").to_request()
        await _call(cluster.address(2), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, deletions=[], upsertions=[bob])
        snapshots = [p for n in cluster.node_ids for p in (tmp_path / f"node-{n}").rglob("*.checkpoint")]
        assert snapshots, "no metadata snapshot was written"

        for node_id in cluster.node_ids:
            await cluster.stop(node_id)
        for node_id in cluster.node_ids:
            await cluster.start_node(node_id, wait=False)
        await cluster.wait_ready()
        for node_id in cluster.node_ids:
            await _eventually(
                lambda n=node_id: _is(_topic_error(cluster, n, "alice", "alice-secret"), ErrorCode.none),
                f"alice's login and READ on node {node_id} after the restart",
            )
            assert await _logs_in(cluster, node_id, "bob", "bob-secret", "SCRAM-SHA-512")
            assert await _described(cluster, node_id) == {ALICE_READS, kept}
        # The ACLs live in the metadata log, not in the nodes' own security files.
        assert not list(tmp_path.rglob("acls.json"))


async def test_a_restarted_node_answers_nothing_before_its_metadata_has_caught_up(tmp_path: Path) -> None:
    """The first answers of every node after a whole-cluster restart already reflect the last records.

    A node replays its metadata snapshot at start and the log after it only once the quorum has
    a leader again: in between, its image is an old prefix (here: dave can log in, carol may
    read, zed does not exist). Each node is asked the moment its SASL port accepts connections,
    once per question, with no retry: it must hold those requests until it has caught up with the
    log (before the fix it answered them from the snapshot, or closed the connection)."""
    cluster = SecureCluster(tmp_path, add_scram={}, config={"metadata.snapshot.records": "20"})
    async with cluster:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(TOPIC, 1, 3)])
        users = ["alice", "carol", "dave", *(f"user-{i}" for i in range(10))]
        upserts = [UserScramCredentialUpsertion(u, "SCRAM-SHA-256", f"{u}-secret", 4096).to_request() for u in users]
        answer = await _call(cluster.address(1), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, deletions=[], upsertions=upserts)
        assert {r.error_code for r in answer.results} == {ErrorCode.none}
        carol_reads = AclBinding(ResourceType.TOPIC, TOPIC, "User:carol", AclOperation.READ)
        fillers = [AclBinding(ResourceType.TOPIC, f"filler-{i}", f"User:user-{i % 10}", AclOperation.READ) for i in range(50)]
        created = await _call(cluster.address(2), ApiKey.CREATE_ACLS,
                              creations=[creation(b) for b in (ALICE_READS, carol_reads, *fillers)])  # fmt: skip
        assert {r.error_code for r in created.results} == {ErrorCode.none}
        for node_id in cluster.node_ids:  # the 52 ACL records are applied everywhere: each node snapshots them
            await _eventually(lambda n=node_id: _has(_described(cluster, n), carol_reads), f"the ACLs on node {node_id}")
        # The last records, after every node's snapshot: dave and carol's ACL go, zed comes.
        await _call(cluster.address(3), ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                    deletions=[{"name": "dave", "mechanism": 1}], upsertions=[])  # fmt: skip
        await _call(cluster.address(3), ApiKey.DELETE_ACLS,
                    filters=[AclBindingFilter(principal="User:carol").to_request()])  # fmt: skip
        zed = UserScramCredentialUpsertion("zed", "SCRAM-SHA-256", "zed-secret", 4096).to_request()
        await _call(cluster.address(1), ApiKey.ALTER_USER_SCRAM_CREDENTIALS, deletions=[], upsertions=[zed])
        await _eventually(lambda: _logs_in(cluster, 2, "zed", "zed-secret"), "zed's login on node 2")
        assert [p for n in cluster.node_ids for p in (tmp_path / f"node-{n}").rglob("*.checkpoint")]

        for node_id in cluster.node_ids:
            await cluster.stop(node_id)
        for node_id in cluster.node_ids:
            await cluster.start_node(node_id, wait=False)

        async def first_answers(node_id: int) -> dict[str, object]:
            host, port = split_address(cluster.sasl_address(node_id))
            while True:  # until the node's SASL listener accepts a connection, then ask at once
                try:
                    _, writer = await asyncio.open_connection(host, port)
                except OSError:
                    await asyncio.sleep(0.005)
                    continue
                writer.close()
                break
            return {
                "zed logs in": await _logs_in(cluster, node_id, "zed", "zed-secret"),
                "dave logs in": await _logs_in(cluster, node_id, "dave", "dave-secret"),
                "carol": await _or_error(_topic_error(cluster, node_id, "carol", "carol-secret")),
                "alice": await _or_error(_topic_error(cluster, node_id, "alice", "alice-secret")),
            }

        expected = {"zed logs in": True, "dave logs in": False, "carol": ErrorCode.topic_authorization_failed,
                    "alice": ErrorCode.none}  # fmt: skip
        answers = await asyncio.gather(*(first_answers(n) for n in cluster.node_ids))
        assert dict(zip(cluster.node_ids, answers, strict=True)) == {n: expected for n in cluster.node_ids}
        await cluster.wait_ready()


async def _or_error(value: Awaitable[ErrorCode]) -> ErrorCode | str:
    try:
        return await value
    except KafkaError as exc:
        return repr(exc)


async def _has(described: Awaitable[set[AclBinding]], binding: AclBinding) -> bool:
    return binding in await described


async def _logs_in(cluster: SecureCluster, node_id: int, user: str, password: str, mechanism: str = "SCRAM-SHA-256") -> bool:
    """Whether ``user`` can log in with SCRAM on node ``node_id``."""
    host, port = split_address(cluster.sasl_address(node_id))
    conn = BrokerConnection(host, port, security=_scram(user, password, mechanism))
    try:
        await conn.connect()
    except KafkaError:
        return False
    finally:
        await conn.close()
    return True


async def _is(value: Awaitable[ErrorCode], expected: ErrorCode) -> bool:
    return await value is expected
