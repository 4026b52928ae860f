"""kafkakit.broker.raft snapshots (KIP-630): a leader's snapshot, FetchSnapshot by a lagging follower, restart."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from kafkakit.broker.raft import NotYetSupportedError, Snapshot

from tests.raft_cluster import Quorum


@pytest.fixture
async def quorum(tmp_path: Path) -> AsyncIterator[Quorum]:
    q = Quorum(tmp_path)
    try:
        yield q
    finally:
        await q.stop_all()


async def test_a_lagging_follower_installs_the_leaders_snapshot_then_follows(quorum: Quorum) -> None:
    await quorum.start_all()
    leader_id, _ = await quorum.agreed_leader()
    leader = quorum.endpoints[leader_id].node
    lagging = next(i for i in quorum.voters if i != leader_id)
    await leader.append([b"before"])
    assert await quorum.delivered_values(lagging, 1) == [b"before"]
    await quorum.endpoints[lagging].isolate()
    last = await leader.append([f"v{i}".encode() for i in range(10)])
    with pytest.raises(ValueError):
        await leader.snapshot(leader.high_watermark + 1, [b"beyond the high watermark"])
    ident = await leader.snapshot(last + 1, [b"state-1", b"state-2"])
    assert (ident.end_offset, ident.epoch) == (last + 1, leader.epoch)
    directory = quorum.root / f"node-{leader_id}" / "__cluster_metadata-0"
    assert (directory / f"{last + 1:020d}-{leader.epoch:010d}.checkpoint").exists()
    assert leader.log.start_offset == last + 1 and leader.log.entries(0) == []
    await leader.append([b"after-snapshot"])

    await quorum.endpoints[lagging].heal()
    deadline = time.monotonic() + 8
    while not quorum.snapshots[lagging] or b"after-snapshot" not in [v for _, v in quorum.delivered[lagging]]:
        assert time.monotonic() < deadline, "the lagging follower did not catch up through the snapshot"
        await quorum.agreed_leader(timeout=8)  # (re-)elections while it rejoins are fine
        await quorum.delivered_values(lagging, len(quorum.delivered[lagging]) + 1, timeout=0.2)
    snapshot = quorum.snapshots[lagging][-1]
    assert (snapshot.end_offset, snapshot.records) == (last + 1, [b"state-1", b"state-2"])
    node = quorum.endpoints[lagging].node
    assert node.log.start_offset == last + 1
    # Before the snapshot it had delivered only "before"; after it, only what follows the snapshot.
    assert [v for _, v in quorum.delivered[lagging]] == [b"before", b"after-snapshot"]
    assert (quorum.root / f"node-{lagging}" / "__cluster_metadata-0" / ident.file_name).exists()


async def test_a_node_restarts_from_its_snapshot(quorum: Quorum) -> None:
    await quorum.start_all()
    leader_id, _ = await quorum.agreed_leader()
    leader = quorum.endpoints[leader_id].node
    last = await leader.append([b"a", b"b"])
    follower = next(i for i in quorum.voters if i != leader_id)
    await quorum.delivered_values(follower, 2)
    fnode = quorum.endpoints[follower].node
    deadline = time.monotonic() + 5
    while fnode.high_watermark <= last:
        assert time.monotonic() < deadline
        await quorum.delivered_values(follower, 3, timeout=0.05)
    await fnode.snapshot(last + 1, [b"a+b"])  # any node may snapshot its own committed state
    await leader.append([b"c"])
    await quorum.delivered_values(follower, 3)
    await quorum.endpoints.pop(follower).stop(graceful=False)

    restarted = await quorum.start(follower)  # registers with on_snapshot
    assert [s.records for s in quorum.snapshots[follower]] == [[b"a+b"]]
    assert restarted.node.log.start_offset == last + 1
    assert await quorum.delivered_values(follower, 1) == [b"c"]
    seen: list[Snapshot] = []
    with pytest.raises(NotYetSupportedError):
        restarted.node.register(lambda records: None)  # no on_snapshot: cannot start from a snapshot
    restarted.node.register(lambda records: None, seen.append)
    assert seen and seen[0].records == [b"a+b"]
