"""The KIP-932 share consumer: ``from kafkakit.share_consumer import ShareConsumer``.

Modules: :mod:`.consumer` (the public class), :mod:`.membership` (ShareGroupHeartbeat),
:mod:`.fetcher` (ShareFetch with share sessions, ShareAcknowledge) and
:mod:`.acknowledgements` (record type, acknowledge types, acknowledgement batches).
"""

from .acknowledgements import (
    AcknowledgementCommitCallback,
    AcknowledgementResult,
    AcknowledgeType,
    ShareConsumerRecord,
)
from .consumer import ShareConsumer

__all__ = [
    "AcknowledgeType",
    "AcknowledgementCommitCallback",
    "AcknowledgementResult",
    "ShareConsumer",
    "ShareConsumerRecord",
]
