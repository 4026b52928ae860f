"""Partition-scoped coordinators on broker_min (issue 13), over real sockets.

A coordinator serves the keys of the internal-topic partitions it has loaded: a group of an
unloaded ``__consumer_offsets`` partition (or a transactional id of an unloaded
``__transaction_state`` partition) gets NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS while
its partition loads, and everything comes back when the partition is loaded again.  Plus
WriteTxnMarkers (key 27) sent by hand and by the transaction coordinator to a partition's
leader, FindCoordinator by partition leader, and coordinator writes that do not replicate.
These run on one broker: loading and unloading go through the coordinators' own API (what
cluster mode calls on leadership changes), and other leaders only through the leadership
and channel Protocols the coordinators take.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kafkakit.acls import AclBinding, AclOperation, ResourceType
from kafkakit.broker import Broker
from kafkakit.broker.coordinators import partitions
from kafkakit.broker.coordinators.group_offsets import OffsetToCommit
from kafkakit.broker.coordinators.group_records import partition_for_group
from kafkakit.broker.coordinators.markers import NodeChannel, RemoteMarkers
from kafkakit.broker.coordinators.offsets_topic import OFFSETS_TOPIC
from kafkakit.broker.coordinators.transactions import TxnState
from kafkakit.broker.metadata import (
    NO_LEADER,
    BrokerEndpoint,
    MetadataImage,
    PartitionRecord,
    PartitionRegistration,
    RegisterBrokerRecord,
    TopicRecord,
)
from kio.schema.errors import ErrorCode

from tests import raw_protocol
from tests.raw_protocol import req
from tests.test_broker_groups import (
    DESCRIBE,
    FETCH,
    LIST,
    Member,
    RawClient,
    commit,
    describe,
    fetch_offsets,
    stable_group,
)
from tests.test_broker_transactions import (
    READ_COMMITTED,
    add_partitions,
    committed_values,
    end_txn,
    fetch,
    init_pid,
    produce,
    txn_batch,
)
from tests.test_broker_transactions import TOPIC as TXN_TOPIC
from tests.test_transactions import read_values

TOPIC = "scoped"
OFFSETS_PARTITIONS = 4


def groups_by_partition(count: int = OFFSETS_PARTITIONS) -> dict[int, str]:
    """A group id for each ``__consumer_offsets`` partition."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < count:
        found.setdefault(partition_for_group(f"group-{n}", count), f"group-{n}")
        n += 1
    return found


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(
        tmp_path / "data",
        offsets_topic_num_partitions=OFFSETS_PARTITIONS,
        group_min_session_timeout_ms=100,
        group_initial_rebalance_delay_ms=0,
    ) as running:
        running.state.create_topic(TOPIC, 2)
        running.state.create_topic(TXN_TOPIC, 2)
        yield running


@pytest.fixture
async def client(broker: Broker) -> AsyncIterator[RawClient]:
    connection = await RawClient.connect(broker)
    yield connection
    connection.close()


async def listed(client: RawClient) -> tuple[ErrorCode, set[str]]:
    response = await client.call(LIST, 4, states_filter=[])
    return response.error_code, {g.group_id for g in response.groups}


# ====================================================================== groups


async def test_an_unloaded_offsets_partition_answers_not_coordinator_and_reloading_restores_it(
    broker: Broker, client: RawClient
) -> None:
    by_partition = groups_by_partition()
    moved, kept = by_partition[1], by_partition[2]
    leader = Member(client, moved)
    await stable_group([leader])
    assert await leader.commit({(TOPIC, 0): (42, "m")}) == {(TOPIC, 0): ErrorCode.none}
    assert await commit(client, kept, {(TOPIC, 1): (7, None)}) == {(TOPIC, 1): ErrorCode.none}
    # A second member parks in JoinGroup until the first rejoins: unloading must answer it.
    other = await RawClient.connect(broker)
    joiner = Member(other, moved)
    parked = asyncio.create_task(joiner.join())
    for _ in range(100):
        if await leader.heartbeat() == ErrorCode.rebalance_in_progress:
            break
        await asyncio.sleep(0.01)
    assert not parked.done()

    groups = broker.state.groups
    assert groups.unload_partition(1)
    assert not groups.unload_partition(1)  # already unloaded
    assert (await asyncio.wait_for(parked, 5)).error_code == ErrorCode.not_coordinator
    assert groups.owned_partitions == {0, 2, 3}

    assert await leader.heartbeat() == ErrorCode.not_coordinator
    assert (await leader.join()).error_code == ErrorCode.not_coordinator
    assert (await leader.sync()).error_code == ErrorCode.not_coordinator
    assert await leader.commit({(TOPIC, 0): (43, None)}) == {(TOPIC, 0): ErrorCode.not_coordinator}
    fetched = await client.call(FETCH, 7, group_id=moved, topics=None, require_stable=False)
    assert fetched.error_code == ErrorCode.not_coordinator
    v1 = await client.call(FETCH, 1, group_id=moved, topics=[{"name": TOPIC, "partition_indexes": [0]}])
    assert [p.error_code for t in v1.topics for p in t.partitions] == [ErrorCode.not_coordinator]
    assert (await describe(client, moved)).error_code == ErrorCode.not_coordinator
    error, names = await listed(client)
    assert error == ErrorCode.none and moved not in names and kept in names
    # The other partitions' groups are served as before.
    assert await commit(client, kept, {(TOPIC, 1): (8, None)}) == {(TOPIC, 1): ErrorCode.none}
    assert (await fetch_offsets(client, kept, {TOPIC: [1]}))[(TOPIC, 1)][0] == 8

    assert await groups.load_partition(1)
    assert groups.owned_partitions == {0, 1, 2, 3}
    assert (await fetch_offsets(client, moved, {TOPIC: [0]}))[(TOPIC, 0)][:3] == (42, 7, "m")
    described = await describe(client, moved)
    # As in Kafka: the group is back Stable with the members of its last stored generation; the
    # rebalance the joiner started was not stored.  The leader goes on without rejoining.
    assert (described.error_code, described.group_state) == (ErrorCode.none, "Stable")
    assert [m.member_id for m in described.members] == [leader.member_id]
    assert await leader.heartbeat() == ErrorCode.none
    assert await leader.commit({(TOPIC, 0): (43, None)}) == {(TOPIC, 0): ErrorCode.none}
    assert (await joiner.join_once()).error_code == ErrorCode.unknown_member_id
    # A new member starts a rebalance as usual; the leader rejoins and both get the next generation.
    joiner = Member(other, moved)
    generation = leader.generation
    joining = asyncio.create_task(joiner.join())
    for _ in range(100):
        if await leader.heartbeat() == ErrorCode.rebalance_in_progress:
            break
        await asyncio.sleep(0.01)
    joins = await asyncio.gather(leader.join(), joining)
    assert [j.error_code for j in joins] == [ErrorCode.none, ErrorCode.none]
    assert leader.generation == joiner.generation == generation + 1
    other.close()


async def test_a_loading_partition_answers_coordinator_load_in_progress(
    broker: Broker, client: RawClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    group = groups_by_partition()[3]
    groups = broker.state.groups
    for offset in range(3000):  # enough records for the load to span many slices
        assert groups.commit_offsets(group, -1, "", None, [OffsetToCommit(TOPIC, 0, offset, -1, None)]) == [
            ErrorCode.none
        ]
    assert groups.unload_partition(3)
    monkeypatch.setattr(partitions, "LOAD_SLICE_SECONDS", 0.0)  # yield to the loop at every look
    loading = asyncio.create_task(groups.load_partition(3, epoch=1))
    await asyncio.sleep(0)
    assert groups.partitions.loading == {3}
    answers = await commit(client, group, {(TOPIC, 0): (1, None)})
    assert answers == {(TOPIC, 0): ErrorCode.coordinator_load_in_progress}
    assert (await listed(client))[0] == ErrorCode.coordinator_load_in_progress
    assert await loading
    assert (await fetch_offsets(client, group, {TOPIC: [0]}))[(TOPIC, 0)][0] == 2999
    assert (await listed(client))[0] == ErrorCode.none
    # Epochs: a load at an epoch not newer is ignored, so is an unload at one not newer.
    assert not await groups.load_partition(3, epoch=1)
    assert not groups.unload_partition(3, epoch=1)
    assert groups.unload_partition(3, epoch=2)


async def test_unloading_while_loading_abandons_the_load(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> None:
    group = groups_by_partition()[0]
    groups = broker.state.groups
    for offset in range(2000):
        groups.commit_offsets(group, -1, "", None, [OffsetToCommit(TOPIC, 0, offset, -1, None)])
    assert groups.unload_partition(0)
    monkeypatch.setattr(partitions, "LOAD_SLICE_SECONDS", 0.0)
    loading = asyncio.create_task(groups.load_partition(0))
    await asyncio.sleep(0)
    assert groups.unload_partition(0)
    assert not await loading
    assert 0 not in groups.owned_partitions and group not in groups.offsets
    assert groups.coordinator_error(group) == ErrorCode.not_coordinator


async def test_describe_groups_mixes_served_and_unserved_groups(broker: Broker, client: RawClient) -> None:
    by_partition = groups_by_partition()
    await commit(client, by_partition[0], {(TOPIC, 0): (1, None)})
    broker.state.groups.unload_partition(2)
    response = await client.call(DESCRIBE, 5, groups=[by_partition[0], by_partition[2]], include_authorized_operations=False)
    assert [(g.group_id, g.error_code) for g in response.groups] == [
        (by_partition[0], ErrorCode.none),
        (by_partition[2], ErrorCode.not_coordinator),
    ]



class Unreplicated:
    """A replica manager (BrokerState.replicas) under which internal-topic writes never reach the ISR."""

    def __init__(self, error: ErrorCode) -> None:
        self.error = error

    def is_leader(self, topic: str, partition: int) -> bool:
        return True

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout: float) -> ErrorCode | None:
        return self.error if topic.startswith("__") else None


@pytest.mark.parametrize(
    ("failure", "answer"),
    [
        (ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available),
        (ErrorCode.request_timed_out, ErrorCode.coordinator_not_available),
        (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator),
    ],
)
async def test_group_writes_that_do_not_replicate_are_answered_with_kafkas_coordinator_errors(
    broker: Broker, client: RawClient, failure: ErrorCode, answer: ErrorCode
) -> None:
    group = groups_by_partition()[1]
    broker.state.replicas = Unreplicated(failure)
    try:
        assert await commit(client, group, {(TOPIC, 0): (5, None)}) == {(TOPIC, 0): answer}
        assert (await Member(client, "fresh-group").join()).error_code == answer
    finally:
        broker.state.replicas = None
    assert await commit(client, group, {(TOPIC, 0): (6, None)}) == {(TOPIC, 0): ErrorCode.none}


class HeldReplication:
    """A replica manager under which internal-topic writes reach the ISR only when released."""

    def __init__(self) -> None:
        self.released = asyncio.Event()
        self.waiting = 0

    def is_leader(self, topic: str, partition: int) -> bool:
        return True

    async def wait_committed(self, topic: str, partition: int, end_offset: int, timeout: float) -> ErrorCode | None:
        if topic.startswith("__"):
            self.waiting += 1
            await self.released.wait()
        return None


async def test_a_commit_whose_partition_is_unloaded_before_it_replicates_is_not_coordinator(
    broker: Broker, client: RawClient
) -> None:
    group = groups_by_partition()[2]
    held = HeldReplication()
    broker.state.replicas = held
    try:
        committing = asyncio.create_task(commit(client, group, {(TOPIC, 0): (3, None)}))
        for _ in range(200):
            if held.waiting:
                break
            await asyncio.sleep(0.005)
        assert held.waiting == 1 and not committing.done()
        broker.state.groups.unload_partition(2)
        held.released.set()
        assert await committing == {(TOPIC, 0): ErrorCode.not_coordinator}
    finally:
        broker.state.replicas = None


# ====================================================================== transactions

MS = datetime.timedelta(milliseconds=1)
TID = "scoped-tid"


@pytest.fixture
async def raw(broker: Broker) -> AsyncIterator[Any]:
    connection = await raw_protocol.RawClient.connect(broker)
    yield connection
    connection.close()


async def open_transaction(raw: Any, tid: str = TID, partitions: tuple[int, ...] = (0, 1)) -> tuple[int, int]:
    """InitProducerId, AddPartitionsToTxn and two records per partition of ``TXN_TOPIC``; (pid, epoch)."""
    init = await init_pid(raw, tid)
    assert init.error_code == ErrorCode.none
    pid, epoch = init.producer_id, init.producer_epoch
    assert await add_partitions(raw, tid, pid, epoch, partitions) == [ErrorCode.none] * len(partitions)
    for partition in partitions:
        produced = await produce(raw, txn_batch(pid, epoch, 0, tag=f"p{partition}"), partition, tid)
        assert produced.error_code == ErrorCode.none
    return pid, epoch


async def describe_txn(raw: Any, tid: str = TID) -> Any:
    return (await raw.call(req(65, 0, transactional_ids=(tid,)))).transaction_states[0]


async def list_txns(raw: Any) -> Any:
    return await raw.call(req(66, 1, state_filters=(), producer_id_filters=(), duration_filter=-1))


async def test_an_unloaded_transaction_partition_answers_not_coordinator_and_reloading_restores_it(
    broker: Broker, raw: Any
) -> None:
    pid, epoch = await open_transaction(raw)
    coordinator = broker.state.transactions
    assert coordinator.owned_partitions == {0}  # __transaction_state has one partition here
    assert coordinator.unload_partition(0)
    assert TID not in coordinator.transactions

    assert (await init_pid(raw, TID)).error_code == ErrorCode.not_coordinator
    assert await add_partitions(raw, TID, pid, epoch, (1,)) == [ErrorCode.not_coordinator]
    assert await end_txn(raw, TID, pid, epoch, commit=True) == ErrorCode.not_coordinator
    assert (await describe_txn(raw)).error_code == ErrorCode.not_coordinator
    listed = await list_txns(raw)
    assert listed.error_code == ErrorCode.none and listed.transaction_states == ()

    assert await coordinator.load_partition(0)
    described = await describe_txn(raw)
    assert (described.error_code, described.transaction_state) == (ErrorCode.none, "Ongoing")
    assert sorted(described.topics[0].partitions) == [0, 1]
    assert await end_txn(raw, TID, pid, epoch, commit=True) == ErrorCode.none
    for partition in (0, 1):
        kept = committed_values(await fetch(raw, READ_COMMITTED, partition), partition)
        assert kept == [f"p{partition}-0".encode(), f"p{partition}-1".encode()]


async def test_a_loading_transaction_partition_answers_coordinator_load_in_progress(
    broker: Broker, raw: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = broker.state.transactions
    for n in range(1500):  # enough records for the load to span many slices
        coordinator.init_producer_id(f"filler-{n}", 60_000)
    assert coordinator.unload_partition(0)
    monkeypatch.setattr(partitions, "LOAD_SLICE_SECONDS", 0.0)
    loading = asyncio.create_task(coordinator.load_partition(0, epoch=1))
    await asyncio.sleep(0)
    assert (await init_pid(raw, TID)).error_code == ErrorCode.coordinator_load_in_progress
    assert (await list_txns(raw)).error_code == ErrorCode.coordinator_load_in_progress
    assert await loading
    assert len(coordinator.transactions) == 1500
    assert (await init_pid(raw, TID)).error_code == ErrorCode.none


def markers_request(pid: int, epoch: int, *entries: tuple[bool, str, tuple[int, ...]], version: int = 1) -> Any:
    markers = tuple(
        raw_protocol.sub(27, version, "WritableTxnMarker", producer_id=pid, producer_epoch=epoch, transaction_result=commit,
                         topics=(raw_protocol.sub(27, version, "WritableTxnMarkerTopic", name=topic, partition_indexes=ps),),
                         coordinator_epoch=0, transaction_version=2)  # fmt: skip
        for commit, topic, ps in entries
    )
    return req(27, version, markers=markers)


def marker_answers(response: Any) -> list[tuple[str, int, ErrorCode]]:
    return [(t.name, p.partition_index, p.error_code) for m in response.markers for t in m.topics for p in t.partitions]


class NotLeading:
    """Leadership as the state says, except for ``partitions``, which node 2 leads."""

    def __init__(self, state: Any, partitions: set[tuple[str, int]]) -> None:
        self.state, self.partitions = state, partitions

    def partition_registration(self, topic: str, partition: int) -> PartitionRegistration | None:
        if (topic, partition) in self.partitions:
            return PartitionRegistration((1, 2), (1, 2), 2, 1, 1)
        registration: PartitionRegistration | None = self.state.partition_registration(topic, partition)
        return registration

    def is_local_leader(self, topic: str, partition: int) -> bool:
        return (topic, partition) not in self.partitions and bool(self.state.is_local_leader(topic, partition))


async def test_write_txn_markers_sent_by_hand_commit_and_abort_an_open_transaction(broker: Broker, raw: Any) -> None:
    pid, epoch = await open_transaction(raw)
    assert (await raw.call(req(25, 3, transactional_id=TID, producer_id=pid, producer_epoch=epoch, group_id="g"))).error_code == ErrorCode.none
    offsets = raw_protocol.sub(28, 3, "TxnOffsetCommitRequestTopic", name=TXN_TOPIC, partitions=(
        raw_protocol.sub(28, 3, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=9,
                         committed_leader_epoch=-1, committed_metadata=None),))  # fmt: skip
    committed = await raw.call(req(28, 3, transactional_id=TID, group_id="g", producer_id=pid, producer_epoch=epoch,
                                   generation_id=-1, member_id="", group_instance_id=None, topics=(offsets,)))  # fmt: skip
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none
    group_partition = broker.state.groups_store_partition("g")
    response = await raw.call(
        markers_request(pid, epoch, (True, TXN_TOPIC, (0, 7)), (False, TXN_TOPIC, (1,)), (True, OFFSETS_TOPIC, (group_partition,)))
    )
    assert marker_answers(response) == [
        (TXN_TOPIC, 0, ErrorCode.none),
        (TXN_TOPIC, 7, ErrorCode.unknown_topic_or_partition),
        (TXN_TOPIC, 1, ErrorCode.none),
        (OFFSETS_TOPIC, group_partition, ErrorCode.none),
    ]
    assert committed_values(await fetch(raw, READ_COMMITTED, 0), 0) == [b"p0-0", b"p0-1"]
    assert committed_values(await fetch(raw, READ_COMMITTED, 1), 1) == []
    # A read_committed client sees the same: partition 0's records, none of partition 1's.
    assert await read_values(broker.bootstrap_servers, TXN_TOPIC, 2, "read_committed", partitions=2) == [b"p0-0", b"p0-1"]
    # The marker in __consumer_offsets made the transaction's offsets committed.
    fetched = await raw.call(req(9, 7, group_id="g", topics=None, require_stable=True))
    assert [(p.committed_offset, p.error_code) for t in fetched.topics for p in t.partitions] == [(9, ErrorCode.none)]


async def test_write_txn_markers_for_a_partition_led_elsewhere_or_a_group_partition_not_loaded(
    broker: Broker, raw: Any
) -> None:
    pid, epoch = await open_transaction(raw)
    state = broker.state
    state.transactions.local_markers.leadership = NotLeading(state, {(TXN_TOPIC, 1)})
    group_partition = state.groups_store_partition("g")
    state.offsets_partition_for("g")  # __consumer_offsets exists
    state.groups.unload_partition(group_partition)
    try:
        response = await raw.call(markers_request(pid, epoch, (True, TXN_TOPIC, (0, 1)), (True, OFFSETS_TOPIC, (group_partition,))))
    finally:
        state.transactions.local_markers.leadership = state
    assert marker_answers(response) == [
        (TXN_TOPIC, 0, ErrorCode.none),
        (TXN_TOPIC, 1, ErrorCode.not_leader_or_follower),
        (OFFSETS_TOPIC, group_partition, ErrorCode.not_leader_or_follower),
    ]
    assert committed_values(await fetch(raw, READ_COMMITTED, 0), 0) == [b"p0-0", b"p0-1"]
    assert (await fetch(raw, READ_COMMITTED, 1)).last_stable_offset == 0  # still open


async def test_write_txn_markers_needs_cluster_action_under_an_authorizer(tmp_path: Path) -> None:
    async with Broker(tmp_path / "authz", authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer") as secured:
        secured.state.create_topic(TXN_TOPIC, 1)
        raw = await raw_protocol.RawClient.connect(secured)
        request = markers_request(1000, 0, (True, TXN_TOPIC, (0,)))
        assert marker_answers(await raw.call(request)) == [(TXN_TOPIC, 0, ErrorCode.cluster_authorization_failed)]
        assert secured.state.authorizer is not None
        secured.state.authorizer.create(
            [AclBinding(ResourceType.CLUSTER, "kafka-cluster", "User:ANONYMOUS", AclOperation.CLUSTER_ACTION)]
        )
        assert marker_answers(await raw.call(request)) == [(TXN_TOPIC, 0, ErrorCode.none)]
        raw.close()


class CountingChannel:
    """A BrokerChannel that counts what it sends (to any node) and sends it to this broker."""

    def __init__(self, broker: Broker) -> None:
        self.inner = NodeChannel(lambda _node: ("127.0.0.1", broker.port), "test-coordinator")
        self.sent: list[int] = []

    async def send(self, node_id: int, request: Any, timeout: float) -> Any:
        self.sent.append(node_id)
        return await self.inner.send(node_id, request, timeout)


async def test_the_coordinator_sends_markers_to_other_leaders_and_retries_until_they_take_them(
    broker: Broker, raw: Any
) -> None:
    pid, epoch = await open_transaction(raw)
    state = broker.state
    coordinator = state.transactions
    channel = CountingChannel(broker)
    # Partition 1 is node 2's (for the coordinator), and node 2 (this broker behind the channel)
    # says at first it does not lead it.
    coordinator.remote_markers = RemoteMarkers(channel)
    coordinator.routing = NotLeading(state, {(TXN_TOPIC, 1)})
    coordinator.local_markers.leadership = NotLeading(state, {(TXN_TOPIC, 1)})
    try:
        assert await end_txn(raw, TID, pid, epoch, commit=True) == ErrorCode.none
        meta = coordinator.transactions[TID]
        for _ in range(100):
            if len(channel.sent) >= 2:
                break
            await asyncio.sleep(0.02)
        assert len(channel.sent) >= 2  # refused, then retried after the backoff
        assert meta.state == TxnState.PREPARE_COMMIT and meta.markers is not None
        assert meta.markers.remaining == {(TXN_TOPIC, 1)}  # partition 0 is this node's: written
        coordinator.local_markers.leadership = state  # node 2 now takes it
        for _ in range(200):
            if meta.state == TxnState.COMPLETE_COMMIT:
                break
            await asyncio.sleep(0.02)
        assert meta.state == TxnState.COMPLETE_COMMIT
        assert set(channel.sent) == {2}
    finally:
        coordinator.remote_markers = None
        coordinator.routing = state
        coordinator.local_markers.leadership = state
        channel.inner.close()
    assert committed_values(await fetch(raw, READ_COMMITTED, 1), 1) == [b"p1-0", b"p1-1"]
    assert committed_values(await fetch(raw, READ_COMMITTED, 0), 0) == [b"p0-0", b"p0-1"]


@pytest.mark.parametrize(
    ("failure", "answer"),
    [(ErrorCode.not_enough_replicas, ErrorCode.coordinator_not_available), (ErrorCode.not_leader_or_follower, ErrorCode.not_coordinator)],
)
async def test_transaction_writes_that_do_not_replicate_are_answered_with_kafkas_coordinator_errors(
    broker: Broker, raw: Any, failure: ErrorCode, answer: ErrorCode
) -> None:
    init = await init_pid(raw, TID)
    broker.state.replicas = Unreplicated(failure)
    try:
        assert await add_partitions(raw, TID, init.producer_id, init.producer_epoch, (0,)) == [answer]
    finally:
        broker.state.replicas = None


# ====================================================================== FindCoordinator


def cluster_image(offsets_leaders: dict[int, int]) -> MetadataImage:
    """An image with brokers 1 (this one) and 2, and ``__consumer_offsets`` led as given."""
    image = MetadataImage()
    for node, port in ((1, 9092), (2, 9093)):
        endpoint = BrokerEndpoint("PLAINTEXT", f"node{node}.example", port)
        image.apply(RegisterBrokerRecord(node, 1, uuid.uuid4(), (endpoint,), fenced=False))
    topic_id = uuid.uuid4()
    image.apply(TopicRecord(OFFSETS_TOPIC, topic_id))
    for partition, leader in offsets_leaders.items():
        image.apply(PartitionRecord(topic_id, partition, (1, 2), (1, 2), leader))
    return image


async def test_find_coordinator_answers_the_leader_of_the_keys_partition_in_cluster_mode(
    broker: Broker, raw: Any
) -> None:
    by_partition = groups_by_partition()
    broker.state.offsets_partition_for("g")  # __consumer_offsets exists (4 partitions)
    broker.state.image = cluster_image({0: 1, 1: 2, 2: 2, 3: NO_LEADER})
    try:
        found = await raw.call(req(10, 4, key_type=0, coordinator_keys=tuple(by_partition[p] for p in range(4))))
        answers = [(c.error_code, c.node_id, c.host, c.port) for c in found.coordinators]
        assert answers == [
            (ErrorCode.none, 1, "node1.example", 9092),
            (ErrorCode.none, 2, "node2.example", 9093),
            (ErrorCode.none, 2, "node2.example", 9093),
            (ErrorCode.coordinator_not_available, -1, "", -1),
        ]
        # __transaction_state does not exist yet: not available (cluster mode creates it).
        txn = await raw.call(req(10, 4, key_type=1, coordinator_keys=("some-tid",)))
        assert txn.coordinators[0].error_code == ErrorCode.coordinator_not_available
    finally:
        broker.state.image = None
    single = await raw.call(req(10, 4, key_type=1, coordinator_keys=("some-tid",)))
    assert (single.coordinators[0].error_code, single.coordinators[0].node_id) == (ErrorCode.none, broker.state.node_id)
