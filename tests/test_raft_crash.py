"""kafkakit.broker.raft: kill -9 of a leader running as a child process, then its restart.

Nodes 1 and 2 run in this event loop; node 3 runs as ``python -m kafkakit.broker.raft``
with short timeouts so that it tends to lead, appending a counter every 10 ms.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from kafkakit.broker.ports import free_ports
from kafkakit.broker.raft import RaftConfig, RaftEndpoint, Role, Voter, start_endpoint


class Child:
    """Node 3 as a child process, its stdout events collected."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.events: list[dict[str, Any]] = []
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def values(self, kind: str) -> list[str]:
        return [e["value"] for e in self.events if e["event"] == kind]


async def _spawn(voters: str, directory: Path, *extra: str) -> Child:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kafkakit.broker.raft",
        "--node-id",
        "3",
        "--voters",
        voters,
        "--dir",
        str(directory),
        "--election-backoff-max-ms",
        "50",
        "--request-timeout-ms",
        "500",
        "--fetch-max-wait-ms",
        "100",
        *extra,
        stdout=asyncio.subprocess.PIPE,
    )
    return Child(proc)


async def _until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_a_killed_leader_loses_no_acknowledged_entry_and_rejoins_after_restart(tmp_path: Path) -> None:
    voters = {i: Voter(i, "127.0.0.1", port) for i, port in zip((1, 2, 3), free_ports(3), strict=True)}
    text = ",".join(f"{v.node_id}@{v.host}:{v.port}" for v in voters.values())
    endpoints: dict[int, RaftEndpoint] = {}
    delivered: dict[int, list[str]] = {1: [], 2: []}
    for i in (1, 2):
        config = RaftConfig(
            i,
            voters,
            election_timeout_ms=500,
            fetch_timeout_ms=500,
            election_backoff_max_ms=50,
            request_timeout_ms=500,
            fetch_max_wait_ms=100,
        )
        endpoints[i] = await start_endpoint(config, tmp_path / f"node-{i}")
        endpoints[i].node.register(lambda rs, got=delivered[i]: got.extend(r.value.decode() for r in rs))
    child = await _spawn(
        text,
        tmp_path / "node-3",
        "--election-timeout-ms",
        "60",
        "--fetch-timeout-ms",
        "300",
        "--append-every-ms",
        "10",
    )
    restarted: Child | None = None
    try:
        # Let node 3 lead: an in-process leader hands over until it does.
        deadline = time.monotonic() + 20
        while endpoints[1].node.leader_id != 3 or endpoints[1].node.role is not Role.FOLLOWER:
            assert time.monotonic() < deadline, "node 3 never led"
            for e in endpoints.values():
                if e.node.role is Role.LEADER:
                    await e.node.resign()
            await asyncio.sleep(0.05)
        await _until(lambda: len(child.values("acked")) >= 20, 15, "20 acknowledged appends")
        child.proc.kill()  # kill -9, in the middle of the append stream
        await child.proc.wait()
        await child.reader
        acked = child.values("acked")
        old_epoch = max(e["epoch"] for e in child.events if e["event"] == "leader")

        await _until(
            lambda: any(e.node.role is Role.LEADER and e.node.epoch > old_epoch for e in endpoints.values()),
            10,
            "a new leader among nodes 1 and 2",
        )
        new_leader = next(e.node for e in endpoints.values() if e.node.role is Role.LEADER)
        await new_leader.append([b"after-crash"])
        for i in (1, 2):
            await _until(lambda i=i: "after-crash" in delivered[i], 5, f"node {i} delivery")
            missing = [v for v in acked if v not in delivered[i]]
            assert not missing, f"acknowledged but lost on node {i}: {missing}"
            assert delivered[i].index(acked[-1]) < delivered[i].index("after-crash")
        assert delivered[1] == delivered[2]

        # Restarted (recovering its log from disk), node 3 follows and replays the same committed log.
        restarted = await _spawn(
            text, tmp_path / "node-3", "--election-timeout-ms", "500", "--fetch-timeout-ms", "500"
        )
        expected = list(delivered[1])
        await _until(
            lambda: restarted.values("committed")[: len(expected)] == expected, 15, "node 3 catching up"
        )
        assert restarted.values("acked") == []
        state = json.loads((tmp_path / "node-3" / "quorum-state").read_text())
        assert state["leaderEpoch"] >= new_leader.epoch
    finally:
        for c in (child, restarted):
            if c is not None and c.proc.returncode is None:
                c.proc.terminate()
                await c.proc.wait()
        for e in endpoints.values():
            await e.stop(graceful=False)
