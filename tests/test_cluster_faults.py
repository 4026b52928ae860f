"""Storage faults on a 3-node broker_min cluster (issue 13): real node processes, real disks.

* A full disk on a leader: its Produce answers KAFKA_STORAGE_ERROR, nothing partial stays in
  the segment, other partitions and reads go on, writes work again once there is space, and
  the log reopens whole after a kill.
* A full disk on a follower: it stops making progress and leaves the ISR; acks=all goes on
  with min.insync.replicas=2; with space back it catches up and rejoins.
* A corrupt or torn segment on a follower: recovery cuts it, the follower fetches the rest
  again and ends byte-identical to the leader.
* A leader killed while a producer streams acks=all batches (with a torn tail and an
  uncommitted divergent batch on its disk): it recovers, rejoins as a follower, truncates
  the divergent tail by leader epoch, and every acknowledged record is read exactly once.
* ``__consumer_offsets`` (compacted, RF 3) stays small under many commits: every replica's
  cleaner compacts it, below the high watermark.

The disk is full for real (tests/disk_faults.py): each node's partition directory is a small
tmpfs that gets filled, or, where mount is not allowed, the node's RLIMIT_FSIZE is lowered
below the next write (``prlimit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.broker import LocalCluster
from kafkakit.broker.local_cluster import PartitionState
from kafkakit.broker.log import read_batch_header
from kafkakit.records import encode_batch

from tests import disk_faults
from tests.brokers import new_topic_name
from tests.raw_protocol import RawClient, req, sub

pytestmark = pytest.mark.timeout(120)

KAFKA_STORAGE_ERROR = 56
MS = datetime.timedelta(milliseconds=1)


# ---- helpers ---------------------------------------------------------------------------------


async def _wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


def _partition_dir(cluster: LocalCluster, node_id: int, topic: str, partition: int = 0) -> Path:
    return cluster.data_dir / f"node-{node_id}" / f"{topic}-{partition}"


def _segment_bytes(cluster: LocalCluster, node_id: int, topic: str, partition: int = 0) -> bytes:
    directory = _partition_dir(cluster, node_id, topic, partition)
    return b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))


def _batches(data: bytes) -> list[tuple[int, int, int]]:
    """(position, base offset, size) of each whole batch."""
    out, pos = [], 0
    while pos + 61 <= len(data):
        header = read_batch_header(data, pos)
        if pos + header.size > len(data):
            break
        out.append((pos, header.base_offset, header.size))
        pos += header.size
    return out


async def _identical_logs(cluster: LocalCluster, topic: str, nodes: list[int], timeout: float = 30) -> bytes:
    """Wait until every node in ``nodes`` holds the same segment bytes; returns them."""

    async def same() -> bool:
        return len({_segment_bytes(cluster, n, topic) for n in nodes}) == 1

    await _wait_for(same, timeout, f"identical logs of {topic} on nodes {nodes}")
    return _segment_bytes(cluster, nodes[0], topic)


async def _state(cluster: LocalCluster, topic: str, node_id: int, partition: int = 0) -> PartitionState:
    state = await cluster.partition_state(topic, partition, node_id)
    assert state is not None, f"node {node_id} does not know {topic}-{partition}"
    return state


async def _consume(bootstrap: str, topic: str, expected: int, partitions: int = 1, timeout: float = 30) -> list[bytes]:
    values: list[bytes] = []
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(values) < expected and loop.time() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                values.extend(r.value for r in records if r.value is not None)
        # Anything beyond what was expected (a duplicate) shows up here too.
        for records in (await consumer.getmany(timeout_ms=300)).values():
            values.extend(r.value for r in records if r.value is not None)
    return values


async def _produce_raw(address: str, topic: str, partition: int, value: bytes, acks: int = -1) -> Any:
    """One Produce v9 of one record to ``address``; the partition's answer."""
    client = await RawClient.connect(address)
    try:
        batch = encode_batch([(None, value, 1_700_000_000_000, ())])
        pdata = sub(0, 9, "PartitionProduceData", index=partition, records=batch)
        tdata = sub(0, 9, "TopicProduceData", name=topic, partition_data=(pdata,))
        request = req(0, 9, transactional_id=None, acks=acks, timeout=10_000 * MS, topic_data=(tdata,))
        response = await client.call(request)
        return response.responses[0].partition_responses[0]
    finally:
        client.close()


def _pid(cluster: LocalCluster, node_id: int) -> int:
    pid = cluster.pid(node_id)
    assert pid is not None, f"node {node_id} is not running"
    return pid


class FullDisk:
    """The partition directories of one topic on disks that can be filled, node by node.

    With a tmpfs (:meth:`mount`, once the nodes run and before the topic is created) each
    node's ``<topic>-0`` is its own small filesystem: :meth:`fill` writes a filler file until
    ENOSPC, :meth:`free` deletes it.  Without, :meth:`fill` lowers the node's RLIMIT_FSIZE to
    just past its segment file, so the next append to it fails half-written with EFBIG; the
    segment must then be the node's largest growing file (the metadata log stays far smaller
    in these tests).  :meth:`unmount` after the nodes stopped.
    """

    def __init__(self, data_dir: Path, topic: str, size: str = "4m") -> None:
        self.data_dir, self.topic, self.size = data_dir, topic, size
        self.tmpfs = disk_faults.tmpfs_available()
        self.cluster: LocalCluster | None = None
        self._mounted: list[Path] = []

    def _dir(self, node_id: int) -> Path:
        return self.data_dir / f"node-{node_id}" / f"{self.topic}-0"

    def mount(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        if self.tmpfs:
            for node_id in cluster.node_ids:
                disk_faults.mount_tmpfs(self._dir(node_id), self.size)
                self._mounted.append(self._dir(node_id))

    def fill(self, node_id: int) -> None:
        assert self.cluster is not None
        if self.tmpfs:
            disk_faults.fill(self._dir(node_id))
        else:
            size = max(p.stat().st_size for p in self._dir(node_id).glob("*.log"))
            assert size > 64 * 1024, "the segment must outgrow the node's other files"
            disk_faults.limit_file_size(_pid(self.cluster, node_id), size + 64)

    def free(self, node_id: int) -> None:
        assert self.cluster is not None
        if self.tmpfs:
            disk_faults.free(self._dir(node_id))
        else:
            disk_faults.limit_file_size(_pid(self.cluster, node_id), None)

    def unmount(self) -> None:
        for path in self._mounted:
            disk_faults.unmount(path)


@contextlib.asynccontextmanager
async def _cluster(tmp_path: Path, **config: str) -> AsyncIterator[LocalCluster]:
    async with LocalCluster(3, tmp_path, config={"min.insync.replicas": "2", **config}) as cluster:
        yield cluster


@contextlib.asynccontextmanager
async def _cluster_with_full_disks(
    tmp_path: Path, topic: str, **config: str
) -> AsyncIterator[tuple[LocalCluster, FullDisk]]:
    """A cluster whose nodes keep ``topic``-0 on disks that :class:`FullDisk` fills."""
    disk = FullDisk(tmp_path, topic)
    try:
        async with _cluster(tmp_path, **config) as cluster:
            disk.mount(cluster)
            yield cluster, disk
    finally:
        disk.unmount()  # after the nodes are gone


async def _create(cluster: LocalCluster, topic: str, partitions: int = 1) -> None:
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 3)])

    async def led() -> bool:
        states = [await cluster.partition_state(topic, p, 1) for p in range(partitions)]
        return all(s is not None and s.leader > 0 and len(s.isr) == 3 for s in states)

    await _wait_for(led, 15, f"{topic} to have leaders")


async def _produce(bootstrap: str, topic: str, values: list[bytes], **settings: Any) -> None:
    """acks=all, ten records at a time (so that the log holds many batches)."""
    async with Producer(bootstrap_servers=bootstrap, acks="all", **settings) as producer:
        for i in range(0, len(values), 10):
            await asyncio.gather(*[await producer.send(topic, v, partition=0) for v in values[i : i + 10]])


# ---- a full disk -----------------------------------------------------------------------------


async def test_a_full_disk_on_the_leader_fails_its_appends_cleanly(tmp_path: Path) -> None:
    topic, other = new_topic_name("full"), new_topic_name("other")
    async with _cluster_with_full_disks(tmp_path, topic) as (cluster, disk):
        await _create(cluster, topic)
        await _create(cluster, other, partitions=6)
        leader = (await _state(cluster, topic, 1)).leader
        acknowledged = [f"a{i:04d}".encode().ljust(1000, b".") for i in range(100)]
        await _produce(cluster.bootstrap_servers, topic, acknowledged)
        before = await _identical_logs(cluster, topic, cluster.node_ids)

        disk.fill(leader)
        for acks in (-1, 1, -1):
            answer = await _produce_raw(cluster.address(leader), topic, 0, b"F" * 9000, acks)
            assert answer.error_code == KAFKA_STORAGE_ERROR, answer
        # Nothing partial on the leader's disk, nothing replicated, nobody thrown out of the ISR.
        assert _segment_bytes(cluster, leader, topic) == before
        assert sorted((await _state(cluster, topic, leader)).isr) == [1, 2, 3]
        # The node serves its other partitions and reads of the full one.
        mine = [p for p in range(6) if (await _state(cluster, other, leader, p)).leader == leader][0]
        assert (await _produce_raw(cluster.address(leader), other, mine, b"elsewhere")).error_code == 0
        assert await _consume(cluster.address(leader), topic, 100) == acknowledged

        disk.free(leader)
        more = [f"b{i:04d}".encode().ljust(1000, b".") for i in range(10)]
        await _produce(cluster.bootstrap_servers, topic, more)
        after = await _identical_logs(cluster, topic, cluster.node_ids)
        assert after.startswith(before) and len(_batches(after)) > len(_batches(before))

        # A crash now: the log is re-verified on restart and nothing needs cutting.
        await cluster.kill(leader)
        await cluster.start_node(leader)
        assert _segment_bytes(cluster, leader, topic) == after
        assert "torn or corrupt" not in cluster.log_path(leader).read_text()
        assert await _consume(cluster.bootstrap_servers, topic, 110) == acknowledged + more


async def test_a_full_disk_on_a_follower_takes_it_out_of_the_isr_until_there_is_space(tmp_path: Path) -> None:
    topic = new_topic_name("ffull")
    async with _cluster_with_full_disks(tmp_path, topic, **{"replica.lag.time.max.ms": "2000"}) as (cluster, disk):
        await _create(cluster, topic)
        state = await _state(cluster, topic, 1)
        leader = state.leader
        follower = next(r for r in state.replicas if r != leader)
        first = [f"a{i:04d}".encode().ljust(2000, b".") for i in range(60)]
        await _produce(cluster.bootstrap_servers, topic, first)
        await _identical_logs(cluster, topic, cluster.node_ids)

        disk.fill(follower)
        second = [f"b{i:04d}".encode().ljust(2000, b".") for i in range(150)]
        async with Producer(bootstrap_servers=cluster.bootstrap_servers, acks="all", linger_ms=5) as producer:
            for i in range(0, len(second), 10):
                futures = [await producer.send(topic, v, partition=0) for v in second[i : i + 10]]
                await asyncio.gather(*futures)  # acks=all keeps being answered
                await asyncio.sleep(0.05)

        async def shrunk() -> bool:
            return follower not in (await _state(cluster, topic, leader)).isr

        await _wait_for(shrunk, 15, "the full follower to leave the ISR")
        stalled = _segment_bytes(cluster, follower, topic)
        await asyncio.sleep(1.5)
        assert _segment_bytes(cluster, follower, topic) == stalled  # no progress
        leader_log = _segment_bytes(cluster, leader, topic)
        assert leader_log.startswith(stalled) and len(stalled) < len(leader_log)
        assert sorted((await _state(cluster, topic, leader)).isr) == sorted(
            r for r in state.replicas if r != follower
        )

        disk.free(follower)

        async def rejoined() -> bool:
            return sorted((await _state(cluster, topic, leader)).isr) == [1, 2, 3]

        await _wait_for(rejoined, 30, "the follower to rejoin the ISR")
        await _identical_logs(cluster, topic, cluster.node_ids)
        assert await _consume(cluster.bootstrap_servers, topic, 210) == first + second


# ---- corrupt and torn segments ---------------------------------------------------------------


async def test_a_corrupt_or_torn_follower_segment_is_cut_and_fetched_again(tmp_path: Path) -> None:
    async with _cluster(tmp_path) as cluster:
        topic = new_topic_name("corrupt")
        await _create(cluster, topic)
        state = await _state(cluster, topic, 1)
        leader = state.leader
        followers = [r for r in state.replicas if r != leader]
        acknowledged = [f"a{i:04d}-".encode().ljust(200 + 37 * (i % 9), b"x") for i in range(200)]
        await _produce(cluster.bootstrap_servers, topic, acknowledged)
        original = await _identical_logs(cluster, topic, cluster.node_ids)
        batches = _batches(original)
        assert len(batches) > 10

        for round_, (follower, damage) in enumerate(zip(followers, ("flip", "tear"), strict=True)):
            await cluster.kill(follower)  # unclean: recovery re-verifies the unflushed tail
            segment = next(_partition_dir(cluster, follower, topic).glob("*.log"))
            data = bytearray(segment.read_bytes())
            position, _, size = batches[len(batches) // 2]
            if damage == "flip":
                for i in range(position + 70, position + 80):  # inside the records: the CRC fails
                    data[i] ^= 0xFF
                segment.write_bytes(bytes(data))
            else:
                segment.write_bytes(bytes(data[: position + size // 2]))  # cut in the middle of a batch
            # More acknowledged records while it is down (ISR: the two others).
            extra = [f"r{round_}-{i:03d}".encode().ljust(300, b"y") for i in range(50)]
            await _produce(cluster.bootstrap_servers, topic, extra)
            acknowledged += extra

            await cluster.start_node(follower)
            node_log = cluster.log_path(follower).read_text()
            assert f"torn or corrupt data at byte {position} " in node_log, node_log[-3000:]
            await _identical_logs(cluster, topic, cluster.node_ids)

            async def back_in_sync() -> bool:
                return sorted((await _state(cluster, topic, leader)).isr) == [1, 2, 3]  # noqa: B023

            await _wait_for(back_in_sync, 30, f"node {follower} to rejoin the ISR")

        # The repaired followers lead now: no acknowledged record was lost or doubled.
        await cluster.stop(leader)

        async def moved() -> bool:
            found = await cluster.partition_state(topic, 0, followers[0])
            return found is not None and found.leader in followers

        await _wait_for(moved, 20, "a repaired follower to lead")
        survivors = ",".join(cluster.address(n) for n in followers)
        assert await _consume(survivors, topic, len(acknowledged)) == acknowledged


async def test_a_leader_killed_mid_append_recovers_and_truncates_its_divergent_tail(tmp_path: Path) -> None:
    async with _cluster(tmp_path) as cluster:
        topic = new_topic_name("midappend")
        await _create(cluster, topic)
        leader = (await _state(cluster, topic, 1)).leader
        acknowledged: list[bytes] = []
        failed: list[bytes] = []
        killed = asyncio.Event()

        async def stream() -> None:
            async with Producer(
                bootstrap_servers=cluster.bootstrap_servers, acks="all", enable_idempotence=True, linger_ms=2,
                request_timeout_ms=5000, delivery_timeout_ms=60000,
            ) as producer:  # fmt: skip
                for chunk in range(40):
                    values = [f"k{chunk:03d}-{i:02d}".encode().ljust(150, b"z") for i in range(20)]
                    futures = [await producer.send(topic, v, partition=0) for v in values]
                    results = await asyncio.gather(*futures, return_exceptions=True)
                    for value, result in zip(values, results, strict=True):
                        (failed if isinstance(result, BaseException) else acknowledged).append(value)
                    if chunk == 8:
                        killed.set()
                        await asyncio.sleep(0)  # the kill lands while the next chunks are in flight

        producing = asyncio.create_task(stream())
        await killed.wait()
        await asyncio.sleep(0.05)
        await cluster.kill(leader)
        await producing
        assert len(acknowledged) >= 700, f"{len(failed)} sends failed"

        # What a crash in the middle of an append leaves on the old leader's disk: a batch it
        # wrote and never replicated (its epoch, the next offset), then half of another one.
        segment = next(_partition_dir(cluster, leader, topic).glob("*.log"))
        data = segment.read_bytes()
        position, _, size = _batches(data)[-1]
        data, last = data[: position + size], data[position : position + size]
        next_offset = read_batch_header(last, 0).last_offset + 1
        divergent = struct.pack(">q", next_offset) + last[8:]  # the CRC does not cover the offset
        segment.write_bytes(data + divergent + last[: size // 2])

        await cluster.start_node(leader)
        node_log = cluster.log_path(leader).read_text()
        assert f"truncating {size // 2} bytes of torn or corrupt data" in node_log, node_log[-3000:]
        logs = await _identical_logs(cluster, topic, cluster.node_ids, timeout=40)
        assert divergent not in logs
        assert f"truncating {topic}-0 from" in cluster.log_path(leader).read_text()

        values = await _consume(cluster.bootstrap_servers, topic, len(acknowledged), timeout=40)
        assert len(values) == len(set(values)), "a record was read twice"
        assert set(acknowledged) <= set(values), "an acknowledged record is missing"
        assert set(values) <= set(acknowledged) | set(failed)
        sent_order = {v: i for i, v in enumerate(sorted(acknowledged + failed))}
        assert [sent_order[v] for v in values] == sorted(sent_order[v] for v in values)  # in order


# ---- log maintenance on replicated logs ------------------------------------------------------


async def test_the_offsets_topic_stays_small_under_many_commits(tmp_path: Path) -> None:
    async with _cluster(tmp_path, **{"log.cleaner.backoff.ms": "200"}) as cluster:
        topic, group = new_topic_name("committed"), new_topic_name("g")
        await _create(cluster, topic)
        tp = TopicPartition(topic, 0)
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            await admin.alter_consumer_group_offsets(group, {tp: 0})  # creates __consumer_offsets
            await admin.incremental_alter_configs(
                "__consumer_offsets",
                {"segment.bytes": ("set", "8192"), "min.cleanable.dirty.ratio": ("set", "0.1")},
            )
            commits = 1000
            for offset in range(1, commits + 1):
                await admin.alter_consumer_group_offsets(group, {tp: offset})

            def sizes() -> dict[int, int]:
                return {
                    n: sum(p.stat().st_size for p in _partition_dir(cluster, n, "__consumer_offsets").glob("*.log"))
                    for n in cluster.node_ids
                }

            # ~140 KB of commit records went in (one ~140-byte batch each); compacted, each
            # replica keeps about one record per key below its active segment.
            async def compacted() -> bool:
                return all(size < 3 * 8192 for size in sizes().values())

            await _wait_for(compacted, 30, f"__consumer_offsets compacted on every node ({sizes()})")
            for n in cluster.node_ids:
                bases = [int(p.stem) for p in _partition_dir(cluster, n, "__consumer_offsets").glob("*.log")]
                assert max(bases) >= commits - 100  # the records were there: segments rolled up to here
            assert (await admin.list_consumer_group_offsets(group))[tp].offset == commits
        for n in cluster.node_ids:
            checkpoint = (cluster.data_dir / f"node-{n}" / "cleaner-offset-checkpoint").read_text().split()
            assert "__consumer_offsets" in checkpoint
        # The coordinator's node dies: the next one loads the compacted log, latest commit included.
        coordinator = (await _state(cluster, "__consumer_offsets", 1)).leader
        await cluster.kill(coordinator)
        survivors = ",".join(cluster.address(n) for n in cluster.node_ids if n != coordinator)

        async def loaded() -> bool:
            try:
                async with Admin(bootstrap_servers=survivors) as admin:
                    found = await admin.list_consumer_group_offsets(group)
            except Exception:
                return False
            return tp in found and found[tp].offset == commits

        await _wait_for(loaded, 30, "the group's offsets on a new coordinator")
