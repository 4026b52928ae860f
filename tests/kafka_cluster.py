"""A 3-node Apache Kafka (KRaft) cluster for resilience tests, optionally behind fault proxies.

``KafkaCluster`` runs N combined broker+controller JVMs (node ids 1..N) from the
jars ``tests/brokers.py`` caches, with replication factor 3 and
``min.insync.replicas=2`` everywhere, and timeouts short enough that failover
happens within seconds.  Each node has three listeners:

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
test injects.  All of that lives in :class:`tests.proxied_cluster.ProxiedCluster`,
shared with :class:`tests.broker_min_cluster.BrokerMinCluster` (the same cluster of
kafkakit's own broker); this module adds the JVMs.

For a test module, ``kafka_cluster = cluster_fixture()`` at module level gives a
module-scoped fixture named ``kafka_cluster`` (skipped only when java or mvn is
missing, as the other Apache Kafka tests are).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.brokers import LOG4J2_CONFIG, BrokerSetupError, ensure_kafka_jars, kafka_uuid, missing_kafka_tools
from tests.proxied_cluster import (
    ClusterNode,
    PartitionState,
    ProxiedCluster,
    raw_request,
    wait_for,
)

__all__ = ["KAFKA_CLUSTER_JVM_OPTS", "KafkaCluster", "PartitionState", "cluster_fixture", "raw_request", "wait_for"]

# Three JVMs share 2 cores with the tests: small heaps, serial GC, C1 only.
KAFKA_CLUSTER_JVM_OPTS = (
    "-Xmx384m", "-Xms128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1",
    "-XX:-UsePerfData", "-Djava.awt.headless=true",
)  # fmt: skip
_CLUSTER_METADATA_TOPIC = "__cluster_metadata"
_DESCRIBE_QUORUM = 55  # not in kafkakit's ApiKey: the client never sends it


class KafkaCluster(ProxiedCluster):
    """N combined broker+controller Apache Kafka nodes (ids 1..N) on loopback.

    ``server_properties`` overrides or adds settings on every node.  ``features``
    are feature levels for ``kafka-storage format`` (e.g. ``{"transaction.version": 1}``).
    """

    kind = "kafka"

    def __init__(
        self,
        data_dir: Path | None = None,
        nodes: int = 3,
        proxied: bool = True,
        server_properties: Mapping[str, str] | None = None,
        *,
        features: Mapping[str, int] | None = None,
        lib_dir: Path | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        super().__init__(data_dir, nodes, proxied, server_properties, startup_timeout=startup_timeout)
        self.features = dict(features or {})
        self.lib_dir = lib_dir

    # ------------------------------------------------------------------ configuration

    def server_properties(self, n: int) -> dict[str, str]:
        """The server.properties of node ``n``."""
        node = self._node(n)
        rf = str(min(3, self.size))
        min_isr = str(min(2, self.size))
        props = self.common_properties(n)
        props.update({
            "log.dirs": str(node.work_dir / "data"),
            "transaction.state.log.num.partitions": "3",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": min_isr,
            "share.coordinator.state.topic.num.partitions": "1",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "background.threads": "2",
        })  # fmt: skip
        props.update(self.extra_properties)
        return props

    def _prepare(self) -> None:
        if self.lib_dir is None:
            self.lib_dir = ensure_kafka_jars()

    def _new_cluster_id(self) -> str:
        return kafka_uuid()

    def _java_command(self, node: ClusterNode, main_class: str, *args: str) -> list[str]:
        assert self.lib_dir is not None
        return [
            "java", *KAFKA_CLUSTER_JVM_OPTS,
            f"-Dlog4j2.configurationFile={node.work_dir / 'log4j2.properties'}",
            "-cp", f"{self.lib_dir}/*", main_class, *args,
        ]  # fmt: skip

    def _write_config(self, node: ClusterNode) -> None:
        node.work_dir.mkdir(parents=True, exist_ok=True)
        body = "".join(f"{k}={v}\n" for k, v in self.server_properties(node.node_id).items())
        node.config_path.write_text(body)
        (node.work_dir / "log4j2.properties").write_text(LOG4J2_CONFIG)

    def _format(self, node: ClusterNode) -> None:
        command = self._java_command(
            node, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(node.config_path),
            *(arg for name, level in self.features.items() for arg in ("--feature", f"{name}={level}")),
        )  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise BrokerSetupError(
                f"kafka-storage format of node {node.node_id} failed (exit {result.returncode}):\n"
                f"{result.stdout}\n{result.stderr}"
            )

    def _command(self, node: ClusterNode) -> list[str]:
        return self._java_command(node, "kafka.Kafka", str(node.config_path))

    # ------------------------------------------------------------------ queries

    def active_controller(self, timeout: float = 30.0) -> int:
        """The KRaft quorum leader (DescribeQuorum, which brokers forward to the controller)."""

        def leader(node: ClusterNode) -> int | None:
            quorum = {"topic_name": _CLUSTER_METADATA_TOPIC, "partitions": [{"partition_index": 0}]}
            response = raw_request(node.port, _DESCRIBE_QUORUM, 1, topics=[quorum])
            if int(response.error_code):
                return None
            for t in response.topics:
                for p in t.partitions:
                    if not int(p.error_code) and int(p.leader_id) >= 0:
                        return int(p.leader_id)
            return None

        return wait_for(lambda: self._ask(leader), timeout=timeout, what="the active controller")


def cluster_fixture(
    *,
    scope: Literal["session", "package", "module", "class", "function"] = "module",
    nodes: int = 3,
    proxied: bool = True,
    server_properties: Mapping[str, str] | None = None,
) -> Any:
    """A pytest fixture running one :class:`KafkaCluster` per ``scope`` (default: per module).

    Bind it at module level under the name tests ask for::

        kafka_cluster = cluster_fixture()

    Skipped only when java or mvn is missing; a failed start is an error.  The
    cluster is killed at tear-down whether or not the tests passed.
    """

    @pytest.fixture(scope=scope)
    def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
        reason = missing_kafka_tools()
        if reason is not None:
            pytest.skip(reason)
        cluster = KafkaCluster(tmp_path_factory.mktemp("kafka-cluster"), nodes, proxied, server_properties)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.close()

    return kafka_cluster
