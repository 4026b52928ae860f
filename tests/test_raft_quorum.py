"""kafkakit.broker.raft: a 3-voter KRaft quorum over real TCP sockets, in one event loop.

Timeouts are small (election 150 ms, fetch 400 ms) so that elections and failovers take
well under a second; the bounds asserted leave room for a loaded 2-core machine.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kafkakit.broker.raft import NotLeaderError, RaftConfig, RaftPeers, Role, Voter, parse_voters
from kafkakit.broker.raft import messages as m

from tests.raft_cluster import BACKOFF_MS, ELECTION_MS, FETCH_MS, Quorum


@pytest.fixture
async def quorum(tmp_path: Path) -> AsyncIterator[Quorum]:
    q = Quorum(tmp_path)
    try:
        yield q
    finally:
        await q.stop_all()


async def test_a_leader_is_elected_and_every_node_agrees(quorum: Quorum) -> None:
    await quorum.start_all()
    leader, epoch = await quorum.agreed_leader()
    assert epoch >= 1
    assert [e.node.role for e in quorum.endpoints.values()].count(Role.LEADER) == 1
    # The quorum-state files say the same (Kafka's QuorumStateData JSON).
    for node_id in quorum.voters:
        data = json.loads((quorum.root / f"node-{node_id}" / "quorum-state").read_text())
        assert (data["leaderId"], data["leaderEpoch"], data["data_version"]) == (leader, epoch, 0)
        assert [v["voterId"] for v in data["currentVoters"]] == [1, 2, 3]
    # ApiVersions over the same listener advertises the quorum APIs.
    peers = RaftPeers(quorum.voters)
    try:
        from kafkakit.protocol.build import make_request

        versions = await peers.send(
            leader, make_request(18, 3, client_software_name="t", client_software_version="1"), 2
        )
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert advertised[m.VOTE] == (0, 0) and advertised[m.FETCH] == (17, 17)
    finally:
        await peers.close()


async def test_appends_commit_on_a_majority_and_reach_every_listener_in_order(quorum: Quorum) -> None:
    await quorum.start_all()
    leader, _ = await quorum.agreed_leader()
    node = quorum.endpoints[leader].node
    expected = [f"record-{i}".encode() for i in range(30)]
    offsets = [await node.append(expected[i : i + 3]) for i in range(0, 30, 3)]
    assert offsets == sorted(offsets) and len(set(offsets)) == 10
    assert node.high_watermark > offsets[-1]
    for node_id in quorum.voters:
        assert await quorum.delivered_values(node_id, 30) == expected
    # Every log holds the same (offset, epoch, value) entries.
    logs = {
        i: [(e.offset, e.epoch, e.value) for e in quorum.endpoints[i].node.log.entries(0)]
        for i in quorum.voters
    }
    assert logs[1] == logs[2] == logs[3]


async def test_a_stopped_leader_is_replaced_within_the_election_bound_and_commits_survive(
    quorum: Quorum,
) -> None:
    await quorum.start_all()
    old, old_epoch = await quorum.agreed_leader()
    before = [b"a", b"b", b"c"]
    await quorum.endpoints[old].node.append(before)
    survivors = [i for i in quorum.voters if i != old]
    for i in survivors:
        assert await quorum.delivered_values(i, 3) == before
    started = time.monotonic()
    await quorum.endpoints.pop(old).stop(graceful=False)
    new, new_epoch = await quorum.agreed_leader(survivors)
    elapsed = time.monotonic() - started
    assert new != old and new_epoch > old_epoch
    # fetch timeout + an election timeout (<= 2T) + backoff, with room for a loaded machine.
    bound = (FETCH_MS + 2 * ELECTION_MS + BACKOFF_MS) / 1000 + 1.0
    assert elapsed < bound, f"failover took {elapsed:.2f}s (bound {bound:.2f}s)"
    await quorum.endpoints[new].node.append([b"d"])
    for i in survivors:
        assert await quorum.delivered_values(i, 4) == [*before, b"d"]


async def test_a_graceful_resign_hands_over_with_end_quorum_epoch(quorum: Quorum) -> None:
    # A long fetch timeout: only EndQuorumEpoch can make the followers campaign quickly.
    await quorum.start_all(fetch_timeout_ms=5000)
    old, old_epoch = await quorum.agreed_leader(timeout=15)
    await quorum.endpoints[old].node.append([b"x"])
    started = time.monotonic()
    await quorum.endpoints[old].node.resign()
    new, new_epoch = await quorum.agreed_leader([i for i in quorum.voters if i != old], timeout=4)
    assert new != old and new_epoch > old_epoch
    assert time.monotonic() - started < 4.0


async def test_a_partitioned_leader_cannot_commit_and_its_tail_is_truncated(quorum: Quorum) -> None:
    await quorum.start_all()
    old, _ = await quorum.agreed_leader()
    old_node = quorum.endpoints[old].node
    await old_node.append([b"committed"])
    await quorum.endpoints[old].isolate()
    lonely = asyncio.create_task(old_node.append([b"lost"]))
    others = [i for i in quorum.voters if i != old]
    new, _ = await quorum.agreed_leader(others)
    await quorum.endpoints[new].node.append([b"after-partition"])
    # Alone, the old leader never commits: its append ends with NotLeaderError (check quorum), not an offset.
    with pytest.raises(NotLeaderError):
        await asyncio.wait_for(lonely, 5)
    assert b"lost" in [e.value for e in old_node.log.entries(0)]
    assert b"lost" not in [v for _, v in quorum.delivered[old]]
    await quorum.endpoints[old].heal()
    await quorum.agreed_leader(timeout=8)
    expected = [b"committed", b"after-partition"]
    assert await quorum.delivered_values(old, 2) == expected
    values = [e.value for e in old_node.log.entries(0) if not e.control]
    assert values == expected, values
    leader_now, _ = await quorum.agreed_leader()
    assert [e.value for e in quorum.endpoints[leader_now].node.log.entries(0) if not e.control] == expected


async def test_quorum_state_survives_a_restart_and_a_node_never_votes_twice_in_an_epoch(
    quorum: Quorum,
) -> None:
    # Only node 1 runs, with a long election timeout so that it does not campaign itself.
    await quorum.start(1, election_timeout_ms=60_000, fetch_timeout_ms=60_000)
    peers = RaftPeers(quorum.voters)
    try:

        async def vote(epoch: int, candidate: int, last_epoch: int = 0, end: int = 0) -> m.EpochAnswer:
            response = await peers.send(
                1, m.vote_request("kafkakit-raft", epoch, candidate, last_epoch, end), 2
            )
            return m.parse_epoch_response(response)

        assert (await vote(5, 2)).vote_granted
        state = json.loads((quorum.root / "node-1" / "quorum-state").read_text())
        assert (state["leaderEpoch"], state["votedId"]) == (5, 2)
        await quorum.endpoints.pop(1).stop(graceful=False)
        await peers.close()
        peers.reopen()
        await quorum.start(1, election_timeout_ms=60_000, fetch_timeout_ms=60_000)
        answer = await vote(5, 3)
        assert not answer.vote_granted and answer.leader_epoch == 5
        assert (await vote(5, 2)).vote_granted  # the same candidate again: the same answer
        assert not (await vote(4, 3)).vote_granted  # an older epoch
        assert (await vote(6, 3)).vote_granted  # a new epoch, a new vote
    finally:
        await peers.close()


async def test_a_node_with_a_stale_log_cannot_win_an_election(quorum: Quorum) -> None:
    # Node 3 campaigns eagerly (short timeouts); nodes 1 and 2 are patient.
    await quorum.start(1, election_timeout_ms=400)
    await quorum.start(2, election_timeout_ms=400)
    await quorum.start(3, election_timeout_ms=60, fetch_timeout_ms=200)
    leader, _ = await quorum.agreed_leader(timeout=10)
    for _attempt in range(20):  # the eager node may win again after resigning (its log is as good)
        if leader != 3:
            break
        await quorum.endpoints[3].node.resign()
        leader, _ = await quorum.agreed_leader(timeout=10)
    assert leader != 3
    await quorum.endpoints[3].isolate()
    await quorum.endpoints[leader].node.append([b"newer"])
    other = 3 - leader  # the other patient node (1 or 2)
    assert await quorum.delivered_values(other, 1) == [b"newer"]
    await quorum.endpoints.pop(leader).stop(graceful=False)
    await quorum.endpoints[3].heal()
    winner, _ = await quorum.agreed_leader([other, 3], timeout=10)
    assert winner == other, "the node without the committed entry won"
    assert await quorum.delivered_values(3, 1) == [b"newer"]
    # A direct Vote with a stale log is refused by the up-to-date node.
    peers = RaftPeers(quorum.voters)
    try:
        node = quorum.endpoints[other].node
        request = m.vote_request("kafkakit-raft", node.epoch + 1, 3, 0, 0)
        assert not m.parse_epoch_response(await peers.send(other, request, 2)).vote_granted
    finally:
        await peers.close()


async def test_committed_iterator_and_wait_for_leader(quorum: Quorum) -> None:
    await quorum.start_all()
    follower_view = await quorum.endpoints[1].node.wait_for_leader(5)
    assert follower_view.leader_id in quorum.voters and follower_view.epoch >= 1
    leader, _ = await quorum.agreed_leader()
    node = quorum.endpoints[leader].node
    follower = next(i for i in quorum.voters if i != leader)
    stream = quorum.endpoints[follower].node.committed()
    await node.append([b"one", b"two"])
    await node.append([b"three"])
    got = [await asyncio.wait_for(stream.__anext__(), 5) for _ in range(3)]
    await stream.aclose()
    assert [r.value for r in got] == [b"one", b"two", b"three"]
    assert [r.offset for r in got] == sorted(r.offset for r in got)


def test_config_reads_kafkas_property_names() -> None:
    config = RaftConfig.from_properties(
        2,
        {
            "controller.quorum.voters": "1@127.0.0.1:9190,2@127.0.0.1:9191,3@[::1]:9192",
            "controller.quorum.election.timeout.ms": "300",
        },
    )
    assert config.voters[3] == Voter(3, "::1", 9192) and config.majority == 2
    assert (config.election_timeout_ms, config.fetch_timeout_ms, config.election_backoff_max_ms) == (
        300,
        2000,
        1000,
    )
    assert all(0.3 <= config.random_election_timeout() < 0.6 for _ in range(100))
    with pytest.raises(ValueError):
        parse_voters("1@127.0.0.1:9190,1@127.0.0.1:9191")
