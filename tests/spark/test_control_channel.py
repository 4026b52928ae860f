"""The exactly-once sink's control topic read through kept clients (spark/control_channel.py).

On a Spark worker's loop the clients are kept between reads and a read fetches
only what was appended since the last one; the result must always equal a
full read of the compacted topic from the beginning.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from kafkakit import Admin, NewTopic
from kafkakit.spark import control_channel, runtime, two_phase
from kafkakit.spark.two_phase import TwoPhaseConfig

from tests.brokers import RunningBroker


def _config(bootstrap: str) -> TwoPhaseConfig:
    prefix = f"cc-{uuid.uuid4().hex[:8]}"
    return TwoPhaseConfig(bootstrap, prefix, f"{prefix}-control", 60000)


async def _full_read(config: TwoPhaseConfig) -> dict[str, bytes]:
    """A one-off channel (off the worker loop): reads the topic from its beginning."""
    channel = two_phase._new_channel(config)
    try:
        return await channel.snapshot()
    finally:
        await channel.close()


def _on_worker_loop(coro: Any) -> Any:
    return runtime.run(coro, timeout=60)


def test_kept_channel_reads_incrementally_and_matches_a_full_read(broker: RunningBroker) -> None:
    config = _config(broker.bootstrap_servers)
    asyncio.run(two_phase.ensure_control_topic(config))
    key = two_phase._channel_key(config)
    expected: dict[str, bytes] = {}
    rounds = [
        [(b"state/a", b"1"), (b"marker/a/0/0", b"m0"), (b"marker/a/1/0", b"m1")],
        [(b"marker/a/0/0", None), (b"state/a", b"2")],  # a tombstone and a newer value
        [],  # nothing new: the read must not wait for records
        [(b"marker/a/1/0", None), (b"state/b", b'"x"'), (b"state/a", b"3")],
    ]
    consumers = set()
    for records in rounds:
        _on_worker_loop(two_phase._write_control(config, records))
        for k, v in records:
            if v is None:
                expected.pop(k.decode(), None)
            else:
                expected[k.decode()] = v
        latest = _on_worker_loop(_snapshot(config))
        assert latest == expected
        assert asyncio.run(_full_read(config)) == expected
        channel = two_phase._channels.get(key, lambda: pytest.fail("the channel was not kept"))
        consumers.add(id(channel._consumer))
        assert channel._consumer is not None and channel._consumer.paused() == {channel._tp}
    assert len(consumers) == 1  # one consumer for every read: the clients were kept
    view = _on_worker_loop(two_phase.read_control(config))
    assert view.state("a") == 3 and view.state("b") == "x" and view.live_markers() == []
    _on_worker_loop(two_phase._channels.discard(key))


async def _snapshot(config: TwoPhaseConfig) -> dict[str, bytes]:
    return await two_phase._with_channel(config, lambda channel: channel.snapshot())


def test_a_stale_channel_reads_the_topic_again(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = _config(broker.bootstrap_servers)
    asyncio.run(two_phase.ensure_control_topic(config))
    _on_worker_loop(two_phase._write_control(config, [(b"k1", b"v1"), (b"k2", b"v2")]))
    assert _on_worker_loop(_snapshot(config)) == {"k1": b"v1", "k2": b"v2"}
    key = two_phase._channel_key(config)
    channel = two_phase._channels.get(key, lambda: pytest.fail("the channel was not kept"))
    channel._latest["ghost"] = b"a key the topic does not hold"  # what a missed tombstone would leave
    assert _on_worker_loop(_snapshot(config))["ghost"]  # an incremental read keeps it...
    monkeypatch.setattr(control_channel, "FULL_READ_AFTER_S", 0.0)
    assert _on_worker_loop(_snapshot(config)) == {"k1": b"v1", "k2": b"v2"}  # ...a full read drops it
    _on_worker_loop(two_phase._channels.discard(key))


def test_a_failed_read_discards_the_kept_channel(broker: RunningBroker) -> None:
    config = _config(broker.bootstrap_servers)
    asyncio.run(two_phase.ensure_control_topic(config))
    key = two_phase._channel_key(config)
    _on_worker_loop(two_phase._write_control(config, [(b"k", b"v")]))
    assert key in two_phase._channels._channels

    async def delete() -> None:
        async with Admin(bootstrap_servers=config.bootstrap_servers) as admin:
            await admin.delete_topics([config.control_topic])

    asyncio.run(delete())
    # end_offsets of a deleted topic waits (default_api_timeout_ms) for it to come back: any
    # failure, here a timeout, must leave no half-used clients behind.
    with pytest.raises(TimeoutError):
        _on_worker_loop(_snapshot_with_timeout(config))
    assert key not in two_phase._channels._channels  # the next call starts with fresh clients

    async def recreate() -> None:
        async with Admin(bootstrap_servers=config.bootstrap_servers) as admin:
            await admin.create_topics(
                [NewTopic(config.control_topic, 1, -1, dict(two_phase.CONTROL_TOPIC_CONFIGS))]
            )

    asyncio.run(recreate())
    assert _on_worker_loop(_snapshot(config)) == {}


async def _snapshot_with_timeout(config: TwoPhaseConfig) -> dict[str, bytes]:
    async with asyncio.timeout(3):
        return await _snapshot(config)
