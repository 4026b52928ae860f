"""kafkakit: an asyncio Kafka client."""
