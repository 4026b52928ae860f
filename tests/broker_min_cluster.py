"""A 3-node broker_min (kafkakit's broker, KRaft cluster mode) for resilience tests, behind fault proxies.

``BrokerMinCluster`` is :class:`tests.kafka_cluster.KafkaCluster` with kafkakit's own
broker in place of the JVMs: N combined broker+controller nodes (ids 1..N), each a
``python -m kafkakit.broker`` child process with the same three listeners
(``PLAINTEXT`` behind a :class:`~tests.fault_proxy.FaultProxy` and advertised as the
proxy's port, ``INTERNAL`` for replication, ``CONTROLLER`` for the quorum), the same
settings (replication factor 3, ``min.insync.replicas=2``, internal topics RF 3, a
5 s broker session) and the same public interface and semantics, all inherited from
:class:`tests.proxied_cluster.ProxiedCluster`, so every scenario can take either.

What differs is underneath: no storage format step (every node gets ``cluster.id``
instead), settings passed as ``--config`` arguments, each node's log is its stderr
(``log_path(n)``), and :meth:`BrokerMinCluster.active_controller` reads Metadata's
controller id (broker_min names the quorum leader there; it does not serve
DescribeQuorum, which Kafka's harness uses).

For a test module, ``broker_min_cluster = broker_min_cluster_fixture()`` at module
level gives a module-scoped fixture named ``broker_min_cluster`` (never skipped).
"""

from __future__ import annotations

import base64
import os
import sys
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest

from tests.proxied_cluster import ClusterNode, ProxiedCluster, wait_for


class BrokerMinCluster(ProxiedCluster):
    """N combined broker+controller broker_min nodes (ids 1..N) on loopback.

    ``server_properties`` overrides or adds settings on every node (broker_min's names,
    which are Kafka's; an unknown one stops the node at start-up, the log says which).
    """

    kind = "broker_min"

    def __init__(
        self,
        data_dir: Path | None = None,
        nodes: int = 3,
        proxied: bool = True,
        server_properties: Mapping[str, str] | None = None,
        *,
        startup_timeout: float = 60.0,
        log_level: str = "INFO",
    ) -> None:
        super().__init__(data_dir, nodes, proxied, server_properties, startup_timeout=startup_timeout)
        self.log_level = log_level

    def server_properties(self, n: int) -> dict[str, str]:
        """The settings node ``n`` gets as ``--config key=value``."""
        props = self.common_properties(n)
        props["cluster.id"] = self.cluster_id
        props.update(self.extra_properties)
        return props

    def _new_cluster_id(self) -> str:
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def _command(self, node: ClusterNode) -> list[str]:
        data = node.work_dir / "data"
        command = [sys.executable, "-m", "kafkakit.broker", "--data-dir", str(data)]
        command += ["--port", str(node.port), "--log-level", self.log_level]
        for key, value in self.server_properties(node.node_id).items():
            command += ["--config", f"{key}={value}"]
        return command

    def _write_config(self, node: ClusterNode) -> None:
        # Nothing reads it: a record of what the node was started with, for whoever reads its log.
        (node.work_dir / "data").mkdir(parents=True, exist_ok=True)
        body = "".join(f"{k}={v}\n" for k, v in self.server_properties(node.node_id).items())
        node.config_path.write_text(body)

    def _environment(self) -> dict[str, str]:
        return {**os.environ, "PYTHONUNBUFFERED": "1"}  # its log is evidence when it crashes

    def active_controller(self, timeout: float = 30.0) -> int:
        """The KRaft quorum leader, as every live node names it in Metadata (controller id).

        A broker_min node names itself when it knows no live leader, so the answer
        counts only once every live node names the same live node.
        """

        def agreed() -> int | None:
            live = self._live()
            named = {int(self._metadata(m).controller_id) for m in live}
            if len(named) != 1:
                return None
            controller = named.pop()
            return controller if controller in {m.node_id for m in live} else None

        return wait_for(agreed, timeout=timeout, what="the active controller")


def broker_min_cluster_fixture(
    *,
    scope: Literal["session", "package", "module", "class", "function"] = "module",
    nodes: int = 3,
    proxied: bool = True,
    server_properties: Mapping[str, str] | None = None,
) -> Any:
    """A pytest fixture running one :class:`BrokerMinCluster` per ``scope`` (default: per module).

    Bind it at module level under the name tests ask for::

        broker_min_cluster = broker_min_cluster_fixture()

    Never skipped; a failed start is an error.  The cluster is killed at tear-down
    whether or not the tests passed.
    """

    @pytest.fixture(scope=scope)
    def broker_min_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerMinCluster]:
        cluster = BrokerMinCluster(tmp_path_factory.mktemp("broker-min-cluster"), nodes, proxied, server_properties)
        cluster.start()
        try:
            yield cluster
        finally:
            cluster.close()

    return broker_min_cluster
