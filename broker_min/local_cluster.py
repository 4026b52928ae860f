"""A local multi-node broker_min cluster: N combined broker+controller processes on this machine.

``async with LocalCluster(nodes=3, data_dir=D) as cluster:`` starts node ids 1..N as child
processes (``python -m kafkakit.broker``), each a KRaft voter with its own data directory
``D/node-<id>``, a broker port and a controller port, and returns once every node is
registered and unfenced. ``cluster.bootstrap_servers`` lists every broker; ``kill`` (SIGKILL),
``stop`` (SIGTERM: a controlled shutdown), ``restart``, ``pause`` (SIGSTOP) and ``resume``
act on one node. Each node's log is ``D/node-<id>.log``. The ``kafkakit-broker cluster``
command runs one of these until Ctrl-C.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import shutil
import signal
import struct
import sys
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from kafkakit.broker.ports import free_ports
from kafkakit.protocol import decode_response, encode_request
from kafkakit.protocol.build import make_request

#: Seconds to wait for a node to register and be unfenced.
DEFAULT_STARTUP_TIMEOUT = 60.0
#: Settings that make a small local cluster react in seconds rather than Kafka's production defaults.
LOCAL_DEFAULTS: Mapping[str, str] = {
    "controller.quorum.election.timeout.ms": "1000",
    "controller.quorum.fetch.timeout.ms": "2000",
    "broker.session.timeout.ms": "4000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "10000",
    "group.initial.rebalance.delay.ms": "0",
}
_METADATA = 3
_SIZE = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition as one node's metadata describes it."""

    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class LocalClusterError(RuntimeError):
    """A node did not start, or the cluster did not become ready in time."""


class PortInUseError(LocalClusterError):
    """A node could not listen on its port: another process took it after it was chosen."""


#: A first start whose node found its port taken is tried again on fresh ports, this many times
#: in all. Ports are chosen free but bound only later, by the node processes; in between, any
#: process can take one (a client's outgoing connection gets it as its ephemeral port).
_START_ATTEMPTS = 3


@dataclass(slots=True)
class _Node:
    node_id: int
    data_dir: Path
    port: int
    controller_port: int
    process: asyncio.subprocess.Process | None = None
    log_file: IO[bytes] | None = None
    paused: bool = False


class LocalCluster:
    """N broker_min nodes in one KRaft quorum (node ids 1..N), as child processes."""

    def __init__(
        self,
        nodes: int = 3,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        host: str = "127.0.0.1",
        config: Mapping[str, str] | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        python: str = sys.executable,
    ) -> None:
        if nodes < 1:
            raise ValueError("a cluster needs at least one node")
        self._temp: tempfile.TemporaryDirectory[str] | None = None
        if data_dir is None:
            self._temp = tempfile.TemporaryDirectory(prefix="kafkakit-cluster-")
            data_dir = self._temp.name
        self.data_dir = Path(data_dir)
        self.host = host
        self.config = {**LOCAL_DEFAULTS, **dict(config or {})}
        self.config.setdefault("cluster.id", base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))
        self.config.setdefault("default.replication.factor", str(min(nodes, 3)))
        self.config.setdefault("offsets.topic.replication.factor", str(min(nodes, 3)))
        self.config.setdefault("transaction.state.log.replication.factor", str(min(nodes, 3)))
        self.config.setdefault("transaction.state.log.min.isr", str(min(nodes, 2)))
        self.startup_timeout = startup_timeout
        self.python = python
        self._nodes = {
            i: _Node(i, self.data_dir / f"node-{i}", port, controller_port)
            for i, (port, controller_port) in enumerate(_port_pairs(nodes, host), start=1)
        }

    # -- addresses -------------------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every node's broker listener, comma-separated."""
        return ",".join(self.address(i) for i in self.node_ids)

    def address(self, node_id: int) -> str:
        """``host:port`` of one node's broker listener."""
        return f"{self.host}:{self._node(node_id).port}"

    @property
    def quorum_voters(self) -> str:
        """``controller.quorum.voters`` of this cluster."""
        return ",".join(f"{n.node_id}@{self.host}:{n.controller_port}" for n in self._nodes.values())

    def log_path(self, node_id: int) -> Path:
        """The node's stderr/stdout log."""
        return self.data_dir / f"node-{node_id}.log"

    def pid(self, node_id: int) -> int | None:
        """The node's process id while it runs (e.g. to read its RSS or lower its limits)."""
        process = self._node(node_id).process
        return process.pid if process is not None and process.returncode is None else None

    def is_running(self, node_id: int) -> bool:
        process = self._node(node_id).process
        return process is not None and process.returncode is None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every node and wait until all are registered and unfenced."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fresh = not any(node.data_dir.exists() for node in self._nodes.values())
        try:
            for attempt in range(1, _START_ATTEMPTS + 1):
                try:
                    for node_id in self.node_ids:
                        await self._spawn(node_id)
                    await self.wait_ready()
                    return
                except PortInUseError:
                    if not fresh or attempt == _START_ATTEMPTS:
                        raise
                    await self._start_over_on_new_ports()
        except BaseException:
            await self.close()
            raise

    async def _start_over_on_new_ports(self) -> None:
        """Stop every node, remove what this first start wrote, and choose new ports."""
        await asyncio.gather(*(self._terminate(i, signal.SIGKILL, 10.0) for i in self.node_ids))
        pairs = _port_pairs(len(self._nodes), self.host)
        for (node_id, node), (port, controller_port) in zip(self._nodes.items(), pairs, strict=True):
            shutil.rmtree(node.data_dir, ignore_errors=True)
            self.log_path(node_id).unlink(missing_ok=True)
            node.port, node.controller_port = port, controller_port

    async def close(self) -> None:
        """Stop every node (SIGTERM, then SIGKILL after 20 s)."""
        await asyncio.gather(*(self._terminate(i, signal.SIGTERM, 20.0) for i in self.node_ids))
        if self._temp is not None:
            self._temp.cleanup()
            self._temp = None

    async def __aenter__(self) -> LocalCluster:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # -- faults ------------------------------------------------------------------------------

    async def kill(self, node_id: int) -> None:
        """SIGKILL the node (no controlled shutdown, nothing flushed)."""
        await self._terminate(node_id, signal.SIGKILL, 10.0)

    async def stop(self, node_id: int, timeout: float = 30.0) -> None:
        """SIGTERM the node: it moves its leaderships away, then exits cleanly."""
        await self._terminate(node_id, signal.SIGTERM, timeout)

    async def restart(self, node_id: int, *, wait: bool = True) -> None:
        """Stop the node if it runs, start it again on the same ports and data, and (by default)
        wait until it is registered and unfenced."""
        await self.stop(node_id)
        await self._spawn(node_id)
        if wait:
            await self.wait_ready()

    async def start_node(self, node_id: int, *, wait: bool = True) -> None:
        """Start a node that was killed or stopped."""
        if self.is_running(node_id):
            return
        await self._spawn(node_id)
        if wait:
            await self.wait_ready()

    async def pause(self, node_id: int) -> None:
        """SIGSTOP the node: it keeps its sockets but answers nothing (a zombie)."""
        node = self._node(node_id)
        if node.process is not None and node.process.returncode is None:
            node.process.send_signal(signal.SIGSTOP)
            node.paused = True

    async def resume(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        node = self._node(node_id)
        if node.process is not None and node.paused:
            node.process.send_signal(signal.SIGCONT)
            node.paused = False

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running, unpaused node answers Metadata listing all of them as live.

        A node answers only once its metadata has caught up with the log (its requests wait
        until then, see :mod:`kafkakit.broker.cluster_mode`), so an answer is never a replayed
        prefix of the log from before a restart."""
        loop = asyncio.get_running_loop()
        limit = self.startup_timeout if timeout is None else timeout
        deadline = loop.time() + limit
        expected = {i for i in self.node_ids if self.is_running(i) and not self._nodes[i].paused}
        while True:
            self._check_alive()
            seen = await self._live_brokers_everywhere(expected)
            if seen:
                return
            if loop.time() > deadline:
                raise LocalClusterError(
                    f"cluster not ready after {limit:.0f}s: "
                    f"expected live brokers {sorted(expected)}; logs in {self.data_dir}"
                )
            await asyncio.sleep(0.2)

    async def partition_state(self, topic: str, partition: int, node_id: int) -> PartitionState | None:
        """Leader, leader epoch, replicas and ISR of a partition as node ``node_id`` reports them
        (None if it does not answer or does not know the partition). Asks that node only, so a
        paused or dead node elsewhere cannot delay the answer."""
        node = self._node(node_id)
        try:
            response = await _metadata(self.host, node.port, timeout=2.0, topics=(topic,))
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return None
        for found in response.topics:
            for p in found.partitions:
                if found.name == topic and p.partition_index == partition:
                    return PartitionState(int(p.leader_id), int(p.leader_epoch), tuple(p.replica_nodes), tuple(p.isr_nodes))
        return None

    async def live_brokers(self, node_id: int) -> set[int]:
        """The live brokers node ``node_id`` reports in Metadata (empty if it does not answer)."""
        node = self._node(node_id)
        try:
            response = await _metadata(self.host, node.port, timeout=2.0)
        except (OSError, TimeoutError, asyncio.IncompleteReadError):
            return set()
        return {b.node_id for b in response.brokers}

    # -- internals ---------------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise ValueError(f"no node {node_id}: node ids are {self.node_ids}") from None

    def _command(self, node: _Node) -> list[str]:
        settings = {
            **self.config,
            "node.id": str(node.node_id),
            "controller.quorum.voters": self.quorum_voters,
            "process.roles": "broker,controller",
            "listeners": f"PLAINTEXT://{self.host}:{node.port},CONTROLLER://{self.host}:{node.controller_port}",
        }
        command = [self.python, "-m", "kafkakit.broker", "--data-dir", str(node.data_dir)]
        command += ["--host", self.host, "--port", str(node.port)]
        for key, value in settings.items():
            command += ["--config", f"{key}={value}"]
        return command

    async def _spawn(self, node_id: int) -> None:
        node = self._node(node_id)
        if self.is_running(node_id):
            return
        node.data_dir.mkdir(parents=True, exist_ok=True)
        if node.log_file is None:
            node.log_file = open(self.log_path(node_id), "ab")  # noqa: SIM115 - kept open while the node runs
        node.process = await asyncio.create_subprocess_exec(
            *self._command(node), stdout=node.log_file, stderr=node.log_file, stdin=asyncio.subprocess.DEVNULL
        )
        node.paused = False

    async def _terminate(self, node_id: int, sig: signal.Signals, timeout: float) -> None:
        node = self._node(node_id)
        process = node.process
        if process is not None and process.returncode is None:
            if node.paused:
                process.send_signal(signal.SIGCONT)
                node.paused = False
            process.send_signal(sig)
            try:
                async with asyncio.timeout(timeout):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        if node.log_file is not None:
            node.log_file.close()
            node.log_file = None

    def _check_alive(self) -> None:
        for node in self._nodes.values():
            process = node.process
            if process is not None and process.returncode not in (None, -signal.SIGKILL, -signal.SIGTERM, 0):
                tail = _tail(self.log_path(node.node_id))
                error = PortInUseError if "address already in use" in tail else LocalClusterError
                raise error(f"node {node.node_id} exited with {process.returncode}:\n{tail}")

    async def _live_brokers_everywhere(self, expected: set[int]) -> bool:
        answers = await asyncio.gather(*(self.live_brokers(i) for i in sorted(expected)))
        return all(answer == expected for answer in answers)


async def _metadata(host: str, port: int, timeout: float, topics: tuple[str, ...] = ()) -> Any:
    """One Metadata v12 request (for ``topics``, none by default) on a fresh connection."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            wanted = tuple({"name": t, "topic_id": uuid.UUID(int=0)} for t in topics)
            request = make_request(_METADATA, 12, topics=wanted, allow_auto_topic_creation=False,
                                   include_topic_authorized_operations=False)  # fmt: skip
            writer.write(encode_request(1, "kafkakit-local-cluster", request))
            await writer.drain()
            size = _SIZE.unpack(await reader.readexactly(4))[0]
            body = await reader.readexactly(size)
            return decode_response(_METADATA, 12, body)[1]
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


def _port_pairs(nodes: int, host: str) -> list[tuple[int, int]]:
    """(broker port, controller port) for each of ``nodes`` nodes, all distinct."""
    ports = free_ports(2 * nodes, host)
    return list(zip(ports[0::2], ports[1::2], strict=True))


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text("utf-8", "replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
