"""Idempotent producing: the producer id/epoch, InitProducerId, and batch stamping.

An idempotent producer gets a producer id and epoch from InitProducerId and
numbers the records of every partition from 0.  The broker keeps the last five
batches of each (producer id, partition) and acknowledges a resent batch
without appending it again, so retries cannot duplicate records; a gap in the
numbers is rejected (OUT_OF_ORDER_SEQUENCE_NUMBER), so retries cannot reorder
them.  Sequences are assigned when a batch is first drained and kept across
retries; :mod:`kafkakit.producer.sender` does the per-partition bookkeeping.

When the broker lost our state (UNKNOWN_PRODUCER_ID, or a gap at the oldest
unacknowledged batch) the producer bumps its epoch as KIP-360 describes:
InitProducerId v3+ with the current id and epoch, then every partition starts
again at sequence 0.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from crc32c import crc32c
from kafkakit.errors import KafkaError, KafkaTimeoutError, ProducerFencedError, for_code
from kafkakit.protocol.framing import ApiKey

if TYPE_CHECKING:
    from kafkakit.net.connection import BrokerConnection

log = logging.getLogger(__name__)

#: Byte offsets inside a record batch v2 header (see the records codec).
_ATTRIBUTES_AT = 21
_PRODUCER_AT = 43
_CRC_AT = 17
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_CRC = struct.Struct(">I")
_TRANSACTIONAL_BIT = 0x10
#: Sequence numbers are int32 and wrap to 0 (as in the Java client).
SEQUENCE_LIMIT = 1 << 31
#: InitProducerId from this version accepts the current id/epoch (KIP-360 epoch bump).
_BUMP_VERSION = 3
#: Errors a fenced producer gets: a newer instance (or epoch) owns the producer id.
FENCING_CODES = frozenset({47, 90})  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED


def stamp_batch(data: bytes, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> bytes:
    """``data`` (one encoded record batch) with its producer fields set and the CRC recomputed."""
    out = bytearray(data)
    (attributes,) = _ATTRIBUTES.unpack_from(out, _ATTRIBUTES_AT)
    attributes = attributes | _TRANSACTIONAL_BIT if transactional else attributes & ~_TRANSACTIONAL_BIT
    _ATTRIBUTES.pack_into(out, _ATTRIBUTES_AT, attributes)
    _PRODUCER_FIELDS.pack_into(out, _PRODUCER_AT, producer_id, epoch, base_sequence)
    _CRC.pack_into(out, _CRC_AT, crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def next_sequence(sequence: int, count: int) -> int:
    """The sequence after ``count`` records starting at ``sequence`` (wrapping like Kafka)."""
    return (sequence + count) % SEQUENCE_LIMIT


def fenced_error(code: int, what: str) -> ProducerFencedError:
    """The fatal error for a fencing code (INVALID_PRODUCER_EPOCH or PRODUCER_FENCED)."""
    return ProducerFencedError(
        f"{what}: {for_code(code).__name__}: another producer with a newer epoch owns this producer id"
    )


class ProducerIdentity:
    """The producer id and epoch every batch carries, plus the producer's fatal error, if any.

    Shared by the sender (which stamps batches and asks for epoch bumps) and the
    transaction manager (which obtains the id through the transaction coordinator).
    """

    def __init__(self, *, transactional_id: str | None, transaction_timeout_ms: int) -> None:
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.producer_id = -1
        self.epoch = -1
        self.fatal: KafkaError | None = None
        #: Called once the producer enters a fatal state (the producer stops skipping its send checks).
        self.on_fatal: Callable[[], None] | None = None

    @property
    def has_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def transactional(self) -> bool:
        return self.transactional_id is not None

    def check_fatal(self) -> None:
        if self.fatal is not None:
            raise self.fatal

    def set_fatal(self, error: KafkaError) -> None:
        if self.fatal is None:
            log.error("producer entered a fatal state: %s", error)
            self.fatal = error
            if self.on_fatal is not None:
                self.on_fatal()

    async def init_producer_id(
        self, conn: BrokerConnection, *, bump: bool, timeout: float, backoff: float
    ) -> None:
        """Get a producer id (or, with ``bump``, a new epoch for the current one) over ``conn``.

        Retries retriable errors until ``timeout`` seconds pass; fencing errors are fatal.
        """
        version = conn.version(ApiKey.INIT_PRODUCER_ID)
        current_id, current_epoch = -1, -1
        if bump and self.has_id:
            if version >= _BUMP_VERSION:
                current_id, current_epoch = self.producer_id, self.epoch
            elif self.transactional:
                error = KafkaError(
                    "the broker does not support InitProducerId v3+ (KIP-360), so a transactional "
                    "producer cannot recover its sequence numbers; create a new producer"
                )
                self.set_fatal(error)
                raise error
            # An idempotent-only producer without KIP-360 simply takes a new producer id.
        deadline = time.monotonic() + timeout
        while True:
            response = await conn.call(
                ApiKey.INIT_PRODUCER_ID,
                transactional_id=self.transactional_id,
                transaction_timeout=self.transaction_timeout_ms,
                producer_id=current_id,
                producer_epoch=current_epoch,
            )
            code = int(response.error_code)
            if code == 0:
                self.producer_id = int(response.producer_id)
                self.epoch = int(response.producer_epoch)
                log.info("producer id %s epoch %s", self.producer_id, self.epoch)
                return
            if code in FENCING_CODES:
                error = fenced_error(code, "InitProducerId")
                self.set_fatal(error)
                raise error
            error_class = for_code(code)
            if not error_class.retriable and code != 51:  # CONCURRENT_TRANSACTIONS: retry
                raise error_class(f"InitProducerId for {self.transactional_id or 'an idempotent producer'}")
            if time.monotonic() >= deadline:
                raise KafkaTimeoutError(f"InitProducerId kept failing: {error_class.__name__}")
            await asyncio.sleep(backoff)
