"""The kafkakit consumer: ``from kafkakit.consumer import Consumer``."""

from .consumer import Consumer
from .fetcher import NoOffsetForPartitionError
from .group import GroupMetadata
from .range_reader import FetchedRange
from .subscription import ConsumerRebalanceListener

__all__ = ["Consumer", "ConsumerRebalanceListener", "FetchedRange", "GroupMetadata", "NoOffsetForPartitionError"]
