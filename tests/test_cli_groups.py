"""Admin's group/offset/config methods in-process, and ``kafkakit groups`` as a process, on both brokers."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from kafkakit import Admin, Consumer, NewTopic, Producer, TopicPartition
from kafkakit.errors import BrokerResponseError, UnknownTopicOrPartitionError, for_code
from kafkakit.structs import OffsetAndMetadata

from tests.brokers import RunningBroker
from tests.cli_helpers import kafkakit, ok

# Kafka's error classes without a hand-written class are generated per code.
InvalidConfigError = for_code(40)
NonEmptyGroupError = for_code(68)
GroupIdNotFoundError = for_code(69)


async def _topic_with_records(bs: str, topic: str, partitions: int = 2, per_partition: int = 3) -> int:
    """Create ``topic`` and write ``per_partition`` records to each partition; returns a timestamp between them."""
    async with Admin(bootstrap_servers=bs) as admin:
        # The records carry 1970 timestamps: with the default retention.ms (7 days) Kafka's next
        # retention check (30 s after start, then every 5 min) deletes them, and "earliest" moves.
        await admin.create_topics([NewTopic(topic, partitions, 1, {"retention.ms": "-1"})])
    async with Producer(bootstrap_servers=bs) as producer:
        for p in range(partitions):
            await producer.send_and_wait(topic, b"early", partition=p, timestamp_ms=1_000_000)
            for i in range(1, per_partition):
                await producer.send_and_wait(topic, b"v%d" % i, partition=p, timestamp_ms=2_000_000 + i)
    return 1_500_000


async def test_admin_group_and_offset_methods(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    middle = await _topic_with_records(bs, topic)
    group = f"{topic}-g"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    async with Admin(bootstrap_servers=bs) as admin:
        offsets = await admin.list_offsets({tp0: "earliest", tp1: "latest"})
        assert (offsets[tp0].offset, offsets[tp1].offset) == (0, 3)
        by_time = await admin.list_offsets({tp0: middle, tp1: 3_000_000})
        assert by_time[tp0].offset == 1 and by_time[tp0].timestamp == 2_000_001
        assert by_time[tp1].offset == -1  # nothing at or after that time
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.list_offsets({TopicPartition(topic, 7): "latest"})

        await admin.alter_consumer_group_offsets(group, {tp0: 2, tp1: OffsetAndMetadata(1, "meta")})
        committed = await admin.list_consumer_group_offsets(group)
        assert committed[tp0].offset == 2 and committed[tp1] == OffsetAndMetadata(
            1, "meta", committed[tp1].leader_epoch
        )
        assert list(await admin.list_consumer_group_offsets(group, [tp1])) == [tp1]
        assert group in {g.group_id for g in await admin.list_groups()}
        (idle,) = await admin.describe_groups([group])
        assert idle.state == "Empty" and idle.members == ()
        (missing,) = await admin.describe_groups([f"{topic}-nobody"])
        assert missing.state == "Dead"

        consumer = Consumer(
            bootstrap_servers=bs, group_id=group, client_id="cli-test-member", session_timeout_ms=10000
        )
        await consumer.start()
        try:
            consumer.subscribe([topic])
            deadline = time.monotonic() + 30
            while not consumer.assignment() and time.monotonic() < deadline:
                await consumer.getmany(timeout_ms=200)
            (live,) = await admin.describe_groups([group])
            assert live.state == "Stable" and live.protocol_type == "consumer"
            (member,) = live.members
            assert member.client_id == "cli-test-member" and set(member.assignment) == {tp0, tp1}
            with pytest.raises(NonEmptyGroupError):
                await admin.delete_groups([group])
            with pytest.raises(
                BrokerResponseError
            ) as refused:  # a live group's offsets are its members' to commit
                await admin.alter_consumer_group_offsets(group, {tp0: 0})
            assert refused.value.code in (
                22,
                25,
                27,
            )  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS
        finally:
            await consumer.stop()
        await admin.delete_groups([group])
        with pytest.raises(GroupIdNotFoundError):
            await admin.delete_groups([group])
        assert await admin.list_consumer_group_offsets(group) == {}


async def _configs_once(
    admin: Admin, topic: str, settled: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """The topic's config entries once ``settled`` holds for them (10 s at most).

    Apache Kafka answers IncrementalAlterConfigs once its controller has committed the change;
    the broker that answers DescribeConfigs applies it when its metadata image catches up, a
    moment later (seen once in a full run: the old retention.ms right after the alter).
    """
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        entries = {e.name: e for e in await admin.describe_config_entries(topic)}
        if settled(entries) or asyncio.get_running_loop().time() > deadline:
            return entries
        await asyncio.sleep(0.1)


async def test_admin_incremental_alter_configs(broker: RunningBroker, topic: str) -> None:
    async with Admin(bootstrap_servers=broker.bootstrap_servers) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.incremental_alter_configs(topic, {"retention.ms": ("set", "120000")})
        entries = await _configs_once(admin, topic, lambda e: e["retention.ms"].value == "120000")
        assert entries["retention.ms"].value == "120000" and entries["retention.ms"].is_override
        assert (await admin.describe_configs(topic))["retention.ms"] == "120000"
        await admin.incremental_alter_configs(topic, {"cleanup.policy": ("append", "compact")})
        entries = await _configs_once(admin, topic, lambda e: "compact" in e["cleanup.policy"].value)
        assert set(entries["cleanup.policy"].value.split(",")) == {"delete", "compact"}
        await admin.incremental_alter_configs(
            topic, {"retention.ms": ("delete", None), "cleanup.policy": ("subtract", "compact")}
        )
        entries = await _configs_once(admin, topic, lambda e: not e["retention.ms"].is_override)
        assert not entries["retention.ms"].is_override and entries["cleanup.policy"].value == "delete"
        with pytest.raises(InvalidConfigError):
            await admin.incremental_alter_configs(topic, {"retention.ms": ("set", "soon")})
        await admin.incremental_alter_configs(topic, {"retention.ms": ("set", "5")}, validate_only=True)
        assert (await admin.describe_configs(topic))["retention.ms"] != "5"
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.incremental_alter_configs(f"{topic}-missing", {"retention.ms": ("set", "1000")})


async def test_groups_commands(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    await _topic_with_records(bs, topic)
    group = f"{topic}-cli"
    out = ok(kafkakit("consume", "--bootstrap-server", bs, "--topic", topic, "--group", group, "--from-beginning",
                      "--max-messages", "6"))  # fmt: skip
    assert sorted(out.split()) == sorted(["early", "v1", "v2"] * 2)

    listed = json.loads(ok(kafkakit("groups", "list", "--bootstrap-server", bs, "--output", "json")))
    assert {"group": group, "state": "Empty", "protocol_type": "consumer"} in listed
    described = json.loads(
        ok(kafkakit("groups", "describe", "--bootstrap-server", bs, "--group", group, "--output", "json"))
    )
    assert described["state"] == "Empty"
    rows = {(r["topic"], r["partition"]): r for r in described["partitions"]}
    assert rows[(topic, 0)]["current_offset"] == 3 and rows[(topic, 0)]["log_end_offset"] == 3
    assert rows[(topic, 1)]["lag"] == 0
    table = ok(kafkakit("groups", "describe", "--bootstrap-server", bs, "--group", group))
    assert (
        "CURRENT-OFFSET" in table and "LOG-END-OFFSET" in table and "LAG" in table and "State: Empty" in table
    )

    reset = ["groups", "reset-offsets", "--bootstrap-server", bs, "--group", group]
    plan = json.loads(ok(kafkakit(*reset, "--topic", topic, "--shift-by", "-2", "--output", "json")))
    assert plan["executed"] is False
    assert {(o["partition"], o["previous_offset"], o["new_offset"]) for o in plan["offsets"]} == {
        (0, 3, 1),
        (1, 3, 1),
    }
    described = json.loads(
        ok(kafkakit("groups", "describe", "--bootstrap-server", bs, "--group", group, "--output", "json"))
    )
    assert [r["current_offset"] for r in described["partitions"]] == [3, 3]  # a dry run changes nothing

    ok(
        kafkakit(*reset, "--topic", f"{topic}:1", "--to-datetime", "1970-01-01T00:33:20Z", "--execute")
    )  # 2,000,000 ms
    ok(kafkakit(*reset, "--topic", f"{topic}:0", "--to-earliest", "--execute"))
    described = json.loads(
        ok(kafkakit("groups", "describe", "--bootstrap-server", bs, "--group", group, "--output", "json"))
    )
    lags = {r["partition"]: (r["current_offset"], r["lag"]) for r in described["partitions"]}
    assert lags == {0: (0, 3), 1: (1, 2)}
    out = ok(
        kafkakit(
            "consume", "--bootstrap-server", bs, "--topic", topic, "--group", group, "--max-messages", "5"
        )
    )
    assert sorted(out.split()) == sorted(["early", "v1", "v2", "v1", "v2"])

    missing = kafkakit("groups", "describe", "--bootstrap-server", bs, "--group", f"{topic}-nobody")
    assert missing.returncode == 1 and "GROUP_ID_NOT_FOUND" in missing.stderr
    assert (
        ok(kafkakit("groups", "delete", "--bootstrap-server", bs, "--group", group)).strip()
        == f"Deleted group {group}."
    )
    again = kafkakit("groups", "delete", "--bootstrap-server", bs, "--group", group)
    assert again.returncode == 1 and "GROUP_ID_NOT_FOUND" in again.stderr


async def test_reset_offsets_refuses_a_live_group(broker: RunningBroker, topic: str) -> None:
    bs = broker.bootstrap_servers
    await _topic_with_records(bs, topic, partitions=1)
    group = f"{topic}-live"
    consumer = Consumer(bootstrap_servers=bs, group_id=group)
    await consumer.start()
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while not consumer.assignment() and time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=200)
        result = kafkakit("groups", "reset-offsets", "--bootstrap-server", bs, "--group", group, "--topic", topic,
                          "--to-earliest", "--execute")  # fmt: skip
        assert result.returncode == 1 and "NON_EMPTY_GROUP" in result.stderr and "Stable" in result.stderr
    finally:
        await consumer.stop()
