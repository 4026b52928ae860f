"""KIP-320 in the consumer: leader epochs in commits, and positions checked against the leader.

A truncated log (an unclean leader election) needs several brokers to happen for
real (tests/test_chaos*.py do that). On one node the same code path runs when a
committed offset carries a leader epoch the leader's log does not back: an offset
past the end of its epoch (the log "diverged" there) or an epoch the leader never
had. A consumer that did not check would fetch at the committed offset, get
OFFSET_OUT_OF_RANGE and reset by its policy instead.

Both brokers serve this: broker_min keeps a leader-epoch cache per partition and
answers OffsetForLeaderEpoch (tests/test_broker_leader_epochs.py).
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafkakit import Admin
from kafkakit.consumer import Consumer
from kafkakit.errors import LogTruncationError
from kafkakit.structs import OffsetAndMetadata, TopicPartition
from test_consumer import consumer_for, read, setup_topic, values, write


@pytest.fixture
def bootstrap(broker: Any) -> str:
    return str(broker.bootstrap_servers)


async def _leader_epoch(bootstrap: str, topic: str) -> int:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        (description,) = await admin.describe_topics([topic])
    return description.partitions[0].leader_epoch


async def _until_assigned(consumer: Consumer) -> None:
    for _ in range(100):
        if consumer.assignment():
            return
        await consumer.getmany(timeout_ms=100)
    raise AssertionError("no assignment")


async def _commit(bootstrap: str, group: str, tp: TopicPartition, offset: OffsetAndMetadata) -> None:
    async with Consumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False) as committer:
        await committer.commit({tp: offset})


async def test_commits_carry_the_leader_epoch_of_the_last_record_read(bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    async with consumer_for(bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        await read(consumer, 10)
        await consumer.commit()
        (committed,) = (await consumer.committed_offsets([tp])).values()
    epoch = await _leader_epoch(bootstrap, topic)
    assert committed.offset == 10
    # Kafka stamps each batch with the leader's epoch; a broker without epochs reports -1.
    assert committed.leader_epoch == (epoch if epoch >= 0 else None)


async def test_a_committed_position_past_its_epochs_end_resumes_at_the_divergence(
    broker: Any, bootstrap: str, topic: str
) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    epoch = await _leader_epoch(bootstrap, topic)
    await _commit(bootstrap, group, tp, OffsetAndMetadata(100, "", epoch))
    async with consumer_for(bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        await _until_assigned(consumer)
        assert await consumer.position(tp) == 10
        await write(bootstrap, topic, [b"after"])
        (record,) = await read(consumer, 1)
    # Epoch `epoch` ends at offset 10 in the leader's log: the consumer goes on from there,
    # where an unchecked fetch at 100 would have reset to the earliest offset (0).
    assert (record.offset, record.value) == (10, b"after")


async def test_with_no_reset_policy_a_divergence_raises_log_truncation(
    broker: Any, bootstrap: str, topic: str
) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    epoch = await _leader_epoch(bootstrap, topic)
    await _commit(bootstrap, group, tp, OffsetAndMetadata(100, "", epoch))
    async with consumer_for(bootstrap, group_id=group, auto_offset_reset="none") as consumer:
        consumer.subscribe([topic])
        with pytest.raises(LogTruncationError) as raised:
            for _ in range(100):
                await consumer.getmany(timeout_ms=200)
        assert raised.value.divergent_offsets == {tp: 10}
        consumer.seek(tp, 10)  # the application decides; reading goes on
        await write(bootstrap, topic, [b"after"])
        (record,) = await read(consumer, 1)
    assert (record.offset, record.value) == (10, b"after")


async def test_an_epoch_the_leader_never_had_resets_by_policy(broker: Any, bootstrap: str, topic: str) -> None:
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    epoch = await _leader_epoch(bootstrap, topic)
    await _commit(bootstrap, group, tp, OffsetAndMetadata(5, "", epoch + 7))
    async with consumer_for(bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        records = await read(consumer, 10)
    assert [r.offset for r in records] == list(range(10))  # earliest, not the committed 5
    async with consumer_for(bootstrap, group_id=group, auto_offset_reset="none") as strict:
        strict.subscribe([topic])
        with pytest.raises(LogTruncationError) as raised:
            for _ in range(100):
                await strict.getmany(timeout_ms=200)
    assert raised.value.divergent_offsets == {tp: None}


async def test_an_out_of_range_committed_offset_resets_by_the_policy(bootstrap: str, topic: str) -> None:
    """A committed offset past the log end (no epoch to check) is out of range: the consumer resets
    by auto_offset_reset, as Java does, instead of going back to the same committed offset forever."""
    await setup_topic(bootstrap, topic)
    await write(bootstrap, topic, values(10))
    tp = TopicPartition(topic, 0)
    group = f"g-{uuid.uuid4().hex[:8]}"
    await _commit(bootstrap, group, tp, OffsetAndMetadata(100))
    async with consumer_for(bootstrap, group_id=group, enable_auto_commit=False) as consumer:
        consumer.subscribe([topic])
        records = await read(consumer, 10)
    assert [r.offset for r in records] == list(range(10))
