"""kafkakit: an asyncio Kafka client."""

__version__ = "0.1.0"
