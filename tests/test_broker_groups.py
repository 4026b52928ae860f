"""broker_min's classic group coordinator over real sockets, request by request.

Every state transition (Empty -> PreparingRebalance -> CompletingRebalance ->
Stable, back to PreparingRebalance and to Empty, Dead for deleted groups), the
errors of bad input (unknown member, stale generation, mismatched protocols,
empty assignment), static membership (replace, fence, leave, expiry), session
and rebalance timeouts, the initial rebalance delay, committed offsets and their
persistence in ``__consumer_offsets`` across a broker restart.  Plus unit tests
of Kafka's record formats for that topic.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kafkakit.broker import Broker
from kafkakit.broker.coordinators.group_records import (
    GroupKey,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    partition_for_group,
)
from kafkakit.broker.coordinators.offsets_topic import OFFSETS_TOPIC
from kafkakit.protocol import decode_response, encode_request
from kafkakit.protocol.build import make_request
from kafkakit.records import decode_batches
from kio.schema.errors import ErrorCode

JOIN, HEARTBEAT, LEAVE, SYNC, DESCRIBE, LIST, COMMIT, FETCH, DELETE = 11, 12, 13, 14, 15, 16, 8, 9, 42
TOPIC = "grouped"
CONSUMER = "consumer"
RANGE = (("range", b"range-meta"),)
SESSION_MS = 10_000
# Short enough for expiry tests to run fast; the broker's minimum is lowered to allow them.
SHORT_SESSION_MS = 400
REBALANCE_MS = 5_000
WAIT_S = 10.0


class RawClient:
    """One TCP connection sending kio requests and reading their answers in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._next_id = 0

    @classmethod
    async def connect(cls, broker: Broker) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
        return cls(reader, writer)

    async def call(self, api_key: int, version: int, **fields: Any) -> Any:
        payload = make_request(api_key, version, **fields)
        self._next_id += 1
        self.writer.write(encode_request(self._next_id, "groups-test", payload))
        (size,) = struct.unpack(">i", await asyncio.wait_for(self.reader.readexactly(4), WAIT_S))
        body = await asyncio.wait_for(self.reader.readexactly(size), WAIT_S)
        correlation_id, response = decode_response(api_key, version, body)
        assert correlation_id == self._next_id
        return response

    def close(self) -> None:
        self.writer.close()


class Member:
    """A group member driving the protocol by hand over its own connection."""

    def __init__(
        self,
        client: RawClient,
        group: str,
        *,
        instance_id: str | None = None,
        protocols: Sequence[tuple[str, bytes]] = RANGE,
        protocol_type: str = CONSUMER,
        session_ms: int = SESSION_MS,
        rebalance_ms: int = REBALANCE_MS,
    ) -> None:
        self.client = client
        self.group = group
        self.instance_id = instance_id
        self.protocols = tuple(protocols)
        self.protocol_type = protocol_type
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.member_id = ""
        self.generation = -1
        self.last_join: Any = None

    async def join_once(self, version: int = 7) -> Any:
        """One JoinGroup with the current member id (no retry on MEMBER_ID_REQUIRED)."""
        response = await self.client.call(
            JOIN,
            version,
            group_id=self.group,
            session_timeout=self.session_ms,
            rebalance_timeout=self.rebalance_ms,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type=self.protocol_type,
            protocols=[{"name": n, "metadata": m} for n, m in self.protocols],
        )
        self.last_join = response
        if response.member_id:
            self.member_id = response.member_id
        if response.error_code == ErrorCode.none:
            self.generation = response.generation_id
        return response

    async def join(self, version: int = 7) -> Any:
        """JoinGroup, rejoining once with the id handed out by MEMBER_ID_REQUIRED."""
        response = await self.join_once(version)
        if response.error_code == ErrorCode.member_id_required:
            response = await self.join_once(version)
        return response

    async def sync(
        self, assignments: dict[str, bytes] | None = None, version: int = 5, **overrides: Any
    ) -> Any:
        fields: dict[str, Any] = {
            "group_id": self.group,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": self.protocol_type,
            "protocol_name": self.last_join.protocol_name if self.last_join else None,
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        }
        fields.update(overrides)
        return await self.client.call(SYNC, version, **fields)

    async def heartbeat(self, version: int = 4, **overrides: Any) -> ErrorCode:
        fields: dict[str, Any] = {
            "group_id": self.group,
            "generation_id": self.generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
        }
        fields.update(overrides)
        response = await self.client.call(HEARTBEAT, version, **fields)
        error: ErrorCode = response.error_code
        return error

    async def commit(
        self, offsets: dict[tuple[str, int], tuple[int, str | None]], version: int = 8, **kw: Any
    ) -> Any:
        return await commit(
            self.client,
            self.group,
            offsets,
            version=version,
            generation=kw.get("generation", self.generation),
            member_id=kw.get("member_id", self.member_id),
            instance_id=kw.get("instance_id", self.instance_id),
        )


async def commit(
    client: RawClient,
    group: str,
    offsets: dict[tuple[str, int], tuple[int, str | None]],
    *,
    version: int = 8,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
    leader_epoch: int = 7,
) -> dict[tuple[str, int], ErrorCode]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), (offset, metadata) in offsets.items():
        topics.setdefault(topic, []).append(
            {
                "partition_index": partition,
                "committed_offset": offset,
                "committed_leader_epoch": leader_epoch,
                "committed_metadata": metadata,
            }
        )
    response = await client.call(
        COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        retention_time=-1,
        topics=[{"name": t, "partitions": ps} for t, ps in topics.items()],
    )
    return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}


async def fetch_offsets(
    client: RawClient, group: str, partitions: dict[str, list[int]] | None, version: int = 7
) -> dict[tuple[str, int], tuple[int, int, str, ErrorCode]]:
    topics = (
        None if partitions is None else [{"name": t, "partition_indexes": ps} for t, ps in partitions.items()]
    )
    response = await client.call(FETCH, version, group_id=group, topics=topics, require_stable=True)
    if version >= 2:
        assert response.error_code == ErrorCode.none
    return {
        (t.name, p.partition_index): (
            p.committed_offset,
            getattr(p, "committed_leader_epoch", -1),
            p.metadata,
            p.error_code,
        )
        for t in response.topics
        for p in t.partitions
    }


async def describe(client: RawClient, group: str, version: int = 5) -> Any:
    response = await client.call(DESCRIBE, version, groups=[group], include_authorized_operations=False)
    return response.groups[0]


async def leave(
    client: RawClient, group: str, members: Sequence[tuple[str, str | None]], version: int = 5
) -> Any:
    return await client.call(
        LEAVE,
        version,
        group_id=group,
        member_id=members[0][0] if version < 3 else "",
        members=[{"member_id": m, "group_instance_id": i, "reason": None} for m, i in members],
    )


async def stable_group(members: Sequence[Member], assignments: dict[str, bytes] | None = None) -> None:
    """Join every member concurrently, have the leader assign, sync everyone.

    On a rejoin the current leader goes first: a follower rejoining a Stable group
    with unchanged metadata would just be handed the current generation.
    """
    ordered = sorted(members, key=lambda m: not (m.last_join is not None and m.last_join.members))
    tasks = [asyncio.create_task(ordered[0].join())]
    if ordered[0].last_join is not None:
        await asyncio.sleep(0.05)
    tasks += [asyncio.create_task(m.join()) for m in ordered[1:]]
    joins = await asyncio.gather(*tasks)
    assert all(j.error_code == ErrorCode.none for j in joins), [j.error_code for j in joins]
    assert len({j.generation_id for j in joins}) == 1
    leader = next(m for m in members if m.last_join.leader == m.member_id)
    plan = (
        assignments
        if assignments is not None
        else {m.member_id: f"a-{m.member_id}".encode() for m in members}
    )
    syncs = await asyncio.gather(*(m.sync(plan if m is leader else None) for m in members))
    assert all(s.error_code == ErrorCode.none for s in syncs), [s.error_code for s in syncs]


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[Broker]:
    async with Broker(tmp_path / "data", group_min_session_timeout_ms=100) as running:
        running.state.create_topic(TOPIC, 4)
        yield running


class Clients:
    """Opens connections for a test and closes them all at the end."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.opened: list[RawClient] = []

    async def new(self) -> RawClient:
        client = await RawClient.connect(self.broker)
        self.opened.append(client)
        return client

    async def member(self, group: str, **kw: Any) -> Member:
        return Member(await self.new(), group, **kw)

    def close(self) -> None:
        for client in self.opened:
            client.close()


@pytest.fixture
async def clients(broker: Broker) -> AsyncIterator[Clients]:
    made = Clients(broker)
    yield made
    made.close()


async def state_of(clients: Clients, group: str) -> str:
    described = await describe(await clients.new(), group)
    state: str = described.group_state
    return state


# ====================================================================== join and sync


async def test_first_join_needs_a_member_id_and_completes_well_under_a_second(clients: Clients) -> None:
    member = await clients.member("g-first")
    started = time.monotonic()
    first = await member.join_once()
    assert first.error_code == ErrorCode.member_id_required
    assert first.member_id.startswith("groups-test-") and first.generation_id == -1
    joined = await member.join_once()
    elapsed = time.monotonic() - started
    assert joined.error_code == ErrorCode.none
    assert elapsed < 1.0, f"first join took {elapsed:.3f}s"
    assert (joined.generation_id, joined.leader, joined.member_id) == (1, first.member_id, first.member_id)
    assert (joined.protocol_type, joined.protocol_name) == (CONSUMER, "range")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(first.member_id, b"range-meta")]
    assert await state_of(clients, "g-first") == "CompletingRebalance"
    synced = await member.sync({member.member_id: b"mine"})
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, b"mine")
    assert (synced.protocol_type, synced.protocol_name) == (CONSUMER, "range")
    described = await describe(await clients.new(), "g-first")
    assert (described.group_state, described.protocol_type, described.protocol_data) == (
        "Stable",
        CONSUMER,
        "range",
    )
    assert [(m.member_id, m.member_metadata, m.member_assignment) for m in described.members] == [
        (member.member_id, b"range-meta", b"mine")
    ]
    assert await member.heartbeat() == ErrorCode.none


async def test_join_before_v4_gets_a_member_id_without_a_second_round_trip(clients: Clients) -> None:
    member = await clients.member("g-v3")
    joined = await member.join_once(version=3)
    assert joined.error_code == ErrorCode.none and joined.member_id and joined.generation_id == 1
    assert joined.protocol_name == "range"  # v0-6 have no protocol type, and a non-null name


async def test_join_v0_uses_the_session_timeout_as_rebalance_timeout(clients: Clients) -> None:
    member = await clients.member("g-v0")
    joined = await member.join_once(version=0)
    assert joined.error_code == ErrorCode.none and joined.generation_id == 1
    assert (await member.sync({member.member_id: b"x"}, version=0)).assignment == b"x"


async def test_three_members_one_generation_followers_wait_for_the_leader(clients: Clients) -> None:
    members = [await clients.member("g-three") for _ in range(3)]
    joins = await asyncio.gather(*(m.join() for m in members))
    assert {j.generation_id for j in joins} == {1}
    leader_id = joins[0].leader
    assert {j.leader for j in joins} == {leader_id}
    leader = next(m for m in members if m.member_id == leader_id)
    followers = [m for m in members if m is not leader]
    assert sorted(m.member_id for m in leader.last_join.members) == sorted(m.member_id for m in members)
    assert all(f.last_join.members == () for f in followers)
    # Followers park until the leader's assignment arrives; the last follower is left out of it.
    parked = [asyncio.create_task(f.sync()) for f in followers]
    await asyncio.sleep(0.2)
    assert not any(t.done() for t in parked)
    plan = {leader.member_id: b"L", followers[0].member_id: b"F0"}
    assert (await leader.sync(plan)).assignment == b"L"
    got = [await t for t in parked]
    assert [(g.error_code, g.assignment) for g in got] == [(ErrorCode.none, b"F0"), (ErrorCode.none, b"")]
    assert await state_of(clients, "g-three") == "Stable"


async def test_protocol_selection_takes_the_most_voted_common_protocol(clients: Clients) -> None:
    prefs = [
        (("range", b"r1"), ("roundrobin", b"o1"), ("sticky", b"s1")),
        (("roundrobin", b"o2"), ("range", b"r2")),
        (("roundrobin", b"o3"), ("range", b"r3")),
    ]
    members = [await clients.member("g-vote", protocols=p) for p in prefs]
    await stable_group(members)
    joined = members[0].last_join
    assert joined.protocol_name == "roundrobin"  # range 1 vote, roundrobin 2; sticky is not common
    leader = next(m for m in members if m.last_join.members)
    assert sorted(m.metadata for m in leader.last_join.members) == [b"o1", b"o2", b"o3"]


async def test_a_member_with_no_common_protocol_or_another_protocol_type_is_refused(clients: Clients) -> None:
    member = await clients.member("g-proto")
    await stable_group([member])
    odd_type = await clients.member("g-proto", protocol_type="connect")
    assert (await odd_type.join()).error_code == ErrorCode.inconsistent_group_protocol
    no_common = await clients.member("g-proto", protocols=(("sticky", b""),))
    assert (await no_common.join()).error_code == ErrorCode.inconsistent_group_protocol
    empty_type = await clients.member("g-proto-new", protocol_type="")
    assert (await empty_type.join()).error_code == ErrorCode.inconsistent_group_protocol
    # The group did not notice.
    assert await member.heartbeat() == ErrorCode.none
    assert await state_of(clients, "g-proto") == "Stable"


async def test_sync_v5_checks_protocol_type_and_name(clients: Clients) -> None:
    member = await clients.member("g-sync5")
    assert (await member.join()).error_code == ErrorCode.none
    wrong_type = await member.sync({member.member_id: b"a"}, protocol_type="connect")
    assert wrong_type.error_code == ErrorCode.inconsistent_group_protocol
    wrong_name = await member.sync({member.member_id: b"a"}, protocol_name="roundrobin")
    assert wrong_name.error_code == ErrorCode.inconsistent_group_protocol
    assert await state_of(clients, "g-sync5") == "CompletingRebalance"
    good = await member.sync({member.member_id: b"a"})
    assert (good.error_code, good.assignment) == (ErrorCode.none, b"a")


async def test_unknown_member_id_is_refused_everywhere_and_the_group_stays_healthy(clients: Clients) -> None:
    member = await clients.member("g-unknown")
    await stable_group([member])
    stranger = await clients.member("g-unknown")
    stranger.member_id, stranger.generation = "nobody", member.generation
    assert (await stranger.join_once()).error_code == ErrorCode.unknown_member_id
    assert (await stranger.sync()).error_code == ErrorCode.unknown_member_id
    assert await stranger.heartbeat() == ErrorCode.unknown_member_id
    assert set((await stranger.commit({(TOPIC, 0): (5, None)})).values()) == {ErrorCode.unknown_member_id}
    left = await leave(stranger.client, "g-unknown", [("nobody", None)])
    assert [m.error_code for m in left.members] == [ErrorCode.unknown_member_id]
    # Unknown group: JoinGroup with a member id, SyncGroup and Heartbeat all say UNKNOWN_MEMBER_ID.
    ghost = await clients.member("g-never-existed")
    ghost.member_id, ghost.generation = "ghost", 1
    assert (await ghost.join_once()).error_code == ErrorCode.unknown_member_id
    assert (await ghost.sync()).error_code == ErrorCode.unknown_member_id
    assert await ghost.heartbeat() == ErrorCode.unknown_member_id
    assert await member.heartbeat() == ErrorCode.none
    assert await state_of(clients, "g-unknown") == "Stable"


async def test_a_stale_generation_gets_illegal_generation_and_the_group_stays_healthy(
    clients: Clients,
) -> None:
    member = await clients.member("g-stale")
    await stable_group([member])
    stale = member.generation - 1
    assert await member.heartbeat(generation_id=stale) == ErrorCode.illegal_generation
    assert (await member.sync(generation_id=stale)).error_code == ErrorCode.illegal_generation
    assert set((await member.commit({(TOPIC, 0): (1, None)}, generation=stale)).values()) == {
        ErrorCode.illegal_generation
    }
    assert await member.heartbeat() == ErrorCode.none
    assert set((await member.commit({(TOPIC, 0): (1, None)})).values()) == {ErrorCode.none}


async def test_invalid_group_id_and_session_timeout(clients: Clients, broker: Broker) -> None:
    nameless = await clients.member("")
    assert (await nameless.join_once()).error_code == ErrorCode.invalid_group_id
    too_short = await clients.member("g-timeout", session_ms=50)
    assert (await too_short.join_once()).error_code == ErrorCode.invalid_session_timeout
    too_long = await clients.member("g-timeout", session_ms=broker.config.group_max_session_timeout_ms + 1)
    assert (await too_long.join_once()).error_code == ErrorCode.invalid_session_timeout


async def test_an_empty_assignment_gives_every_member_empty_bytes_and_the_group_stays_healthy(
    clients: Clients,
) -> None:
    members = [await clients.member("g-empty-assign") for _ in range(2)]
    await stable_group(members, assignments={})
    for m in members:
        described = await describe(m.client, "g-empty-assign")
        assert described.group_state == "Stable"
        assert {x.member_assignment for x in described.members} == {b""}
        assert await m.heartbeat() == ErrorCode.none
    # A later rebalance works normally.
    await stable_group(members)
    assert members[0].generation == 2


# ====================================================================== rebalances


async def test_a_new_member_triggers_a_rebalance_that_existing_members_see_in_heartbeats(
    clients: Clients,
) -> None:
    a, b = await clients.member("g-grow"), await clients.member("g-grow")
    await stable_group([a, b])
    c = await clients.member("g-grow")
    c_join = asyncio.create_task(c.join())
    await asyncio.sleep(0.1)
    assert await state_of(clients, "g-grow") == "PreparingRebalance"
    assert await a.heartbeat() == ErrorCode.rebalance_in_progress
    assert (await a.sync()).error_code == ErrorCode.rebalance_in_progress
    joins = await asyncio.gather(a.join(), b.join(), c_join)
    assert {j.generation_id for j in joins} == {2}
    # A commit in CompletingRebalance is refused with REBALANCE_IN_PROGRESS.
    assert set((await a.commit({(TOPIC, 1): (3, None)})).values()) == {ErrorCode.rebalance_in_progress}
    leader = next(m for m in (a, b, c) if m.last_join.members)
    others = [m for m in (a, b, c) if m is not leader]
    results = await asyncio.gather(
        leader.sync({m.member_id: b"x" for m in (a, b, c)}), *(m.sync() for m in others)
    )
    assert {r.error_code for r in results} == {ErrorCode.none}
    assert set((await a.commit({(TOPIC, 1): (3, None)})).values()) == {ErrorCode.none}


async def test_a_rebalance_during_completing_rebalance_answers_parked_syncs(clients: Clients) -> None:
    a, b = await clients.member("g-interrupt"), await clients.member("g-interrupt")
    await asyncio.gather(a.join(), b.join())
    follower = a if b.last_join.members else b
    parked = asyncio.create_task(follower.sync())
    await asyncio.sleep(0.1)
    newcomer = await clients.member("g-interrupt")
    newcomer_join = asyncio.create_task(newcomer.join())
    assert (await parked).error_code == ErrorCode.rebalance_in_progress
    joins = await asyncio.gather(a.join(), b.join(), newcomer_join)
    assert {j.generation_id for j in joins} == {2}


async def test_members_that_do_not_rejoin_within_the_rebalance_timeout_are_removed(clients: Clients) -> None:
    first = await clients.member("g-slow", rebalance_ms=600)
    second = await clients.member("g-slow", rebalance_ms=600)
    await stable_group([first, second])
    leader, absent = (first, second) if first.last_join.members else (second, first)
    started = time.monotonic()
    rejoined = await leader.join()  # the leader's rejoin starts a rebalance the other never joins
    elapsed = time.monotonic() - started
    assert rejoined.error_code == ErrorCode.none and rejoined.generation_id == 2
    assert 0.5 < elapsed < 3, f"join phase took {elapsed:.2f}s"
    assert [m.member_id for m in rejoined.members] == [leader.member_id]
    assert await absent.heartbeat() == ErrorCode.unknown_member_id


async def test_session_expiry_removes_a_silent_member_and_rebalances(clients: Clients) -> None:
    alive = await clients.member("g-expire", session_ms=SHORT_SESSION_MS)
    silent = await clients.member("g-expire", session_ms=SHORT_SESSION_MS)
    await stable_group([alive, silent])
    deadline = time.monotonic() + 5
    error = ErrorCode.none
    while error == ErrorCode.none and time.monotonic() < deadline:
        await asyncio.sleep(SHORT_SESSION_MS / 4000)
        error = await alive.heartbeat()
    assert error == ErrorCode.rebalance_in_progress
    joined = await alive.join()
    assert joined.generation_id == 2
    assert [m.member_id for m in joined.members] == [alive.member_id]
    assert await silent.heartbeat() == ErrorCode.unknown_member_id


async def test_the_initial_delay_is_extended_while_members_keep_arriving(tmp_path: Path) -> None:
    async with Broker(tmp_path / "d", group_initial_rebalance_delay_ms=300) as broker:
        made = Clients(broker)
        try:
            members = [await made.member("g-delay") for _ in range(3)]
            tasks = []
            for m in members:
                tasks.append(asyncio.create_task(m.join()))
                await asyncio.sleep(0.2)  # each arrives within the previous delay
            joins = await asyncio.gather(*tasks)
            assert {j.generation_id for j in joins} == {1}
            assert len(next(j for j in joins if j.members).members) == 3
        finally:
            made.close()


async def test_a_pending_member_that_never_rejoins_expires_and_unblocks_the_rebalance(
    clients: Clients,
) -> None:
    a = await clients.member("g-pending", session_ms=SHORT_SESSION_MS)
    await stable_group([a])
    ghost = await clients.member("g-pending", session_ms=SHORT_SESSION_MS)
    assert (await ghost.join_once()).error_code == ErrorCode.member_id_required  # and never comes back
    started = time.monotonic()
    rejoined = await a.join()  # the leader's rejoin starts a rebalance, which waits for the pending member
    waited = time.monotonic() - started
    assert rejoined.generation_id == 2 and [m.member_id for m in rejoined.members] == [a.member_id]
    assert waited > SHORT_SESSION_MS / 1000 * 0.5


async def test_a_follower_rejoining_with_the_same_metadata_gets_the_current_generation(
    clients: Clients,
) -> None:
    a, b = await clients.member("g-same"), await clients.member("g-same")
    await stable_group([a, b])
    follower = a if b.last_join.members else b
    again = await follower.join()
    assert (again.error_code, again.generation_id, again.members) == (ErrorCode.none, 1, ())
    assert await state_of(clients, "g-same") == "Stable"


# ====================================================================== leaving


async def test_leave_v0_single_member_and_v3_batch_by_member_and_instance_id(clients: Clients) -> None:
    static = await clients.member("g-leave", instance_id="inst-1")
    dynamic = [await clients.member("g-leave") for _ in range(3)]
    await stable_group([static, *dynamic])
    v0 = await leave(dynamic[0].client, "g-leave", [(dynamic[0].member_id, None)], version=0)
    assert v0.error_code == ErrorCode.none
    assert (await leave(dynamic[0].client, "g-leave", [("gone", None)], version=1)).error_code == (
        ErrorCode.unknown_member_id
    )
    batch = await leave(
        dynamic[1].client,
        "g-leave",
        [(dynamic[1].member_id, None), ("", "inst-1"), ("", "inst-unknown"), ("nobody", None)],
        version=4,
    )
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in batch.members] == [
        (dynamic[1].member_id, None, ErrorCode.none),
        ("", "inst-1", ErrorCode.none),
        ("", "inst-unknown", ErrorCode.unknown_member_id),
        ("nobody", None, ErrorCode.unknown_member_id),
    ]
    assert await dynamic[2].heartbeat() == ErrorCode.rebalance_in_progress
    assert (await dynamic[2].join()).generation_id == 2
    assert len(dynamic[2].last_join.members) == 1
    assert (await leave(dynamic[2].client, "g-leave", [(dynamic[2].member_id, None)])).members[
        0
    ].error_code == (ErrorCode.none)
    described = await describe(dynamic[2].client, "g-leave")
    assert (described.group_state, described.members) == ("Empty", ())


# ====================================================================== static membership


async def test_a_static_member_restarting_gets_its_assignment_back_without_a_rebalance(
    clients: Clients,
) -> None:
    static = await clients.member("g-static", instance_id="pod-0")
    other = await clients.member("g-static")
    await stable_group([static, other])
    old_id, generation = static.member_id, static.generation
    # A restart: same instance id, no member id, same protocols, on a new connection.
    restarted = await clients.member("g-static", instance_id="pod-0")
    joined = await restarted.join()
    assert joined.error_code == ErrorCode.none
    assert joined.member_id != old_id and joined.member_id.startswith("pod-0-")
    assert joined.generation_id == generation and joined.members == ()
    synced = await restarted.sync()
    assert (synced.error_code, synced.assignment) == (ErrorCode.none, f"a-{old_id}".encode())
    assert await other.heartbeat() == ErrorCode.none  # nobody else rebalanced
    assert await state_of(clients, "g-static") == "Stable"
    # The old incarnation is fenced everywhere.
    assert await static.heartbeat() == ErrorCode.fenced_instance_id
    assert (await static.sync()).error_code == ErrorCode.fenced_instance_id
    assert set((await static.commit({(TOPIC, 0): (1, None)})).values()) == {ErrorCode.fenced_instance_id}
    assert (await static.join_once()).error_code == ErrorCode.fenced_instance_id
    assert await restarted.heartbeat() == ErrorCode.none


async def test_a_static_leader_restarting_is_told_the_old_leader_and_syncs_as_a_follower(
    clients: Clients,
) -> None:
    static = await clients.member("g-static-leader", instance_id="pod-L")
    await stable_group([static])
    follower = await clients.member("g-static-leader")
    follower_join = asyncio.create_task(follower.join())
    await asyncio.sleep(0.1)
    assert await state_of(clients, "g-static-leader") == "PreparingRebalance"
    rejoin = await static.join()  # the leader rejoins; the group goes to generation 2
    await follower_join
    await asyncio.gather(static.sync({static.member_id: b"S", follower.member_id: b"F"}), follower.sync())
    assert rejoin.leader == static.member_id
    restarted = await clients.member("g-static-leader", instance_id="pod-L")
    joined = await restarted.join()
    assert (joined.generation_id, joined.leader) == (2, static.member_id)
    assert (await restarted.sync()).assignment == b"S"
    assert await follower.heartbeat() == ErrorCode.none
    # The new id is the leader now: its next rejoin starts a rebalance.
    described = await describe(restarted.client, "g-static-leader")
    assert restarted.member_id in {m.member_id for m in described.members}


async def test_a_static_member_whose_rejoin_changes_the_selected_protocol_triggers_a_rebalance(
    clients: Clients,
) -> None:
    both = (("roundrobin", b"o"), ("range", b"r"))
    static = await clients.member("g-static-change", instance_id="pod-c")  # range only: range is selected
    other = await clients.member("g-static-change", protocols=both)
    await stable_group([static, other])
    assert static.last_join.protocol_name == "range"
    # Different metadata alone changes nothing (Kafka compares the selected protocol only).
    same_protocol = await clients.member(
        "g-static-change", instance_id="pod-c", protocols=(("range", b"new"),)
    )
    assert (await same_protocol.join()).generation_id == 1
    assert await other.heartbeat() == ErrorCode.none
    # Now both prefer roundrobin: the selected protocol would change, so the group rebalances.
    changed = await clients.member("g-static-change", instance_id="pod-c", protocols=both)
    task = asyncio.create_task(changed.join())
    await asyncio.sleep(0.1)
    assert await other.heartbeat() == ErrorCode.rebalance_in_progress
    await other.join()
    rebalanced = await task
    assert (rebalanced.generation_id, rebalanced.protocol_name) == (2, "roundrobin")


async def test_a_static_member_whose_session_expires_is_removed_with_a_rebalance(clients: Clients) -> None:
    static = await clients.member("g-static-expire", instance_id="pod-x", session_ms=SHORT_SESSION_MS)
    other = await clients.member("g-static-expire", session_ms=SESSION_MS)
    await stable_group([static, other])
    await asyncio.sleep(SHORT_SESSION_MS / 1000 * 2)
    assert await other.heartbeat() == ErrorCode.rebalance_in_progress
    joined = await other.join()
    assert [m.member_id for m in joined.members] == [other.member_id]
    assert await static.heartbeat() == ErrorCode.unknown_member_id


async def test_a_parked_join_of_a_replaced_static_member_is_fenced(clients: Clients) -> None:
    a = await clients.member("g-static-park", instance_id="pod-p")
    b = await clients.member("g-static-park")
    await stable_group([a, b])
    newcomer = await clients.member("g-static-park")
    newcomer_join = asyncio.create_task(newcomer.join())
    await asyncio.sleep(0.1)
    assert await state_of(clients, "g-static-park") == "PreparingRebalance"
    parked = asyncio.create_task(a.join())
    await asyncio.sleep(0.1)
    replacement = await clients.member("g-static-park", instance_id="pod-p")
    replacement_join = asyncio.create_task(replacement.join())
    assert (await parked).error_code == ErrorCode.fenced_instance_id
    await b.join()
    results = await asyncio.gather(newcomer_join, replacement_join)
    assert {r.generation_id for r in results} == {2}


# ====================================================================== offsets


async def test_commit_and_fetch_round_trip_offsets_leader_epochs_and_metadata(clients: Clients) -> None:
    member = await clients.member("g-offsets")
    await stable_group([member])
    errors = await member.commit(
        {(TOPIC, 0): (10, "meta-0"), (TOPIC, 3): (33, None), ("no-such-topic", 0): (1, None)}
    )
    assert errors == {
        (TOPIC, 0): ErrorCode.none,
        (TOPIC, 3): ErrorCode.none,
        ("no-such-topic", 0): ErrorCode.unknown_topic_or_partition,
    }
    got = await fetch_offsets(member.client, "g-offsets", {TOPIC: [0, 1, 3]})
    assert got == {
        (TOPIC, 0): (10, 7, "meta-0", ErrorCode.none),
        (TOPIC, 1): (-1, -1, "", ErrorCode.none),
        (TOPIC, 3): (33, 7, "", ErrorCode.none),
    }
    assert await fetch_offsets(member.client, "g-offsets", None) == {
        (TOPIC, 0): (10, 7, "meta-0", ErrorCode.none),
        (TOPIC, 3): (33, 7, "", ErrorCode.none),
    }
    v1 = await fetch_offsets(member.client, "g-offsets", {TOPIC: [0]}, version=1)
    assert v1 == {(TOPIC, 0): (10, -1, "meta-0", ErrorCode.none)}
    too_big = await member.commit({(TOPIC, 1): (5, "x" * 4097)})
    assert too_big == {(TOPIC, 1): ErrorCode.offset_metadata_too_large}
    # OffsetCommit v2 (with retention time) still works.
    v2 = await commit(member.client, "g-offsets", {(TOPIC, 2): (2, "v2")}, version=2,
                      generation=member.generation, member_id=member.member_id)  # fmt: skip
    assert v2 == {(TOPIC, 2): ErrorCode.none}
    assert (await fetch_offsets(member.client, "g-offsets", {TOPIC: [2]}))[(TOPIC, 2)][::2] == (2, "v2")


async def test_a_standalone_consumer_commits_with_generation_minus_one_only_while_nobody_is_a_member(
    clients: Clients,
) -> None:
    client = await clients.new()
    assert await commit(client, "g-simple", {(TOPIC, 0): (4, "manual")}) == {(TOPIC, 0): ErrorCode.none}
    listed = await client.call(LIST, 4, states_filter=[])
    assert ("g-simple", "", "Empty") in [(g.group_id, g.protocol_type, g.group_state) for g in listed.groups]
    member = await clients.member("g-simple")
    await stable_group([member])
    refused = await commit(client, "g-simple", {(TOPIC, 0): (5, None)})
    assert refused == {(TOPIC, 0): ErrorCode.unknown_member_id}
    # A generation for a group that does not exist is an illegal generation.
    assert await commit(client, "g-nope", {(TOPIC, 0): (5, None)}, generation=3, member_id="m") == {
        (TOPIC, 0): ErrorCode.illegal_generation
    }
    assert (await fetch_offsets(client, "g-simple", {TOPIC: [0]}))[(TOPIC, 0)][0] == 4


# ====================================================================== admin


async def test_list_describe_and_delete_groups(clients: Clients) -> None:
    stable = await clients.member("g-admin-stable")
    await stable_group([stable])
    client = await clients.new()
    await commit(client, "g-admin-empty", {(TOPIC, 0): (1, None)})
    listed = await client.call(LIST, 4, states_filter=["stable"])
    names = {g.group_id for g in listed.groups}
    assert "g-admin-stable" in names and "g-admin-empty" not in names
    old = await client.call(LIST, 0)
    assert {"g-admin-stable", "g-admin-empty"} <= {g.group_id for g in old.groups}
    dead = await describe(client, "g-admin-none", version=0)
    assert (dead.error_code, dead.group_state, dead.members) == (ErrorCode.none, "Dead", ())
    deleted = await client.call(DELETE, 2, groups_names=["g-admin-stable", "g-admin-empty", "g-admin-none"])
    assert [(r.group_id, r.error_code) for r in deleted.results] == [
        ("g-admin-stable", ErrorCode.non_empty_group),
        ("g-admin-empty", ErrorCode.none),
        ("g-admin-none", ErrorCode.group_id_not_found),
    ]
    assert (await describe(client, "g-admin-empty")).group_state == "Dead"
    assert (await fetch_offsets(client, "g-admin-empty", {TOPIC: [0]}))[(TOPIC, 0)][0] == -1
    assert await stable.heartbeat() == ErrorCode.none


# ====================================================================== persistence


async def test_a_broker_restart_keeps_committed_offsets_metadata_and_the_generation(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with Broker(data) as broker:
        broker.state.create_topic(TOPIC, 4)
        made = Clients(broker)
        try:
            members = [await made.member("g-persist") for _ in range(2)]
            await stable_group(members)
            await stable_group(members)  # generation 2
            assert await members[0].commit({(TOPIC, 1): (41, "after-restart"), (TOPIC, 2): (42, None)}) == {
                (TOPIC, 1): ErrorCode.none,
                (TOPIC, 2): ErrorCode.none,
            }
            client = await made.new()
            await commit(client, "g-persist-deleted", {(TOPIC, 0): (9, None)})
            await client.call(DELETE, 2, groups_names=["g-persist-deleted"])
            metadata = await client.call(3, 9, topics=[{"name": OFFSETS_TOPIC}], allow_auto_topic_creation=False,
                                         include_cluster_authorized_operations=False,
                                         include_topic_authorized_operations=False)  # fmt: skip
            assert metadata.topics[0].is_internal is True
        finally:
            made.close()
    async with Broker(data) as broker:
        made = Clients(broker)
        try:
            client = await made.new()
            assert await fetch_offsets(client, "g-persist", {TOPIC: [1, 2, 3]}) == {
                (TOPIC, 1): (41, 7, "after-restart", ErrorCode.none),
                (TOPIC, 2): (42, 7, "", ErrorCode.none),
                (TOPIC, 3): (-1, -1, "", ErrorCode.none),
            }
            # As in Kafka: the group is back Stable with its members, generation, protocol, leader
            # and assignments, and each member's session armed as a fresh heartbeat.
            described = await describe(client, "g-persist")
            assert (described.group_state, described.protocol_type, described.protocol_data) == (
                "Stable",
                CONSUMER,
                "range",
            )
            assert {(m.member_id, m.member_assignment) for m in described.members} == {
                (m.member_id, f"a-{m.member_id}".encode()) for m in members
            }
            assert (await describe(client, "g-persist-deleted")).group_state == "Dead"
            # The members go on over new connections with their ids and generation: no rebalance.
            again = [Member(await made.new(), "g-persist") for _ in members]
            for new, old in zip(again, members, strict=True):
                new.member_id, new.generation, new.last_join = old.member_id, old.generation, old.last_join
                assert new.generation == 2
                assert await new.heartbeat() == ErrorCode.none
                assert await new.commit({(TOPIC, 3): (43, None)}) == {(TOPIC, 3): ErrorCode.none}
                assert (await new.sync()).assignment == f"a-{new.member_id}".encode()
            member = await made.member("g-persist")
            joining = asyncio.create_task(member.join())
            await asyncio.sleep(0.2)
            assert {await m.heartbeat() for m in again} == {ErrorCode.rebalance_in_progress}
            joins = await asyncio.gather(joining, *(m.join() for m in again))
            assert {j.generation_id for j in joins} == {3}
        finally:
            made.close()


async def test_after_a_restart_a_loaded_member_that_does_not_come_back_expires_and_the_group_rebalances(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with Broker(data, group_min_session_timeout_ms=100) as broker:
        broker.state.create_topic(TOPIC, 4)
        made = Clients(broker)
        try:
            static = await made.member("g-expire", instance_id="pod-0")
            gone = await made.member("g-expire", session_ms=SHORT_SESSION_MS)
            await stable_group([static, gone])
        finally:
            made.close()
    async with Broker(data, group_min_session_timeout_ms=100) as broker:
        made = Clients(broker)
        try:
            back = Member(await made.new(), "g-expire", instance_id="pod-0")
            back.member_id, back.generation, back.last_join = static.member_id, static.generation, static.last_join
            # The static member's instance id came back with it: another member id for it is fenced.
            assert await back.heartbeat(member_id="pod-0-other") == ErrorCode.fenced_instance_id
            # The member that does not come back expires after its session (armed at load time) ...
            deadline = time.monotonic() + WAIT_S
            while (beat := await back.heartbeat()) == ErrorCode.none and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert beat == ErrorCode.rebalance_in_progress
            # ... and the one that did rejoins into the next generation, alone.
            assert (await back.join()).generation_id == static.generation + 1
            assert (await back.sync({back.member_id: b"all"})).assignment == b"all"
            described = await describe(back.client, "g-expire")
            assert (described.group_state, [m.member_id for m in described.members]) == ("Stable", [back.member_id])
        finally:
            made.close()


async def test_the_offsets_topic_holds_kafkas_record_formats(broker: Broker, clients: Clients) -> None:
    member = await clients.member("g-format")
    await stable_group([member])
    await member.commit({(TOPIC, 0): (5, "m")})
    log = broker.state.partition_log(OFFSETS_TOPIC, 0)
    assert log is not None and log.config.cleanup_policy == "compact"
    records = decode_batches(log.read(0, 1 << 20).read_bytes(), OFFSETS_TOPIC, 0)
    decoded = [(decode_key(r.key), r.value) for r in records]
    groups = [decode_group_value(v) for k, v in decoded if k == GroupKey("g-format") and v is not None]
    assert [g.generation for g in groups] == [0, 1]  # the new group's empty record, then generation 1
    stable = groups[-1]
    assert (stable.protocol_type, stable.protocol, stable.leader) == (CONSUMER, "range", member.member_id)
    assert [(m.member_id, m.client_id, m.subscription, m.assignment) for m in stable.members] == [
        (member.member_id, "groups-test", b"range-meta", f"a-{member.member_id}".encode())
    ]
    offsets = [decode_offset_value(v) for k, v in decoded if k == OffsetKey("g-format", TOPIC, 0) and v]
    assert [(o.offset, o.leader_epoch, o.metadata) for o in offsets] == [(5, 7, "m")]


# ====================================================================== record formats (unit)


def test_offset_key_and_value_bytes_follow_kafkas_schemas() -> None:
    key = encode_offset_key(OffsetKey("g", "t", 3))
    assert key == b"\x00\x01" + b"\x00\x01g" + b"\x00\x01t" + b"\x00\x00\x00\x03"
    value = encode_offset_value(OffsetValue(10, 2, "md", 1_700_000_000_000))
    assert value == struct.pack(">hqih2sq", 3, 10, 2, 2, b"md", 1_700_000_000_000)
    assert decode_offset_value(value) == OffsetValue(10, 2, "md", 1_700_000_000_000)
    expiring = encode_offset_value(OffsetValue(10, -1, "", 5, 99))
    assert expiring == struct.pack(">hqhqq", 1, 10, 0, 5, 99)
    assert decode_offset_value(expiring) == OffsetValue(10, -1, "", 5, 99)
    assert decode_key(key) == OffsetKey("g", "t", 3)
    assert decode_key(b"\x00\x00" + key[2:]) == OffsetKey("g", "t", 3)  # the legacy type 0
    assert decode_key(b"\x00\x05\x00\x01g") is None  # a KIP-848 record type: skipped


def test_group_value_round_trips_and_reads_the_flexible_version() -> None:
    member = MemberValue("m-1", "inst", "client", "/127.0.0.1", 300, 100, b"sub", b"assign")
    value = GroupValue("consumer", 4, "range", "m-1", 1234, (member,))
    encoded = encode_group_value(value)
    assert encoded[:2] == b"\x00\x03" and decode_group_value(encoded) == value
    assert encode_group_key(GroupKey("gg")) == b"\x00\x02\x00\x02gg"
    empty = GroupValue("", 0, None, None, -1, ())
    assert decode_group_value(encode_group_value(empty)) == empty

    def compact(s: bytes) -> bytes:
        return bytes([len(s) + 1]) + s

    flexible = (
        struct.pack(">h", 4) + compact(b"consumer") + struct.pack(">i", 4) + compact(b"range") + compact(b"m-1")
        + struct.pack(">q", 1234) + bytes([2])
        + compact(b"m-1") + compact(b"inst") + compact(b"client") + compact(b"/127.0.0.1")
        + struct.pack(">ii", 300, 100) + compact(b"sub") + compact(b"assign") + b"\x00"
        + b"\x00"
    )  # fmt: skip
    assert decode_group_value(flexible) == value


def test_groups_map_to_offsets_topic_partitions_by_javas_string_hash() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair hashes as two UTF-16 units
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50
    assert {partition_for_group(f"g{i}", 1) for i in range(20)} == {0}
