"""What the multi-node test clusters share: nodes as child processes behind fault proxies, and
the harness's raw-protocol queries.

:class:`ProxiedCluster` runs N combined broker+controller nodes (ids 1..N) on loopback,
each with three listeners:

- ``PLAINTEXT``: the client listener.  With ``proxied=True`` (the default) a
  :class:`~tests.fault_proxy.FaultProxy` sits in front of it and the node
  advertises the proxy's port, so every client connection, bootstrap or learnt
  from Metadata, goes through that node's proxy (``cluster.proxy(n)``).
- ``INTERNAL``: replication between brokers, never proxied, so client-side
  faults do not disturb the cluster itself.
- ``CONTROLLER``: the KRaft quorum (fixed ports: they are in ``controller.quorum.voters``).

Per node: ``kill(n)`` (SIGKILL), ``stop(n)`` (SIGTERM, controlled shutdown),
``start(n)``, ``restart(n, new_port=...)``, ``pause(n)``/``resume(n)``
(SIGSTOP/SIGCONT), ``is_running(n)``.  The harness's own queries
(``leader_of``, ``wait_isr``, ``active_controller``, ``coordinator_of``,
``wait_healthy``...) go straight to the brokers' client listeners over the raw
protocol, never through the proxies, so they keep working whatever faults a
test injects.

Subclasses say how a node is configured and launched: :class:`tests.kafka_cluster.KafkaCluster`
(Apache Kafka JVMs) and :class:`tests.broker_min_cluster.BrokerMinCluster` (kafkakit's broker).
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, Self, TypeVar

from kafkakit.protocol import ApiKey, decode_response, encode_request
from kafkakit.protocol.build import make_request

from tests.brokers import BrokerSetupError, free_port, recv_exactly
from tests.fault_proxy import FaultProxy

_T = TypeVar("_T")

_HARNESS_CLIENT_ID = "kafka-cluster-harness"
_COORDINATOR_NOT_YET = (14, 15)  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
_KEY_TYPES = {"group": 0, "transaction": 1}


@dataclass(frozen=True)
class PartitionState:
    """One partition as a broker's Metadata describes it."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader_epoch: int
    error_code: int


@dataclass
class ClusterNode:
    node_id: int
    work_dir: Path
    port: int  # the broker's own client (PLAINTEXT) listener
    internal_port: int
    controller_port: int
    proxy: FaultProxy | None = None
    proc: subprocess.Popen[bytes] | None = None
    paused: bool = False
    starts: int = 0

    @property
    def advertised_port(self) -> int:
        return self.proxy.port if self.proxy is not None else self.port

    @property
    def log_path(self) -> Path:
        return self.work_dir / "server.log"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"


def die_with_parent() -> None:
    """preexec_fn: SIGKILL the node when the thread that launched it dies (Linux).

    SIGKILL, not SIGTERM: a paused (SIGSTOPped) process would never act on SIGTERM.
    """
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def free_port_not_in(taken: set[int]) -> int:
    """A free port, distinct from ``taken`` (which it joins)."""
    while True:
        port = free_port()
        if port not in taken:
            taken.add(port)
            return port


def raw_request(port: int, api_key: int, version: int, *, socket_timeout: float = 5.0, **fields: Any) -> Any:
    """Send one request (built from plain values) to ``127.0.0.1:port`` on a fresh connection."""
    request = make_request(api_key, version, **fields)
    with socket.create_connection(("127.0.0.1", port), timeout=socket_timeout) as sock:
        sock.settimeout(socket_timeout)
        sock.sendall(encode_request(1, _HARNESS_CLIENT_ID, request))
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        correlation_id, response = decode_response(api_key, version, recv_exactly(sock, size))
    if correlation_id != 1:
        raise ConnectionError(f"broker answered correlation id {correlation_id}, expected 1")
    return response


def wait_for(check: Callable[[], _T | None], *, timeout: float, what: str) -> _T:
    """Poll ``check()`` until it returns something other than None (or False); return it.

    Connection errors count as "not yet"; on timeout, raise TimeoutError naming
    ``what`` and the last error seen.
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
            if result is not None and result is not False:
                return result
        except (OSError, ConnectionError) as exc:
            last_error = exc
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s (last error: {last_error!r})")
        time.sleep(0.1)


class ProxiedCluster:
    """N combined broker+controller nodes (ids 1..N) on loopback; subclasses launch them.

    ``server_properties`` overrides or adds settings on every node.
    """

    #: What the clusters of this class run: "kafka" or "broker_min".
    kind: ClassVar[str] = ""

    def __init__(
        self,
        data_dir: Path | None = None,
        nodes: int = 3,
        proxied: bool = True,
        server_properties: Mapping[str, str] | None = None,
        *,
        startup_timeout: float = 120.0,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"a cluster needs at least one node, got {nodes}")
        self._owns_data_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="kafkakit-cluster-")) if data_dir is None else data_dir
        self.size = nodes
        self.proxied = proxied
        self.extra_properties = dict(server_properties or {})
        self.startup_timeout = startup_timeout
        self.cluster_id = ""
        self.startup_seconds: float | None = None
        self._nodes: dict[int, ClusterNode] = {}
        # Nodes are launched from this one long-lived thread: PR_SET_PDEATHSIG fires
        # when the *thread* that forked the child ends, so a node started from, say,
        # asyncio.to_thread would die with that executor's thread.
        self._launcher: concurrent.futures.ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ what subclasses provide

    def _prepare(self) -> None:
        """Once before the first start (e.g. fetch jars)."""

    def _new_cluster_id(self) -> str:
        raise NotImplementedError

    def _write_config(self, node: ClusterNode) -> None:
        """Before every launch of ``node``: write what its command reads."""
        node.work_dir.mkdir(parents=True, exist_ok=True)

    def _format(self, node: ClusterNode) -> None:
        """Once per cluster start, after :meth:`_write_config`: initialise the node's storage."""

    def _command(self, node: ClusterNode) -> list[str]:
        raise NotImplementedError

    def _environment(self) -> dict[str, str] | None:
        """The nodes' environment (None: this process's)."""
        return None

    # ------------------------------------------------------------------ addresses

    @property
    def node_ids(self) -> list[int]:
        """1..N."""
        return list(range(1, self.size + 1))

    @property
    def bootstrap_servers(self) -> str:
        """Every node's advertised (proxied, when proxied) address, comma-separated."""
        return ",".join(self.bootstrap_of(n) for n in self.node_ids)

    def bootstrap_of(self, n: int) -> str:
        """The address node ``n`` advertises to clients (its proxy's, when proxied)."""
        return f"127.0.0.1:{self._node(n).advertised_port}"

    def direct_address(self, n: int) -> str:
        """Node ``n``'s own client listener, bypassing any proxy."""
        return f"127.0.0.1:{self._node(n).port}"

    def proxy(self, n: int) -> FaultProxy:
        """The fault proxy in front of node ``n`` (only with ``proxied=True``)."""
        proxy = self._node(n).proxy
        if proxy is None:
            raise RuntimeError("this cluster runs without proxies (proxied=False)")
        return proxy

    def log_path(self, n: int) -> Path:
        """Node ``n``'s combined stdout/stderr/log output (all its runs appended)."""
        return self._node(n).log_path

    def pid(self, n: int) -> int | None:
        """The process id of node ``n`` while it runs."""
        proc = self._node(n).proc
        return None if proc is None or proc.poll() is not None else proc.pid

    def _node(self, n: int) -> ClusterNode:
        try:
            return self._nodes[n]
        except KeyError:
            raise KeyError(f"no node {n}: nodes are {self.node_ids} (is the cluster started?)") from None

    # ------------------------------------------------------------------ configuration

    def common_properties(self, n: int) -> dict[str, str]:
        """The settings every kind of node gets (before ``server_properties`` overrides)."""
        node = self._node(n)
        voters = ",".join(f"{m.node_id}@127.0.0.1:{m.controller_port}" for m in self._nodes.values())
        rf = str(min(3, self.size))
        min_isr = str(min(2, self.size))
        return {
            "process.roles": "broker,controller",
            "node.id": str(n),
            "controller.quorum.voters": voters,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{node.port},INTERNAL://127.0.0.1:{node.internal_port},"
                f"CONTROLLER://127.0.0.1:{node.controller_port}"
            ),
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{node.advertised_port},INTERNAL://127.0.0.1:{node.internal_port}"
            ),
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "INTERNAL",
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": min_isr,
            "auto.create.topics.enable": "true",
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": rf,
            "offsets.topic.num.partitions": "3",
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min_isr,
            "group.initial.rebalance.delay.ms": "0",
            # Quick failover: a follower that stops fetching leaves the ISR after 10 s
            # (default 30 s); a broker that stops heartbeating is fenced, and loses its
            # leaderships, after 5 s (default 9 s); a quorum without a leader elects one
            # after 2 s without fetches plus up to 1 s of random back-off.
            "replica.lag.time.max.ms": "10000",
            "broker.heartbeat.interval.ms": "1000",
            "broker.session.timeout.ms": "5000",
            "controller.quorum.fetch.timeout.ms": "2000",
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.election.backoff.max.ms": "1000",
            # Leaders stay where failover put them until a test moves them.
            "auto.leader.rebalance.enable": "false",
        }

    def server_properties(self, n: int) -> dict[str, str]:
        """The settings of node ``n``."""
        props = self.common_properties(n)
        props.update(self.extra_properties)
        return props

    # ------------------------------------------------------------------ whole cluster

    def start(self, n: int | None = None, *, timeout: float = 90.0) -> None:
        """Start the cluster, or with ``n``, start node ``n`` again (see :meth:`start_node`).

        The cluster start formats every node, launches them all and waits until each
        lists every node in Metadata.

        Ports are picked just before launch; if one was taken meanwhile, the whole
        cluster is relaunched on new ports (3 attempts).  ``BrokerSetupError`` on failure.
        """
        if n is not None:
            self.start_node(n, timeout)
            return
        if self._nodes:
            raise BrokerSetupError(f"{type(self).__name__} already started")
        self._prepare()
        self._launcher = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"{self.kind}-cluster-launcher")
        atexit.register(self._kill_all)
        started = time.monotonic()
        for attempt in range(1, 4):
            try:
                self._start_all()
                break
            except BrokerSetupError as exc:
                retry = attempt < 3 and "Address already in use" in str(exc)
                self._teardown_nodes()
                if not retry:
                    self.close()
                    raise
            except BaseException:
                self.close()
                raise
        self.startup_seconds = time.monotonic() - started

    def _start_all(self) -> None:
        self.cluster_id = self._new_cluster_id()
        taken: set[int] = set()
        for n in self.node_ids:
            work_dir = self.data_dir / f"node-{n}"
            shutil.rmtree(work_dir, ignore_errors=True)  # left by a failed attempt
            self._nodes[n] = ClusterNode(
                n, work_dir, free_port_not_in(taken), free_port_not_in(taken), free_port_not_in(taken)
            )
        for node in self._nodes.values():
            if self.proxied:
                node.proxy = FaultProxy(node.port, name=f"fault-proxy-{node.node_id}")
                node.proxy.start()
        for node in self._nodes.values():
            self._write_config(node)
        with concurrent.futures.ThreadPoolExecutor(self.size) as pool:
            list(pool.map(self._format, self._nodes.values()))  # list(): re-raise a failure
        for node in self._nodes.values():
            self._launch(node)
        deadline = time.monotonic() + self.startup_timeout
        for node in self._nodes.values():
            self._wait_ready(node, deadline - time.monotonic(), expect=set(self.node_ids))

    def close(self) -> None:
        """Kill every node (SIGKILL: nothing of a test cluster is worth a slow shutdown) and every proxy."""
        self._teardown_nodes()
        if self._launcher is not None:
            self._launcher.shutdown(wait=True)
            self._launcher = None
        atexit.unregister(self._kill_all)
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _teardown_nodes(self) -> None:
        self._kill_all()
        for node in self._nodes.values():
            if node.proxy is not None:
                node.proxy.close()
        self._nodes.clear()

    def _kill_all(self) -> None:
        for node in self._nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                node.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=10)
            node.paused = False

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ one node

    def _launch(self, node: ClusterNode) -> None:
        if self._launcher is None:
            raise BrokerSetupError(f"{type(self).__name__} is not started")
        command = self._command(node)
        with open(node.log_path, "ab") as log:
            log.write(f"=== start #{node.starts + 1} of node {node.node_id}\n".encode())
            log.flush()
            node.proc = self._launcher.submit(
                subprocess.Popen,
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=node.work_dir,
                env=self._environment(),
                preexec_fn=die_with_parent,
            ).result()
        node.starts += 1
        node.paused = False

    def _wait_ready(self, node: ClusterNode, timeout: float, *, expect: set[int]) -> None:
        """Until ``node`` answers and every live node lists those in ``expect`` at their advertised port."""

        def ready() -> bool:
            if node.proc is None or node.proc.poll() is not None:
                raise BrokerSetupError(f"node {node.node_id} exited while starting.\n{self._evidence(node)}")
            return all(
                self._metadata_brokers(other).get(n) == self._node(n).advertised_port
                for other in [node, *(m for m in self._live() if m is not node)]
                for n in expect
            )

        try:
            wait_for(ready, timeout=max(timeout, 1.0), what=f"node {node.node_id} ready")
        except TimeoutError as exc:
            raise BrokerSetupError(f"{exc}\n{self._evidence(node)}") from None

    def _evidence(self, node: ClusterNode, lines: int = 40) -> str:
        try:
            text = node.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(no log at {node.log_path}: {exc})"
        return f"--- last {lines} lines of {node.log_path} ---\n" + "\n".join(text[-lines:])

    def is_running(self, n: int) -> bool:
        """True while node ``n``'s process exists (paused or not)."""
        proc = self._node(n).proc
        return proc is not None and proc.poll() is None

    def is_paused(self, n: int) -> bool:
        """True between ``pause(n)`` and ``resume(n)``."""
        return self.is_running(n) and self._node(n).paused

    def live_nodes(self) -> list[int]:
        """Ids of the nodes running and not paused."""
        return [m.node_id for m in self._live()]

    def _live(self) -> list[ClusterNode]:
        return [m for m in self._nodes.values() if self.is_running(m.node_id) and not m.paused]

    def kill(self, n: int) -> None:
        """SIGKILL node ``n`` and reap it: a crash, nothing flushed."""
        node = self._node(n)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.kill()
            node.proc.wait(timeout=30)
        node.paused = False

    def stop(self, n: int, timeout: float = 30.0) -> None:
        """SIGTERM node ``n`` (controlled shutdown) and wait; SIGKILL after ``timeout`` seconds."""
        node = self._node(n)
        if node.proc is None or node.proc.poll() is not None:
            return
        if node.paused:
            self.resume(n)
        node.proc.send_signal(signal.SIGTERM)
        try:
            node.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(timeout=30)

    def start_node(self, n: int, timeout: float = 90.0) -> None:
        """Start node ``n`` again on its data dir; returns once every live node lists it."""
        node = self._node(n)
        if self.is_running(n):
            raise BrokerSetupError(f"node {n} is already running")
        self._write_config(node)
        self._launch(node)
        self._wait_ready(node, timeout, expect={n})

    def restart(self, n: int, *, new_port: bool = False, crash: bool = False, timeout: float = 90.0) -> None:
        """Stop (or, with ``crash=True``, kill) node ``n`` if it runs, then start it again.

        With ``new_port=True`` it comes back listening on a new client port and
        advertising a new one (its proxy moves to a new port too): clients that
        only know the old address must learn the new one from Metadata.
        """
        self.kill(n) if crash else self.stop(n)
        node = self._node(n)
        if new_port:
            taken = {p for m in self._nodes.values() for p in (m.port, m.internal_port, m.controller_port)}
            node.port = free_port_not_in(taken)
            if node.proxy is not None:
                node.proxy.move(upstream_port=node.port)
        self.start_node(n, timeout)

    def pause(self, n: int) -> None:
        """SIGSTOP node ``n``: it keeps its sockets but answers nothing (a hung process)."""
        node = self._node(n)
        if not self.is_running(n):
            raise BrokerSetupError(f"node {n} is not running")
        assert node.proc is not None
        node.proc.send_signal(signal.SIGSTOP)
        node.paused = True

    def resume(self, n: int) -> None:
        """SIGCONT node ``n`` after :meth:`pause`."""
        node = self._node(n)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGCONT)
        node.paused = False

    # ------------------------------------------------------------------ queries (raw protocol, no proxy)

    def _ask(self, fn: Callable[[ClusterNode], _T]) -> _T:
        """``fn(node)`` on the first live node that answers (connection errors try the next)."""
        errors: list[str] = []
        for node in self._live():
            try:
                return fn(node)
            except (OSError, ConnectionError) as exc:
                errors.append(f"node {node.node_id}: {exc!r}")
        raise ConnectionError("no live node answered: " + ("; ".join(errors) or "none is running"))

    def _metadata(self, node: ClusterNode, topics: Iterable[str] | None = ()) -> Any:
        wanted = None if topics is None else [{"name": t, "topic_id": None} for t in topics]
        flags = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
        return raw_request(node.port, ApiKey.METADATA, 12, topics=wanted, **flags)

    def _metadata_brokers(self, node: ClusterNode) -> dict[int, int]:
        """{node id: advertised port} of the brokers ``node`` lists (the unfenced ones)."""
        return {int(b.node_id): int(b.port) for b in self._metadata(node).brokers}

    def registered_brokers(self) -> list[int]:
        """Node ids a live node lists in Metadata (registered and unfenced)."""
        return sorted(self._ask(self._metadata_brokers))

    def partition_state(self, topic: str, partition: int, *, node: int | None = None) -> PartitionState:
        """``topic``/``partition`` as a live node (or node ``node``) describes it."""

        def describe(asked: ClusterNode) -> PartitionState:
            response = self._metadata(asked, [topic])
            for t in response.topics:
                for p in t.partitions:
                    if int(p.partition_index) == partition:
                        replicas, isr = tuple(map(int, p.replica_nodes)), tuple(map(int, p.isr_nodes))
                        return PartitionState(
                            int(p.leader_id), replicas, isr, int(p.leader_epoch), int(p.error_code)
                        )
                if int(t.error_code):
                    return PartitionState(-1, (), (), -1, int(t.error_code))
            return PartitionState(-1, (), (), -1, 3)  # UNKNOWN_TOPIC_OR_PARTITION

        return describe(self._node(node)) if node is not None else self._ask(describe)

    def leader_of(self, topic: str, partition: int = 0) -> int:
        """The leader a live node names for the partition now (-1: none); right after a kill it can
        still be the dead node for a moment (:meth:`wait_leader` waits for a live one)."""
        return self.partition_state(topic, partition).leader

    def wait_leader(
        self, topic: str, partition: int = 0, *, exclude: Iterable[int] = (), timeout: float = 30.0
    ) -> int:
        """Wait until every live node names the same live leader, not in ``exclude``; return it."""
        excluded = set(exclude)

        def agreed() -> int | None:
            live = self._live()
            leaders = {self.partition_state(topic, partition, node=m.node_id).leader for m in live}
            if len(leaders) != 1:
                return None
            leader = leaders.pop()
            return leader if leader in {m.node_id for m in live} and leader not in excluded else None

        return wait_for(
            agreed, timeout=timeout, what=f"a live leader of {topic}-{partition} outside {excluded}"
        )

    def wait_isr(
        self, topic: str, partition: int = 0, size: int = 3, timeout: float = 60.0
    ) -> tuple[int, ...]:
        """Wait until every live node reports an ISR of ``size`` replicas; return the ISR."""

        def isr() -> tuple[int, ...] | None:
            seen = {self.partition_state(topic, partition, node=m.node_id).isr for m in self._live()}
            if len(seen) == 1:
                found = seen.pop()
                return found if len(found) == size else None
            return None

        return wait_for(isr, timeout=timeout, what=f"ISR of {topic}-{partition} at {size} replicas")

    def active_controller(self, timeout: float = 30.0) -> int:
        """The KRaft quorum leader."""
        raise NotImplementedError

    def coordinator_of(
        self, key: str, key_type: Literal["group", "transaction"] = "group", timeout: float = 30.0
    ) -> int:
        """The node that coordinates group (or transactional id) ``key`` (FindCoordinator v4).

        Waits while the coordinator is not available (e.g. __consumer_offsets being created).
        """

        def find(node: ClusterNode) -> int | None:
            response = raw_request(
                node.port, ApiKey.FIND_COORDINATOR, 4, key_type=_KEY_TYPES[key_type], coordinator_keys=[key]
            )
            for c in response.coordinators:
                code = int(c.error_code)
                if code == 0:
                    return int(c.node_id)
                if code not in _COORDINATOR_NOT_YET:
                    raise BrokerSetupError(
                        f"FindCoordinator({key!r}) answered error {code}: {c.error_message}"
                    )
            return None

        return wait_for(
            lambda: self._ask(find), timeout=timeout, what=f"the coordinator of {key_type} {key!r}"
        )

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication_factor: int = -1,
        configs: Mapping[str, str] | None = None,
        *,
        assignments: Mapping[int, Sequence[int]] | None = None,
        timeout: float = 60.0,
    ) -> None:
        """Create a topic (CreateTopics, forwarded to the controller) and wait until it is healthy.

        ``assignments`` ({partition: [node ids, preferred leader first]}) replaces
        ``partitions`` and ``replication_factor``, e.g. to put a leader on one node.
        """
        placed = [{"partition_index": p, "broker_ids": list(ids)} for p, ids in (assignments or {}).items()]
        topic = {
            "name": name,
            "num_partitions": -1 if placed else partitions,
            "replication_factor": -1 if placed else replication_factor,
            "assignments": placed,
            "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()],
        }
        fields = {"topics": [topic], "timeout": int(timeout * 1000), "validate_only": False}

        def create(node: ClusterNode) -> Any:
            return raw_request(node.port, ApiKey.CREATE_TOPICS, 7, socket_timeout=timeout, **fields)

        for result in self._ask(create).topics:
            if int(result.error_code):
                raise BrokerSetupError(
                    f"creating {name!r} failed: error {int(result.error_code)} {result.error_message}"
                )
        self.wait_healthy([name], timeout=timeout)

    def wait_healthy(self, topics: Iterable[str] | None = (), timeout: float = 60.0) -> None:
        """Wait until every node runs, every live node lists all of them, and every partition of
        ``topics`` (None: of every topic) has a leader and its full replica set in the ISR, as
        every node reports it."""
        names = None if topics is None else list(topics)

        def healthy() -> bool:
            live = self._live()
            if len(live) != self.size:
                raise BrokerSetupError(f"only nodes {[m.node_id for m in live]} are running")
            for node in live:
                if sorted(self._metadata_brokers(node)) != self.node_ids:
                    return False
                if names == []:
                    continue
                response = self._metadata(node, names)
                for t in response.topics:
                    if int(t.error_code) or not t.partitions:
                        return False
                    for p in t.partitions:
                        if int(p.leader_id) < 0 or set(p.isr_nodes) != set(p.replica_nodes):
                            return False
            return True

        wait_for(healthy, timeout=timeout, what=f"a healthy cluster (topics {names or 'all'})")

    def heal(self, timeout: float = 90.0) -> None:
        """Undo what a test did: clear every proxy's faults, resume paused nodes, start
        stopped ones, and wait until every partition of every topic has its full ISR."""
        for n in self.node_ids:
            node = self._node(n)
            if node.proxy is not None:
                node.proxy.clear()
            if node.paused:
                self.resume(n)
        for n in self.node_ids:
            if not self.is_running(n):
                self.start_node(n, timeout)
        self.wait_healthy(None, timeout=timeout)
