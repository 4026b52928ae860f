"""The kafkakit consumer: ``from kafkakit.consumer import Consumer``."""

from .consumer import Consumer
from .fetcher import NoOffsetForPartitionError

__all__ = ["Consumer", "NoOffsetForPartitionError"]
