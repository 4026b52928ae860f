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
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kafkakit.broker import Broker
from kafkakit.broker.coordinators import partitions
from kafkakit.broker.coordinators.group_offsets import OffsetToCommit
from kafkakit.broker.coordinators.group_records import partition_for_group
from kio.schema.errors import ErrorCode

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
    # As after a restart: the group is back Empty at its generation, its members rejoin.
    assert (described.error_code, described.group_state) == (ErrorCode.none, "Empty")
    rejoined = Member(client, moved)
    await stable_group([rejoined])
    assert rejoined.generation == leader.generation + 1
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
