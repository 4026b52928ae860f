"""Replication in cluster mode: three in-process brokers over real sockets, each with its own
metadata image and ReplicaManager, driven by a small controller in this file that writes the
metadata records and answers AlterPartition as the KRaft controller would."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kafkakit import Consumer, Producer, TopicPartition
from kafkakit.broker import Broker
from kafkakit.broker.log import LogConfig, PartitionLog, read_batch_header
from kafkakit.broker.metadata import (
    TOPIC_RESOURCE,
    BrokerEndpoint,
    ConfigRecord,
    MetadataDelta,
    MetadataImage,
    MetadataRecord,
    PartitionChangeRecord,
    PartitionRecord,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
)
from kafkakit.broker.replication import ReplicaManager, ReplicationSettings, truncation_offset
from kafkakit.protocol.build import make_response
from kafkakit.records import encode_batch
from kio.schema.errors import ErrorCode
from test_log import make_batch

from tests.raw_protocol import RawClient, req, sub

MS = datetime.timedelta(milliseconds=1)
CLUSTER_ID = "replication-test-cluster"
NODES = (1, 2, 3)


@dataclass
class Node:
    node_id: int
    broker: Broker
    image: MetadataImage
    manager: ReplicaManager

    def log(self, topic: str, partition: int = 0) -> PartitionLog:
        found = self.broker.state.partition_log(topic, partition)
        assert found is not None, f"node {self.node_id} has no log of {topic}-{partition}"
        return found


class Controller:
    """The test's stand-in for the KRaft controller: one image, records applied to every node's
    own image copy, AlterPartition validated as the QuorumController does."""

    def __init__(self) -> None:
        self.image = MetadataImage()
        self.nodes: dict[int, Node] = {}
        self.offset = -1
        self.alter_requests = 0
        #: Errors to answer the next AlterPartition requests with (popped one per request).
        self.refusals: list[ErrorCode] = []
        #: Seconds between answering an AlterPartition and publishing its record (0: before).
        self.metadata_lag = 0.0

    def publish(self, *records: MetadataRecord) -> None:
        first = self.offset + 1
        for record in records:
            self.offset += 1
            self.image.apply(record, self.offset)
        for node in self.nodes.values():
            delta = MetadataDelta()
            for i, record in enumerate(records):
                delta.merge(node.image.apply(record, first + i))
            node.manager.on_metadata(node.image, delta)

    def create_topic(
        self, name: str, replicas: tuple[int, ...] = NODES, leader: int = 1, **configs: str
    ) -> uuid.UUID:
        topic_id = uuid.uuid4()
        self.publish(
            TopicRecord(name, topic_id),
            *(ConfigRecord(TOPIC_RESOURCE, name, key, value) for key, value in configs.items()),
            PartitionRecord(topic_id, 0, replicas, replicas, leader),
        )
        return topic_id

    def isr(self, topic: str) -> tuple[int, ...]:
        registration = self.image.partition(topic, 0)
        assert registration is not None
        return registration.isr

    def channel(self) -> Callable[[Any], Awaitable[Any]]:
        async def send(request: Any) -> Any:
            await asyncio.sleep(0)  # an answer comes back later than the call, as over a network
            return self.alter_partition(request)

        return send

    def alter_partition(self, request: Any) -> Any:
        self.alter_requests += 1
        if self.refusals:
            refusal = self.refusals.pop(0)
            topics = [
                {"topic_id": t.topic_id, "partitions": [
                    {"partition_index": p.partition_index, "error_code": refusal, "leader_id": -1,
                     "leader_epoch": -1, "partition_epoch": -1} for p in t.partitions]}
                for t in request.topics
            ]  # fmt: skip
            return make_response(56, 3, throttle_time=0, error_code=ErrorCode.none, topics=topics)
        broker = self.image.brokers.get(request.broker_id)
        if broker is None or broker.broker_epoch != request.broker_epoch:
            return make_response(56, 3, throttle_time=0, error_code=ErrorCode.stale_broker_epoch, topics=[])
        topics = []
        for topic in request.topics:
            image_topic = self.image.topics_by_id[topic.topic_id]
            answers = []
            for p in topic.partitions:
                registration = image_topic.partitions[p.partition_index]
                new_isr = tuple(b.broker_id for b in p.new_isr_with_epochs)
                if p.leader_epoch < registration.leader_epoch:
                    code = ErrorCode.fenced_leader_epoch
                elif request.broker_id != registration.leader:
                    code = ErrorCode.invalid_request
                elif p.partition_epoch != registration.partition_epoch:
                    code = ErrorCode.invalid_update_version
                elif registration.leader not in new_isr or not set(new_isr) <= set(registration.replicas):
                    code = ErrorCode.invalid_request
                else:
                    code = ErrorCode.none
                    record = PartitionChangeRecord(topic.topic_id, p.partition_index, isr=new_isr)
                    if self.metadata_lag:
                        # The answer reaches the leader before the record reaches any image.
                        asyncio.get_running_loop().call_later(self.metadata_lag, self.publish, record)
                        registration = replace(
                            registration, isr=new_isr, partition_epoch=registration.partition_epoch + 1
                        )
                    else:
                        self.publish(record)
                        registration = image_topic.partitions[p.partition_index]
                answers.append(
                    {
                        "partition_index": p.partition_index,
                        "error_code": code,
                        "leader_id": registration.leader,
                        "leader_epoch": registration.leader_epoch,
                        "isr": registration.isr,
                        "leader_recovery_state": 0,
                        "partition_epoch": registration.partition_epoch,
                    }
                )
            topics.append({"topic_id": topic.topic_id, "partitions": answers})
        return make_response(56, 3, throttle_time=0, error_code=ErrorCode.none, topics=topics)


@asynccontextmanager
async def cluster(tmp_path: Path, lag_ms: int = 10_000) -> AsyncIterator[Controller]:
    controller = Controller()
    settings = ReplicationSettings(
        replica_lag_time_max_ms=lag_ms, replica_fetch_wait_max_ms=200, replica_fetch_backoff_ms=100
    )
    brokers: list[Broker] = []
    try:
        for node_id in NODES:
            broker = Broker(tmp_path / f"node{node_id}", node_id=node_id, cluster_id=CLUSTER_ID)
            brokers.append(broker)
            await broker.start()
            image = MetadataImage()
            manager = ReplicaManager(
                broker.state,
                node_id,
                settings,
                controller.channel(),
                lambda n=node_id: controller.image.brokers[n].broker_epoch,  # type: ignore[misc]
            )
            broker.state.image = image
            broker.state.replicas = manager
            controller.nodes[node_id] = Node(node_id, broker, image, manager)
        controller.publish(
            *(
                RegisterBrokerRecord(
                    n, 100 + n, uuid.uuid4(), (BrokerEndpoint("PLAINTEXT", "127.0.0.1", b.port),), fenced=False
                )
                for n, b in zip(NODES, brokers, strict=True)
            )
        )
        for node in controller.nodes.values():
            await node.manager.start()
        yield controller
    finally:
        for node in controller.nodes.values():
            await node.manager.stop()
        for broker in brokers:
            await broker.stop()


async def wait_until(check: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


def stored(log: PartitionLog) -> bytes:
    """Every stored batch of the log, as bytes (offsets and leader epochs included)."""
    return log.read(log.log_start_offset, 1 << 30, min_one_batch=True).read_bytes() if log.log_end_offset else b""


def batch_epochs(data: bytes) -> list[tuple[int, int]]:
    """(base offset, partition leader epoch) of each batch in ``data``."""
    out, pos = [], 0
    while pos < len(data):
        header = read_batch_header(data, pos)
        out.append((header.base_offset, header.partition_leader_epoch))
        pos += header.size
    return out


def in_sync(controller: Controller, topic: str, end: int) -> bool:
    logs = [node.log(topic) for node in controller.nodes.values()]
    return all(log.log_end_offset == end and log.high_watermark == end for log in logs) and len(
        {stored(log) for log in logs}
    ) == 1


async def produce(node: Node, topic: str, records: bytes, acks: int = -1, timeout_ms: int = 10_000) -> Any:
    client = await RawClient.connect(node.broker)
    client.timeout = 15.0
    try:
        pdata = sub(0, 9, "PartitionProduceData", index=0, records=records)
        tdata = sub(0, 9, "TopicProduceData", name=topic, partition_data=(pdata,))
        response = await client.call(
            req(0, 9, transactional_id=None, acks=acks, timeout=timeout_ms * MS, topic_data=(tdata,))
        )
    finally:
        client.close()
    return response.responses[0].partition_responses[0]


async def fetch(node: Node, topic: str, offset: int, max_wait_ms: int = 0) -> Any:
    client = await RawClient.connect(node.broker)
    client.timeout = 15.0
    try:
        part = sub(1, 12, "FetchPartition", partition=0, current_leader_epoch=-1, fetch_offset=offset,
                   last_fetched_epoch=-1, log_start_offset=-1, partition_max_bytes=1 << 20)  # fmt: skip
        request = req(1, 12, replica_id=-1, max_wait=max_wait_ms * MS, min_bytes=1, max_bytes=1 << 20,
                      isolation_level=0, session_id=0, session_epoch=-1,
                      topics=(sub(1, 12, "FetchTopic", topic=topic, partitions=(part,)),),
                      forgotten_topics_data=(), rack_id="")  # fmt: skip
        response = await client.call(request)
    finally:
        client.close()
    return response.responses[0].partitions[0]


def idempotent_batch(pid: int, seq: int, count: int = 3) -> bytes:
    records = [(None, f"v-{seq}-{i}".encode(), 1_700_000_000_000 + i, ()) for i in range(count)]
    encoded: bytes = encode_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq)
    return encoded


# -- the scenarios ------------------------------------------------------------------------------


async def test_acks_all_produce_leaves_identical_logs_on_every_replica(tmp_path: Path) -> None:
    async with cluster(tmp_path) as controller:
        controller.create_topic("rep")
        leader = controller.nodes[1]
        bootstrap = ",".join(node.broker.bootstrap_servers for node in controller.nodes.values())
        async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
            for i in range(5):
                await asyncio.gather(*(producer.send("rep", f"r{i}-{j}".encode()) for j in range(4)))
            await producer.flush()
        # Acknowledged means committed: the leader's HW covers everything it took.
        assert leader.log("rep").high_watermark == leader.log("rep").log_end_offset == 20
        await wait_until(lambda: in_sync(controller, "rep", 20), what="followers to match the leader")
        epochs = {node.log("rep").leader_epochs.entries for node in controller.nodes.values()}
        assert len(epochs) == 1
        assert controller.isr("rep") == NODES
        # Followers refuse consumers; the leader serves them.
        follower_answer = await fetch(controller.nodes[2], "rep", 0)
        assert follower_answer.error_code == ErrorCode.not_leader_or_follower
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("rep", 0)])
            got: list[bytes] = []
            deadline = time.monotonic() + 10
            while len(got) < 20 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
        assert got == [f"r{i}-{j}".encode() for i in range(5) for j in range(4)]


async def test_isr_shrinks_and_expands_and_min_insync_guards_acks_all(tmp_path: Path) -> None:
    async with cluster(tmp_path, lag_ms=1000) as controller:
        controller.create_topic("isr", **{"min.insync.replicas": "2"})
        leader = controller.nodes[1]
        assert (await produce(leader, "isr", make_batch([b"a"]))).error_code == ErrorCode.none
        await controller.nodes[3].manager.stop()
        # acks=all waits for node 3 until the leader drops it from the ISR (after the lag time).
        started = time.monotonic()
        answer = await produce(leader, "isr", make_batch([b"b"]))
        assert answer.error_code == ErrorCode.none and answer.base_offset == 1
        assert 0.5 < time.monotonic() - started < 8
        assert controller.isr("isr") == (1, 2)
        assert leader.broker.state.partition_registration("isr", 0).isr == (1, 2)  # type: ignore[union-attr]
        bootstrap = leader.broker.bootstrap_servers
        async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
            await producer.send_and_wait("isr", b"c")
        assert leader.log("isr").high_watermark == 3
        # min.insync.replicas=3 with an ISR of two: refused before anything is appended.
        controller.publish(ConfigRecord(TOPIC_RESOURCE, "isr", "min.insync.replicas", "3"))
        refused = await produce(leader, "isr", make_batch([b"d"]))
        assert refused.error_code == ErrorCode.not_enough_replicas
        assert leader.log("isr").log_end_offset == 3
        assert (await produce(leader, "isr", make_batch([b"d"]), acks=1)).error_code == ErrorCode.none
        # Node 3 comes back, catches up and rejoins; acks=all works again with three.
        await controller.nodes[3].manager.start()
        await wait_until(lambda: controller.isr("isr") == (1, 2, 3), what="node 3 to rejoin the ISR")
        answer = await produce(leader, "isr", make_batch([b"e"]))
        assert answer.error_code == ErrorCode.none and answer.base_offset == 4
        await wait_until(lambda: in_sync(controller, "isr", 5), what="all replicas at offset 5")


async def test_isr_changes_follow_the_controllers_answers(tmp_path: Path) -> None:
    async with cluster(tmp_path, lag_ms=600) as controller:
        topic_id = controller.create_topic("alter")
        leader = controller.nodes[1]
        assert (await produce(leader, "alter", make_batch([b"a"]))).error_code == ErrorCode.none
        # A refusal for a stale partition epoch: no retry until the metadata moves on.
        controller.refusals.append(ErrorCode.invalid_update_version)
        await controller.nodes[3].manager.stop()
        await produce(leader, "alter", make_batch([b"b"]), acks=1)
        await wait_until(lambda: controller.alter_requests == 1, what="the first AlterPartition")
        await asyncio.sleep(1.0)  # three more ISR checks
        assert controller.alter_requests == 1
        state = leader.manager.leader_partition("alter", 0)
        assert state is not None and state.pending is not None and state.pending.awaiting_metadata
        assert state.maximal_isr == (1, 2, 3) and leader.log("alter").high_watermark == 1
        # The metadata moves (a new partition epoch): the next check asks again, and the answer
        # comes before the metadata, which the leader uses at once.
        controller.metadata_lag = 0.5
        controller.publish(PartitionChangeRecord(topic_id, 0, isr=(1, 2, 3)))
        await wait_until(lambda: state.isr == (1, 2), what="the leader to apply the answer")
        assert controller.isr("alter") == (1, 2, 3)  # not published yet
        assert leader.log("alter").high_watermark == 2  # node 3 no longer holds the HW
        await wait_until(lambda: controller.isr("alter") == (1, 2), what="the record to arrive")
        assert state.isr == (1, 2) and state.pending is None and controller.alter_requests == 2


async def test_a_new_leader_makes_the_old_one_truncate_its_uncommitted_tail(tmp_path: Path) -> None:
    async with cluster(tmp_path) as controller:
        topic_id = controller.create_topic("lc")
        old, new = controller.nodes[1], controller.nodes[2]
        for i in range(5):
            assert (await produce(old, "lc", make_batch([f"c{i}".encode()]))).error_code == ErrorCode.none
        await wait_until(lambda: in_sync(controller, "lc", 5), what="committed records everywhere")
        await controller.nodes[2].manager.stop()
        await controller.nodes[3].manager.stop()
        old.log("lc").append(make_batch([b"x", b"y", b"z"]))  # written by the old leader only
        assert (old.log("lc").log_end_offset, old.log("lc").high_watermark) == (8, 5)
        controller.publish(PartitionChangeRecord(topic_id, 0, leader=2))
        await controller.nodes[2].manager.start()
        await controller.nodes[3].manager.start()
        assert new.manager.is_leader("lc", 0) and not old.manager.is_leader("lc", 0)
        await wait_until(lambda: old.log("lc").log_end_offset == 5, what="the old leader to truncate")
        stale = await produce(old, "lc", make_batch([b"late"]))
        assert stale.error_code == ErrorCode.not_leader_or_follower
        answer = await produce(new, "lc", make_batch([b"n1", b"n2"]))
        assert answer.error_code == ErrorCode.none and answer.base_offset == 5
        await wait_until(lambda: in_sync(controller, "lc", 7), what="all replicas to follow the new leader")
        assert old.log("lc").leader_epochs.entries == new.log("lc").leader_epochs.entries
        assert [(e.epoch, e.start_offset) for e in new.log("lc").leader_epochs.entries] == [(0, 0), (1, 5)]
        assert batch_epochs(stored(old.log("lc"))) == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 1)]


async def test_consumers_read_only_up_to_the_high_watermark(tmp_path: Path) -> None:
    async with cluster(tmp_path) as controller:
        controller.create_topic("hw")
        leader = controller.nodes[1]
        await controller.nodes[2].manager.stop()
        await controller.nodes[3].manager.stop()
        answer = await produce(leader, "hw", make_batch([b"a", b"b", b"c"]), acks=1)
        assert answer.error_code == ErrorCode.none
        assert (leader.log("hw").log_end_offset, leader.log("hw").high_watermark) == (3, 0)
        nothing = await fetch(leader, "hw", 0)
        assert nothing.error_code == ErrorCode.none and not nothing.records and nothing.high_watermark == 0
        # A consumer's long poll wakes when the followers catch up and the HW moves.
        started = time.monotonic()
        waiting = asyncio.create_task(fetch(leader, "hw", 0, max_wait_ms=8000))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await controller.nodes[2].manager.start()
        await controller.nodes[3].manager.start()
        woken = await waiting
        assert woken.error_code == ErrorCode.none and woken.high_watermark == 3 and woken.records
        assert time.monotonic() - started < 6
        await wait_until(lambda: in_sync(controller, "hw", 3), what="followers to learn the HW")


async def test_producer_idempotence_state_survives_a_leader_change(tmp_path: Path) -> None:
    async with cluster(tmp_path) as controller:
        topic_id = controller.create_topic("idem")
        old, new = controller.nodes[1], controller.nodes[2]
        first = await produce(old, "idem", idempotent_batch(4242, 0))
        assert first.error_code == ErrorCode.none and first.base_offset == 0
        await wait_until(lambda: in_sync(controller, "idem", 3), what="the batch on every replica")
        controller.publish(PartitionChangeRecord(topic_id, 0, leader=2))
        # The producer retries the batch whose answer it lost, now at the new leader.
        retried = await produce(new, "idem", idempotent_batch(4242, 0))
        assert retried.error_code == ErrorCode.none and retried.base_offset == 0
        assert new.log("idem").log_end_offset == 3
        following = await produce(new, "idem", idempotent_batch(4242, 3))
        assert following.error_code == ErrorCode.none and following.base_offset == 3
        gap = await produce(new, "idem", idempotent_batch(4242, 10))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        await wait_until(lambda: in_sync(controller, "idem", 6), what="all replicas at offset 6")


async def test_acks_all_times_out_when_the_isr_cannot_commit(tmp_path: Path) -> None:
    async with cluster(tmp_path) as controller:
        controller.create_topic("slow")
        await controller.nodes[2].manager.stop()
        answer = await produce(controller.nodes[1], "slow", make_batch([b"a"]), timeout_ms=300)
        assert answer.error_code == ErrorCode.request_timed_out
        assert controller.nodes[1].log("slow").log_end_offset == 1


async def test_replicas_moved_off_a_node_and_removed_topics_lose_their_logs(tmp_path: Path) -> None:
    async with cluster(tmp_path) as controller:
        topic_id = controller.create_topic("gone", **{"retention.ms": "3600000"})
        assert (await produce(controller.nodes[1], "gone", make_batch([b"a"]))).error_code == ErrorCode.none
        await wait_until(lambda: in_sync(controller, "gone", 1), what="the record everywhere")
        third = controller.nodes[3]
        assert third.broker.state.topics.get("gone").configs == {"retention.ms": "3600000"}  # type: ignore[union-attr]
        assert third.log("gone").config.retention_ms == 3_600_000
        directory = third.log("gone").directory
        controller.publish(PartitionChangeRecord(topic_id, 0, isr=(1, 2), replicas=(1, 2)))
        assert third.broker.state.partition_log("gone", 0) is None and not directory.exists()
        assert (await produce(controller.nodes[1], "gone", make_batch([b"b"]))).error_code == ErrorCode.none
        controller.publish(RemoveTopicRecord(topic_id))
        for node in controller.nodes.values():
            assert node.broker.state.topics.get("gone") is None
            assert node.broker.state.partition_log("gone", 0) is None
        answer = await produce(controller.nodes[1], "gone", make_batch([b"c"]))
        assert answer.error_code == ErrorCode.unknown_topic_or_partition


def test_truncation_offset_follows_kafkas_rules(tmp_path: Path) -> None:
    log = PartitionLog.open(tmp_path / "t-0", LogConfig(), single_replica=False)
    for epoch, count in ((0, 3), (2, 4), (4, 2)):
        log.become_leader(epoch)
        for _ in range(count):
            log.append(make_batch([b"v"]))
    log.update_high_watermark(5)
    assert truncation_offset(log, 2, 7) == (7, None)  # same epoch, the leader's ends at 7
    assert truncation_offset(log, 4, 20) == (9, None)  # never beyond our own end
    assert truncation_offset(log, -1, -1) == (5, None)  # nothing known: keep the committed part
    assert truncation_offset(log, 3, 8) == (7, 2)  # we have no epoch 3: cut where 2 ends, ask for 2
    assert truncation_offset(log, 6, 8) == (8, None)  # our epochs are older than the answer
