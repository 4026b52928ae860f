"""The kafkakit producer: ``from kafkakit.producer import Producer``."""

from kafkakit.producer.partitioner import murmur2, partition_for_key
from kafkakit.producer.producer import Producer, SendBatchFuture, SendBatchResult
from kafkakit.producer.record_future import RecordFuture
from kafkakit.producer.transactions import TransactionHandle, TransactionState, complete_transaction

__all__ = [
    "Producer",
    "RecordFuture",
    "SendBatchFuture",
    "SendBatchResult",
    "TransactionHandle",
    "TransactionState",
    "complete_transaction",
    "murmur2",
    "partition_for_key",
]
