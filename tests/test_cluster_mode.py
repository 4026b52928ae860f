"""broker_min cluster mode (issue 13): 3 combined KRaft nodes as child processes (LocalCluster).

Every test talks to real node processes over real sockets with kafkakit's own client (the
interop tests with confluent-kafka and aiokafka are in tests/test_cluster_interop.py).
One module-scoped cluster serves the tests that leave it as they found it; tests that
kill nodes start their own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import pytest_asyncio
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import LocalCluster
from kafkakit.errors import KafkaError

from tests.brokers import new_topic_name
from tests.raw_protocol import RawClient, req, sub

# One event loop for the module, so that the module-scoped cluster fixture can be async.
pytestmark = [pytest.mark.timeout(180), pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(3, tmp_path_factory.mktemp("cluster")) as running:
        yield running


async def _describe(bootstrap: str, topic: str) -> dict[int, tuple[int, tuple[int, ...], tuple[int, ...]]]:
    """partition -> (leader, replicas, isr)."""
    async with Admin(bootstrap_servers=bootstrap) as admin:
        (description,) = await admin.describe_topics([topic])
    return {p.partition: (p.leader, tuple(p.replicas), tuple(p.isr)) for p in description.partitions}


async def _wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await predicate():
            return
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


async def _isr_by_describe_topic_partitions(address: str, topic: str) -> tuple[int, ...]:
    """Partition 0's ISR as DescribeTopicPartitions (key 75) reports it."""
    client = await RawClient.connect(address)
    try:
        response = await client.call(
            req(75, 0, topics=(sub(75, 0, "TopicRequest", name=topic),), response_partition_limit=10, cursor=None)
        )
    finally:
        client.close()
    (described,) = response.topics
    return tuple(described.partitions[0].isr_nodes)


async def _consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0) -> list[bytes]:
    """Every value of the topic's partitions from the start, in partition order (no group)."""
    values: list[bytes] = []
    partitions = sorted(await _describe(bootstrap, topic))
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(values) < expected and loop.time() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for records in batches.values():
                values.extend(r.value for r in records if r.value is not None)
    return values


async def test_three_nodes_register_and_every_node_lists_them(cluster: LocalCluster) -> None:
    for node_id in cluster.node_ids:
        assert await cluster.live_brokers(node_id) == {1, 2, 3}
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        description = await admin.describe_cluster()
    assert {b.node_id for b in description.brokers} == {1, 2, 3}
    assert description.controller_id in {1, 2, 3}


async def test_a_replicated_topic_spreads_leaders_and_keeps_acks_all_records(cluster: LocalCluster) -> None:
    topic = new_topic_name("rf3")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 6, 3)])
    described = await _describe(cluster.bootstrap_servers, topic)
    assert sorted(described) == list(range(6))
    leaders = [leader for leader, _, _ in described.values()]
    assert set(leaders) == {1, 2, 3}, f"leaders not spread: {leaders}"
    for leader, replicas, isr in described.values():
        assert sorted(replicas) == [1, 2, 3] and sorted(isr) == [1, 2, 3] and leader == replicas[0]
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        futures = [await producer.send(topic, f"v{i}".encode()) for i in range(300)]
        await asyncio.gather(*futures)
    values = await _consume_all(cluster.bootstrap_servers, topic, 300)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(300))


async def test_every_replica_holds_the_same_log(cluster: LocalCluster) -> None:
    topic = new_topic_name("same-log")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 1, 3)])
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        for i in range(50):
            await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)

    def segment_bytes(node_id: int) -> bytes:
        directory = cluster.data_dir / f"node-{node_id}" / f"{topic}-0"
        return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))

    # acks=all means every ISR member has the records; followers may still be writing the HW.
    deadline = time.monotonic() + 10
    while len({segment_bytes(n) for n in cluster.node_ids}) != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    logs = {n: segment_bytes(n) for n in cluster.node_ids}
    assert logs[1] and logs[1] == logs[2] == logs[3]


async def test_auto_created_topics_get_the_default_replication_factor(cluster: LocalCluster) -> None:
    topic = new_topic_name("auto")
    async with Producer(bootstrap_servers=cluster.bootstrap_servers) as producer:
        await producer.send_and_wait(topic, b"first")
    described = await _describe(cluster.bootstrap_servers, topic)
    assert [sorted(replicas) for _, replicas, _ in described.values()] == [[1, 2, 3]]


async def test_deleted_topics_leave_every_node(cluster: LocalCluster) -> None:
    topic = new_topic_name("gone")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 2, 3)])
        await admin.delete_topics([topic])
        assert topic not in await admin.list_topics()
    deadline = time.monotonic() + 10
    leftovers: list[Path] = []
    while time.monotonic() < deadline:
        leftovers = [p for n in cluster.node_ids for p in (cluster.data_dir / f"node-{n}").glob(f"{topic}-*")]
        if not leftovers:
            break
        await asyncio.sleep(0.1)
    assert leftovers == []


async def test_min_insync_replicas_is_enforced_and_isr_shrinks_and_expands(tmp_path: Path) -> None:
    config = {"replica.lag.time.max.ms": "1500", "min.insync.replicas": "2"}
    async with LocalCluster(3, tmp_path, config=config) as cluster:
        topic = new_topic_name("isr")
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 1, 3, {"min.insync.replicas": "3"})])
        leader, replicas, _ = (await _describe(cluster.bootstrap_servers, topic))[0]
        follower = next(r for r in replicas if r != leader)
        await cluster.pause(follower)

        # Asked of the leader only: a client would also try the paused node and wait out its timeout.
        async def shrunk() -> bool:
            state = await cluster.partition_state(topic, 0, leader)
            return state is not None and follower not in state.isr

        await _wait_for(shrunk, 20, "the paused follower to leave the ISR")
        assert follower not in await _isr_by_describe_topic_partitions(cluster.address(leader), topic)
        async with Producer(
            bootstrap_servers=cluster.address(leader), acks="all", delivery_timeout_ms=3000, request_timeout_ms=2000
        ) as producer:
            with pytest.raises(KafkaError, match="NOT_ENOUGH_REPLICAS|NotEnoughReplicas"):
                await producer.send_and_wait(topic, b"refused")
        await cluster.resume(follower)

        async def expanded() -> bool:
            state = await cluster.partition_state(topic, 0, leader)
            return state is not None and sorted(state.isr) == [1, 2, 3]

        await _wait_for(expanded, 30, "the follower to rejoin the ISR")
        assert sorted(await _isr_by_describe_topic_partitions(cluster.address(leader), topic)) == [1, 2, 3]
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
            await producer.send_and_wait(topic, b"accepted")
        assert await _consume_all(cluster.bootstrap_servers, topic, 1) == [b"accepted"]


async def test_killing_the_leader_during_acks_all_produce_loses_no_acknowledged_record(tmp_path: Path) -> None:
    async with LocalCluster(3, tmp_path, config={"min.insync.replicas": "2"}) as cluster:
        topic = new_topic_name("kill-leader")
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 1, 3)])
        leader = (await _describe(cluster.bootstrap_servers, topic))[0][0]
        acknowledged: list[bytes] = []
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=1) as producer:
            for i in range(400):
                value = f"k{i}".encode()
                if i == 150:
                    await cluster.kill(leader)
                await producer.send_and_wait(topic, value)
                acknowledged.append(value)
        values = await _consume_all(cluster.bootstrap_servers, topic, len(acknowledged), timeout=60)
        assert values == acknowledged  # every acknowledged record, once, in order
        new_leader = (await _describe(cluster.bootstrap_servers, topic))[0][0]
        assert new_leader != leader


async def test_killing_the_active_controller_elects_another_with_the_metadata_intact(tmp_path: Path) -> None:
    async with LocalCluster(3, tmp_path) as cluster:
        topic = new_topic_name("ctl")
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 3, 3)])
            controller = (await admin.describe_cluster()).controller_id
        await cluster.kill(controller)
        survivors = [n for n in cluster.node_ids if n != controller]
        bootstrap = ",".join(cluster.address(n) for n in survivors)
        started = time.monotonic()

        async def new_controller() -> bool:
            async with Admin(bootstrap_servers=bootstrap) as admin:
                return (await admin.describe_cluster()).controller_id in survivors

        await _wait_for(new_controller, 15, "a new active controller")
        elected_in = time.monotonic() - started
        assert elected_in < 10, f"election took {elected_in:.1f}s"
        # The metadata survived: the topic is there, and the controller still creates topics.
        assert sorted(await _describe(bootstrap, topic)) == [0, 1, 2]
        other = new_topic_name("after")
        async with Admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(other, 1, 2)])
        await cluster.start_node(controller)
        assert await cluster.live_brokers(controller) == {1, 2, 3}
        assert sorted(await _describe(cluster.address(controller), other)) == [0]


async def test_a_consumer_group_commits_on_the_replicated_offsets_topic(cluster: LocalCluster) -> None:
    topic = new_topic_name("group")
    group = new_topic_name("g")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 3, 3)])
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
        for i in range(90):
            await producer.send(topic, f"m{i}".encode(), partition=i % 3)
    seen: list[bytes] = []
    async with Consumer(
        topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len(seen) < 90 and loop.time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                seen.extend(r.value for r in records if r.value is not None)
        await consumer.commit()
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(90))
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        offsets = await admin.list_consumer_group_offsets(group)
    assert {tp.partition: meta.offset for tp, meta in offsets.items()} == {0: 30, 1: 30, 2: 30}
    described = await _describe(cluster.bootstrap_servers, "__consumer_offsets")
    assert all(sorted(replicas) == [1, 2, 3] for _, replicas, _ in described.values())


async def test_transactions_commit_and_abort_across_leaders(cluster: LocalCluster) -> None:
    topic = new_topic_name("txn")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 3, 3)])
    async with Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id=new_topic_name("tid")
    ) as producer:
        await producer.init_transactions()
        async with producer.transaction():
            for i in range(9):
                await producer.send(topic, f"kept{i}".encode(), partition=i % 3)
        producer.begin_transaction()
        for i in range(9):
            await producer.send(topic, f"dropped{i}".encode(), partition=i % 3)
        await producer.abort_transaction()
    values: list[bytes] = []
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        while len(values) < 9 and loop.time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records if r.value is not None)
    assert sorted(values) == sorted(f"kept{i}".encode() for i in range(9))


async def test_a_whole_cluster_restart_keeps_topics_records_and_committed_offsets(tmp_path: Path) -> None:
    config = {"metadata.snapshot.records": "40"}  # snapshots are taken (and replayed) on the way
    async with LocalCluster(3, tmp_path, config=config) as cluster:
        topics = [new_topic_name(f"restart{i}") for i in range(8)]
        group = new_topic_name("rg")
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(t, 2, 3) for t in topics])
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
            for t in topics:
                for i in range(10):
                    await producer.send(t, f"{t}-{i}".encode(), partition=i % 2)
        async with Consumer(topics[0], bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                            auto_offset_reset="earliest", enable_auto_commit=False) as consumer:  # fmt: skip
            seen = 0
            deadline = time.monotonic() + 30
            while seen < 10 and time.monotonic() < deadline:
                seen += sum(len(r) for r in (await consumer.getmany(timeout_ms=500)).values())
            await consumer.commit()
        snapshots = [p for n in cluster.node_ids for p in (tmp_path / f"node-{n}").rglob("*.checkpoint")]
        assert snapshots, "no metadata snapshot was written"
        for node_id in cluster.node_ids:
            await cluster.stop(node_id)
        for node_id in cluster.node_ids:
            await cluster.start_node(node_id, wait=False)
        await cluster.wait_ready()
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            assert set(topics) <= await admin.list_topics()
            offsets = await admin.list_consumer_group_offsets(group)
        assert sum(meta.offset for meta in offsets.values()) == 10
        for t in topics:
            assert sorted(await _consume_all(cluster.bootstrap_servers, t, 10)) == sorted(
                f"{t}-{i}".encode() for i in range(10)
            )


async def test_topic_configs_altered_through_one_node_reach_every_node(cluster: LocalCluster) -> None:
    topic = new_topic_name("cfg")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 1, 3)])
    async with Admin(bootstrap_servers=cluster.address(1)) as admin:
        await admin.incremental_alter_configs(topic, {"retention.ms": ("set", "123456"), "cleanup.policy": ("set", "compact")})
    for node_id in cluster.node_ids:

        async def applied(node: int = node_id) -> bool:
            async with Admin(bootstrap_servers=cluster.address(node)) as admin:
                configs = await admin.describe_configs(topic)
            return configs.get("retention.ms") == "123456" and configs.get("cleanup.policy") == "compact"

        await _wait_for(applied, 10, f"node {node_id} to see the new configs")
    async with Admin(bootstrap_servers=cluster.address(2)) as admin:
        with pytest.raises(KafkaError, match="INVALID_CONFIG|InvalidConfig|invalid"):
            await admin.incremental_alter_configs(topic, {"retention.ms": ("set", "not-a-number")})


async def test_a_consume_transform_produce_copy_commits_offsets_when_group_and_transaction_coordinators_differ(
    tmp_path: Path,
) -> None:
    from kafkakit.broker.coordinators.group_records import partition_for_group
    from kafkakit.broker.coordinators.txn_records import partition_for_transactional_id

    async with LocalCluster(3, tmp_path, config={"offsets.topic.num.partitions": "3"}) as cluster:
        source, sink = new_topic_name("eos-in"), new_topic_name("eos-out")
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(source, 1, 3), NewTopic(sink, 1, 3)])
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all") as producer:
            for i in range(20):
                await producer.send(source, f"in{i}".encode())
        transactional_id = new_topic_name("copier")
        # Create both internal topics, then pick a group whose coordinator is not the transaction's.
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=transactional_id) as warm:
            await warm.init_transactions()
        async with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="probe") as probe:
            await probe.committed(TopicPartition(source, 0))
        txn_leader = (await _describe(cluster.bootstrap_servers, "__transaction_state"))[
            partition_for_transactional_id(transactional_id, 1)
        ][0]
        offsets_leaders = await _describe(cluster.bootstrap_servers, "__consumer_offsets")
        group = next(
            g for g in (f"copy-group-{i}" for i in range(100))
            if offsets_leaders[partition_for_group(g, 3)][0] != txn_leader
        )  # fmt: skip
        async with (
            Consumer(source, bootstrap_servers=cluster.bootstrap_servers, group_id=group, auto_offset_reset="earliest",
                     enable_auto_commit=False, isolation_level="read_committed") as consumer,
            Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=transactional_id) as producer,
        ):  # fmt: skip
            await producer.init_transactions()
            copied = 0
            deadline = time.monotonic() + 60
            while copied < 20 and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500)
                if not batches:
                    continue
                async with producer.transaction():
                    for records in batches.values():
                        for record in records:
                            await producer.send(sink, record.value)
                        copied += len(records)
                    await producer.send_offsets_to_transaction(
                        {tp: records[-1].offset + 1 for tp, records in batches.items()}, consumer.group_metadata()
                    )
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            committed = await admin.list_consumer_group_offsets(group)
        assert {tp.partition: meta.offset for tp, meta in committed.items()} == {0: 20}
        values = await _consume_all(cluster.bootstrap_servers, sink, 20)
        assert sorted(values) == sorted(f"in{i}".encode() for i in range(20))


async def test_back_to_back_transactions_on_a_remote_leader_each_commit_alone(cluster: LocalCluster) -> None:
    """Transaction version 2 bumps the epoch per transaction, and the next transaction's first batch
    can reach a partition before the previous one's marker: it must be verified (added) anew, not
    taken into the still-open previous transaction (it was, and aborts then showed its record)."""
    topic = new_topic_name("txn-rapid")
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 3, 3)])
    transactional_id = new_topic_name("rapid")
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=transactional_id) as producer:
        await producer.init_transactions()
        coordinator = (await _describe(cluster.bootstrap_servers, "__transaction_state"))[0][0]
        partition = next(p for p, (leader, _, _) in (await _describe(cluster.bootstrap_servers, topic)).items()
                         if leader != coordinator)  # fmt: skip
        for i in range(60):
            async with producer.transaction():
                await producer.send(topic, f"t{i}".encode(), partition=partition)
        producer.begin_transaction()
        await producer.send(topic, b"aborted", partition=partition)
        await producer.abort_transaction()
    values: list[bytes] = []
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", isolation_level="read_committed"
    ) as consumer:
        consumer.assign([TopicPartition(topic, partition)])
        deadline = time.monotonic() + 30
        while len(values) < 60 and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records if r.value is not None)
        values.extend(r.value for rs in (await consumer.getmany(timeout_ms=1000)).values() for r in rs if r.value)
    assert values == [f"t{i}".encode() for i in range(60)]
