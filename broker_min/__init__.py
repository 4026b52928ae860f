"""kafkakit.broker: a compact Kafka broker on asyncio, one node or a KRaft cluster.

``Broker(data_dir, host="127.0.0.1", port=0, **settings)``; see
:class:`~kafkakit.broker.config.BrokerConfig` for the settings. With
``controller_quorum_voters`` set a node joins a cluster; :class:`LocalCluster` runs
N such nodes as child processes.
"""

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.local_cluster import LocalCluster
from kafkakit.broker.server import Broker

__all__ = ["Broker", "BrokerConfig", "LocalCluster"]
