"""kafkakit.broker: a compact single-node Kafka broker on asyncio.

``Broker(data_dir, host="127.0.0.1", port=0, **settings)``; see
:class:`~kafkakit.broker.config.BrokerConfig` for the settings.
"""

from kafkakit.broker.config import BrokerConfig
from kafkakit.broker.server import Broker

__all__ = ["Broker", "BrokerConfig"]
