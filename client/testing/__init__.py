"""kafkakit.testing: pytest fixtures with a real Kafka broker (``pip install "kafkakit[testing]"``).

The plugin (:mod:`kafkakit.testing.plugin`) loads by itself through pytest's
``pytest11`` entry point and gives tests ``kafka_broker``, ``kafka_topic`` and
``kafka_cluster`` (and ``kafka_cluster_topic``). The names below are for type hints::

    from kafkakit.testing import KafkaBroker, KafkaCluster, TopicFactory

    def test_app(kafka_broker: KafkaBroker, kafka_topic: TopicFactory) -> None: ...
    def test_failover(kafka_cluster: KafkaCluster, kafka_cluster_topic: TopicFactory) -> None: ...

They are imported on first use, so loading the plugin stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kafkakit.testing.brokers import BrokerFaultError, BrokerStartError, KafkaBroker
    from kafkakit.testing.cluster import KafkaCluster
    from kafkakit.testing.topics import TopicFactory

__all__ = ["BrokerFaultError", "BrokerStartError", "KafkaBroker", "KafkaCluster", "TopicFactory"]

_HOMES = {
    "BrokerFaultError": "kafkakit.testing.brokers",
    "BrokerStartError": "kafkakit.testing.brokers",
    "KafkaBroker": "kafkakit.testing.brokers",
    "KafkaCluster": "kafkakit.testing.cluster",
    "TopicFactory": "kafkakit.testing.topics",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'kafkakit.testing' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
