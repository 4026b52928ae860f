"""KIP-227 fetch sessions on the wire, against every broker kind (raw Fetch v12 requests).

broker_min must answer sessions as Apache Kafka does: epoch 0 opens one with a
full response, later epochs carry only changed and forgotten partitions and get
back only partitions with news, a wrong epoch or an unknown id is an error, and
epoch -1 closes the session. A full cache evicts (broker_min only: Kafka's cache
has 1,000 slots).
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path
from typing import Any

from kafkakit import Admin, NewTopic, Producer
from kafkakit.broker import Broker
from kio.schema.errors import ErrorCode

from tests.raw_protocol import RawClient, req, sub

V = 12


def _fetch(topic: str, session_id: int, epoch: int, offsets: dict[int, int], forget: tuple[int, ...] = ()) -> Any:
    partitions = tuple(
        sub(1, V, "FetchPartition", partition=p, fetch_offset=o, partition_max_bytes=1 << 20, log_start_offset=-1)
        for p, o in offsets.items()
    )
    return req(
        1, V, replica_id=-1, max_wait=datetime.timedelta(milliseconds=50), min_bytes=1, max_bytes=1 << 20,
        isolation_level=0, session_id=session_id, session_epoch=epoch,
        topics=(sub(1, V, "FetchTopic", topic=topic, partitions=partitions),) if partitions else (),
        forgotten_topics_data=(sub(1, V, "ForgottenTopic", topic=topic, partitions=forget),) if forget else (),
        rack_id="",
    )  # fmt: skip


def _answered(response: Any) -> dict[int, int]:
    """partition -> bytes of records, for the partitions the response carries."""
    return {int(p.partition_index): len(p.records or b"") for t in response.responses for p in t.partitions}


async def _setup(bootstrap: str, topic: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 3, 1)])
    await _produce(bootstrap, topic, 0)
    await _wait_all_partitions_ready(bootstrap, topic)


async def _wait_all_partitions_ready(bootstrap: str, topic: str) -> None:
    """Kafka answers a partition whose leader is still being set up with an error, and its next
    answer then differs: a session test must start once every partition answers cleanly."""
    client = await RawClient.connect(bootstrap)
    try:
        for _ in range(100):
            response = await client.call(_fetch(topic, 0, -1, {0: 0, 1: 0, 2: 0}))
            errors = {int(p.partition_index): p.error_code for t in response.responses for p in t.partitions}
            if len(errors) == 3 and all(code == ErrorCode.none for code in errors.values()):
                return
            await asyncio.sleep(0.05)
        raise AssertionError(f"partitions of {topic} not ready: {errors}")
    finally:
        client.close()


async def _produce(bootstrap: str, topic: str, partition: int) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_and_wait(topic, b"x", partition=partition)


async def test_a_session_answers_only_what_changed(broker: Any, topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    await _setup(bootstrap, topic)
    client = await RawClient.connect(bootstrap)
    try:
        full = await client.call(_fetch(topic, 0, 0, {0: 0, 1: 0, 2: 0}))
        assert full.error_code == ErrorCode.none and full.session_id != 0
        assert set(_answered(full)) == {0, 1, 2} and _answered(full)[0] > 0
        sid = int(full.session_id)
        # Partition 0 moves on past its record; nothing else changed: nothing to say.
        quiet = await client.call(_fetch(topic, sid, 1, {0: 1}))
        assert quiet.error_code == ErrorCode.none and int(quiet.session_id) == sid
        assert _answered(quiet) == {}
        await _produce(bootstrap, topic, 2)
        news = await client.call(_fetch(topic, sid, 2, {}))  # partition 2 is fetched from its remembered offset
        assert set(_answered(news)) == {2} and _answered(news)[2] > 0
        forgot = await client.call(_fetch(topic, sid, 3, {2: 1}, forget=(1,)))
        assert _answered(forgot) == {}
        await _produce(bootstrap, topic, 1)  # forgotten: not fetched any more
        assert _answered(await client.call(_fetch(topic, sid, 4, {}))) == {}
        wrong = await client.call(_fetch(topic, sid, 9, {}))
        assert wrong.error_code == ErrorCode.invalid_fetch_session_epoch
        unknown = await client.call(_fetch(topic, sid + 1 if sid < 2**31 - 1 else 1, 1, {}))
        assert unknown.error_code == ErrorCode.fetch_session_id_not_found
        closed = await client.call(_fetch(topic, sid, -1, {0: 1}))  # close it: a sessionless full fetch
        assert closed.error_code == ErrorCode.none and closed.session_id == 0 and set(_answered(closed)) == {0}
        gone = await client.call(_fetch(topic, sid, 5, {}))
        assert gone.error_code == ErrorCode.fetch_session_id_not_found
    finally:
        client.close()


async def test_a_full_cache_evicts_the_least_recently_used_session(tmp_path: Path) -> None:
    async with Broker(tmp_path / "data", max_incremental_fetch_session_cache_slots=2) as broker:
        await _setup(broker.bootstrap_servers, "t")
        client = await RawClient.connect(broker)
        try:
            first, second, third = [
                int((await client.call(_fetch("t", 0, 0, {0: 0}))).session_id) for _ in range(3)
            ]
            assert len({first, second, third}) == 3
            evicted = await client.call(_fetch("t", first, 1, {}))
            assert evicted.error_code == ErrorCode.fetch_session_id_not_found
            kept = await client.call(_fetch("t", third, 1, {}))
            assert kept.error_code == ErrorCode.none
            assert broker.state.fetch_sessions.evictions == 1
        finally:
            client.close()
