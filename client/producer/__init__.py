"""The kafkakit producer: ``from kafkakit.producer import Producer``."""

from kafkakit.producer.accumulator import RecordFuture
from kafkakit.producer.partitioner import murmur2, partition_for_key
from kafkakit.producer.producer import Producer, SendBatchFuture, SendBatchResult

__all__ = ["Producer", "RecordFuture", "SendBatchFuture", "SendBatchResult", "murmur2", "partition_for_key"]
