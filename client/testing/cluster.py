"""The cluster behind the ``kafka_cluster`` fixture.

- :class:`ClusterProcesses`: a broker_min KRaft cluster on this machine
  (:class:`kafkakit.broker.LocalCluster`: N combined broker+controller child
  processes, node ids 1..N), the default. It takes faults per node:
  :meth:`~KafkaCluster.kill` (SIGKILL), :meth:`~KafkaCluster.stop` (SIGTERM: a
  controlled shutdown), :meth:`~KafkaCluster.start`, :meth:`~KafkaCluster.restart`,
  :meth:`~KafkaCluster.pause` (SIGSTOP) and :meth:`~KafkaCluster.resume` (SIGCONT).
- :class:`ExternalCluster`: a cluster someone else runs (``--kafka-bootstrap``);
  faults raise :class:`~kafkakit.testing.BrokerFaultError`.

The methods are synchronous, as ``kafka_broker``'s are: :class:`ClusterProcesses`
drives its :class:`~kafkakit.broker.LocalCluster` on an event loop of its own, in
a background thread, so they may be called from plain and async tests alike.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import sys
import threading
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kafkakit.testing.brokers import BrokerFaultError, BrokerStartError, ExternalBroker
from kafkakit.testing.topics import _run_in_thread

if TYPE_CHECKING:
    from kafkakit.broker.local_cluster import LocalCluster, PartitionState

__all__ = ["ClusterProcesses", "ExternalCluster", "KafkaCluster"]

_T = TypeVar("_T")

#: Seconds a fault or query may take before the call gives up (a restart waits for the node
#: to register: ``startup_timeout`` on top).
_CALL_TIMEOUT = 120.0


class KafkaCluster:
    """What the ``kafka_cluster`` fixture gives a test, whoever runs the cluster.

    ``bootstrap_servers`` lists the brokers for any client library; ``node_ids``
    are the broker ids; ``leader(topic, partition)`` says which node leads a
    partition. The node faults take a node id.
    """

    #: "process" (broker_min's LocalCluster, started by the plugin) or "external"
    mode = "external"
    data_dir: Path | None = None

    def __init__(self, bootstrap_servers: str = "") -> None:
        self._bootstrap_servers = bootstrap_servers

    @property
    def bootstrap_servers(self) -> str:
        """``host:port,host:port,...`` for clients."""
        if not self._bootstrap_servers:
            raise BrokerStartError(f"the {self.mode} cluster is not started")
        return self._bootstrap_servers

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.mode} {self._bootstrap_servers or '(not started)'}>"

    @property
    def node_ids(self) -> list[int]:
        """The brokers' node ids, as the cluster describes itself."""
        from kafkakit import Admin

        async def describe() -> list[int]:
            async with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
                return sorted(b.node_id for b in (await admin.describe_cluster()).brokers)

        return _run_in_thread(describe)

    def address(self, node_id: int) -> str:
        """``host:port`` of one broker, as the cluster describes it."""
        from kafkakit import Admin

        async def describe() -> str:
            async with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
                for broker in (await admin.describe_cluster()).brokers:
                    if broker.node_id == node_id:
                        return f"{broker.host}:{broker.port}"
            raise ValueError(f"the cluster has no broker {node_id}")

        return _run_in_thread(describe)

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node id the cluster's metadata names as the partition's leader (-1: none)."""
        from kafkakit import Admin

        async def describe() -> int:
            async with Admin(bootstrap_servers=self.bootstrap_servers) as admin:
                (description,) = await admin.describe_topics([topic])
            for info in description.partitions:
                if info.partition == partition:
                    return info.leader
            raise ValueError(f"{topic!r} has no partition {partition}")

        return _run_in_thread(describe)

    # -- node logs ------------------------------------------------------------------------

    def log_path(self, node_id: int) -> Path | None:
        """The node's log file (None where the plugin did not start the node)."""
        return None

    def log_size(self, node_id: int) -> int:
        """Bytes of the node's log written so far (a mark for :meth:`log_text`)."""
        path = self.log_path(node_id)
        try:
            return 0 if path is None else path.stat().st_size
        except OSError:
            return 0

    def log_text(self, node_id: int, since: int = 0) -> str:
        """The node's log from byte offset ``since`` (a :meth:`log_size` mark) to now."""
        path = self.log_path(node_id)
        if path is None:
            return ""
        try:
            with open(path, "rb") as log:
                log.seek(since)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def recent_log(self, node_id: int, lines: int = 50) -> str:
        """The last ``lines`` lines of the node's log."""
        return "\n".join(self.log_text(node_id).splitlines()[-lines:])

    # -- faults ---------------------------------------------------------------------------

    def _no_faults(self, fault: str) -> BrokerFaultError:
        return BrokerFaultError(
            f"kafka_cluster.{fault}() is not supported for an external cluster ({self._bootstrap_servers}): "
            "the plugin did not start its nodes. Node faults need the cluster the plugin starts "
            "(broker_min's LocalCluster: run without --kafka-bootstrap / KAFKAKIT_TEST_BOOTSTRAP)."
        )

    def kill(self, node_id: int) -> None:
        """SIGKILL the node: a crash, no controlled shutdown, nothing flushed."""
        raise self._no_faults("kill")

    def stop(self, node_id: int, timeout: float = 30.0) -> None:
        """SIGTERM the node: a controlled shutdown (its leaderships move away first), then it exits."""
        raise self._no_faults("stop")

    def start(self, node_id: int, *, wait: bool = True) -> None:
        """Start a killed or stopped node on its data and ports; by default wait until it is
        registered and unfenced again."""
        raise self._no_faults("start")

    def restart(self, node_id: int, *, crash: bool = False, wait: bool = True) -> None:
        """Stop the node (SIGKILL with ``crash=True``, else a controlled shutdown) and start it
        again on the same data and ports; by default wait until it is back in the cluster."""
        raise self._no_faults("restart")

    def pause(self, node_id: int) -> None:
        """SIGSTOP the node: its connections stay open, nothing answers (a zombie)."""
        raise self._no_faults("pause")

    def resume(self, node_id: int) -> None:
        """SIGCONT a paused node."""
        raise self._no_faults("resume")

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running, unpaused node is registered and unfenced."""
        raise self._no_faults("wait_ready")

    def is_running(self, node_id: int) -> bool:
        """Whether the node's process runs and is not paused."""
        return True

    def ensure_running(self) -> None:
        """Resume paused nodes and start stopped ones; the plugin calls it after each test."""

    def close(self) -> None:
        """Stop every node if the plugin started them."""


class ExternalCluster(KafkaCluster):
    """A cluster the plugin did not start (``--kafka-bootstrap``)."""

    mode = "external"

    def check_reachable(self, timeout: float = 10.0) -> None:
        """Raise :class:`BrokerStartError` unless some bootstrap address accepts a TCP connection."""
        ExternalBroker(self.bootstrap_servers).check_reachable(timeout)


def _die_with_parent_launcher(directory: Path) -> str:
    """On Linux, an executable that runs ``python ARGS`` with PR_SET_PDEATHSIG=SIGTERM set, so a
    node whose test run was killed (even by SIGKILL) stops too; elsewhere the interpreter itself.

    LocalCluster starts ``<python> -m kafkakit.broker ...``; this script stands in for
    ``<python>``, sets the signal and replaces itself with the real interpreter (the death
    signal survives exec). It gives up at once if its parent already died."""
    if sys.platform != "linux" or " " in sys.executable or len(sys.executable) > 200:
        return sys.executable  # a shebang line cannot hold it
    script = directory / "kafkakit-node-python"
    script.write_text(
        f"#!{sys.executable}\n"
        "import ctypes, os, signal, sys\n"
        "ctypes.CDLL('libc.so.6', use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
        f"if os.getppid() != {os.getpid()}:\n"
        "    sys.exit('kafkakit.testing: the test process is gone')\n"
        "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
    )
    script.chmod(0o755)
    return str(script)


class ClusterProcesses(KafkaCluster):
    """broker_min's :class:`~kafkakit.broker.LocalCluster`, driven from a background event loop.

    ``data_dir`` holds each node's data (``node-<id>/``) and log (``node-<id>.log``).
    """

    mode = "process"

    def __init__(
        self,
        data_dir: Path,
        *,
        nodes: int = 3,
        config: Mapping[str, str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        super().__init__()
        self.data_dir = self._dir = data_dir
        self.nodes = nodes
        self.config = dict(config or {})
        self.startup_timeout = startup_timeout
        self._cluster: LocalCluster | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._paused: set[int] = set()

    # -- the background loop ----------------------------------------------------------------

    def _call(self, make: Coroutine[Any, Any, _T], timeout: float = _CALL_TIMEOUT) -> _T:
        loop = self._loop
        if loop is None or self._cluster is None:
            make.close()
            raise BrokerStartError("the kafka_cluster is not started (or already closed)")
        future = asyncio.run_coroutine_threadsafe(make, loop)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"kafka_cluster: gave up after {timeout:.0f}s") from None

    @property
    def cluster(self) -> LocalCluster:
        """The :class:`~kafkakit.broker.LocalCluster` (its coroutines run on the plugin's loop only)."""
        if self._cluster is None:
            raise BrokerStartError("the kafka_cluster is not started (or already closed)")
        return self._cluster

    def start_cluster(self) -> None:
        """Start every node and return once all are registered and unfenced."""
        from kafkakit.broker import LocalCluster  # imported late: the plugin stays cheap to load

        self._dir.mkdir(parents=True, exist_ok=True)
        python = _die_with_parent_launcher(self._dir)
        self._cluster = LocalCluster(
            self.nodes, self._dir, config=self.config, startup_timeout=self.startup_timeout, python=python
        )
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="kafka_cluster", daemon=True)
        self._thread.start()
        try:
            self._call(self._cluster.start(), self.startup_timeout + _CALL_TIMEOUT)
        except Exception as exc:
            self._stop_loop()
            raise BrokerStartError(f"the kafka_cluster did not start: {exc}") from exc
        self._bootstrap_servers = self._cluster.bootstrap_servers

    def _stop_loop(self) -> None:
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
            if not thread.is_alive():
                loop.close()
        self._loop = self._thread = None
        self._cluster = None

    def close(self) -> None:
        if self._cluster is not None:
            try:
                self._call(self._cluster.close())
            finally:
                self._stop_loop()

    # -- addresses and state ----------------------------------------------------------------

    @property
    def node_ids(self) -> list[int]:
        return list(range(1, self.nodes + 1))

    def address(self, node_id: int) -> str:
        """``host:port`` of one node's broker listener."""
        return self.cluster.address(node_id)

    def log_path(self, node_id: int) -> Path:
        return self._dir / f"node-{node_id}.log"

    def is_running(self, node_id: int) -> bool:
        return self.cluster.is_running(node_id) and node_id not in self._paused

    def is_paused(self, node_id: int) -> bool:
        """Whether the node was paused and not resumed."""
        return node_id in self._paused and self.cluster.is_running(node_id)

    def partition_state(self, topic: str, partition: int = 0, node_id: int | None = None) -> PartitionState | None:
        """Leader, leader epoch, replicas and ISR as node ``node_id`` reports them (by default the
        first running, unpaused node that knows the partition); None if no node answers."""
        asked = [node_id] if node_id is not None else [n for n in self.node_ids if self.is_running(n)]
        for n in asked:
            state = self._call(self.cluster.partition_state(topic, partition, n))
            if state is not None:
                return state
        return None

    def leader(self, topic: str, partition: int = 0) -> int:
        """The partition's leader as a running node's metadata names it (-1: none).

        Right after a :meth:`kill` that is still the dead node until the controller fences it
        (``broker.session.timeout.ms``); after :meth:`stop` the leadership has already moved.
        """
        state = self.partition_state(topic, partition)
        if state is None:
            raise ValueError(f"no running node knows {topic!r} partition {partition}")
        return state.leader

    def live_brokers(self, node_id: int) -> set[int]:
        """The live (registered, unfenced) brokers node ``node_id`` reports."""
        return self._call(self.cluster.live_brokers(node_id))

    # -- faults -------------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        self._call(self.cluster.kill(node_id))
        self._paused.discard(node_id)

    def stop(self, node_id: int, timeout: float = 30.0) -> None:
        self._call(self.cluster.stop(node_id, timeout), timeout + 30)
        self._paused.discard(node_id)  # a paused node is resumed to take the SIGTERM

    def start(self, node_id: int, *, wait: bool = True) -> None:
        self._call(self.cluster.start_node(node_id, wait=wait), self.startup_timeout + _CALL_TIMEOUT)

    def restart(self, node_id: int, *, crash: bool = False, wait: bool = True) -> None:
        if crash:
            self.kill(node_id)
            self.start(node_id, wait=wait)
        else:
            self._paused.discard(node_id)
            self._call(self.cluster.restart(node_id, wait=wait), self.startup_timeout + _CALL_TIMEOUT)

    def pause(self, node_id: int) -> None:
        if not self.cluster.is_running(node_id):
            raise BrokerFaultError(f"kafka_cluster.pause({node_id}): the node is not running (killed? call start())")
        self._call(self.cluster.pause(node_id))
        self._paused.add(node_id)

    def resume(self, node_id: int) -> None:
        self._call(self.cluster.resume(node_id))
        self._paused.discard(node_id)

    def wait_ready(self, timeout: float | None = None) -> None:
        limit = self.startup_timeout if timeout is None else timeout
        self._call(self.cluster.wait_ready(limit), limit + _CALL_TIMEOUT)

    def ensure_running(self) -> None:
        if self._cluster is None:
            return
        down = [n for n in self.node_ids if not self.is_running(n)]
        if not down:
            return
        for node_id in down:
            if self.is_paused(node_id):
                self.resume(node_id)
            elif not self.cluster.is_running(node_id):
                self.start(node_id, wait=False)
        self.wait_ready()
