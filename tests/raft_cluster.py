"""A 3-voter kafkakit.broker.raft quorum over real sockets in one event loop, for the raft tests."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from kafkakit.broker.ports import free_ports
from kafkakit.broker.raft import RaftConfig, RaftEndpoint, Role, Snapshot, Voter, start_endpoint

ELECTION_MS = 150
FETCH_MS = 400
BACKOFF_MS = 100


class Quorum:
    """Three voters, each with its own directory, listener and committed-record log."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.voters = {i: Voter(i, "127.0.0.1", port) for i, port in zip((1, 2, 3), free_ports(3), strict=True)}
        self.endpoints: dict[int, RaftEndpoint] = {}
        self.delivered: dict[int, list[tuple[int, bytes]]] = {}
        self.snapshots: dict[int, list[Snapshot]] = {}

    def config(self, node_id: int, **overrides: int) -> RaftConfig:
        settings = {
            "election_timeout_ms": ELECTION_MS,
            "fetch_timeout_ms": FETCH_MS,
            "election_backoff_max_ms": BACKOFF_MS,
            "request_timeout_ms": 500,
            "fetch_max_wait_ms": 100,
        } | overrides
        return RaftConfig(node_id, self.voters, **settings)

    async def start(self, node_id: int, **overrides: int) -> RaftEndpoint:
        endpoint = await start_endpoint(self.config(node_id, **overrides), self.root / f"node-{node_id}")
        self.endpoints[node_id] = endpoint
        got = self.delivered[node_id] = []
        snapshots = self.snapshots[node_id] = []
        endpoint.node.register(
            lambda records: got.extend((r.offset, r.value) for r in records), snapshots.append
        )
        return endpoint

    async def start_all(self, **overrides: int) -> None:
        for node_id in self.voters:
            await self.start(node_id, **overrides)

    async def stop_all(self) -> None:
        for endpoint in self.endpoints.values():
            await endpoint.stop(graceful=False)

    async def agreed_leader(self, among: list[int] | None = None, timeout: float = 5.0) -> tuple[int, int]:
        """Wait until the given nodes agree on one leader and epoch, that leader leading; (leader, epoch)."""
        ids = among or list(self.endpoints)
        nodes = [self.endpoints[i].node for i in ids]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            views = {(n.leader_id, n.epoch) for n in nodes}
            if len(views) == 1:
                leader, epoch = views.pop()
                if leader in ids and self.endpoints[leader].node.role is Role.LEADER:
                    roles = [n.role for n in nodes if n.config.node_id != leader]
                    if all(r is Role.FOLLOWER for r in roles):
                        return leader, epoch
            await asyncio.sleep(0.01)
        raise AssertionError(
            f"no agreement: {[(n.config.node_id, n.role, n.leader_id, n.epoch) for n in nodes]}"
        )

    async def delivered_values(self, node_id: int, count: int, timeout: float = 5.0) -> list[bytes]:
        deadline = time.monotonic() + timeout
        while len(self.delivered[node_id]) < count and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        offsets = [o for o, _ in self.delivered[node_id]]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), offsets
        return [v for _, v in self.delivered[node_id]]
