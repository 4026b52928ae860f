"""Errors raised by the partition log, each carrying the Kafka error code a handler should answer with."""

from __future__ import annotations

# Kafka error codes the log produces (values from Apache Kafka's Errors enum).
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
KAFKA_STORAGE_ERROR = 56
INVALID_RECORD = 87


class LogError(Exception):
    """Base class of every error raised by :mod:`kafkakit.broker.log`."""

    code: int = -1  # UNKNOWN_SERVER_ERROR unless a subclass says otherwise


class InvalidBatchError(LogError):
    """An appended record set is malformed; nothing of it was written.

    ``code`` is CORRUPT_MESSAGE (2), MESSAGE_TOO_LARGE (10) or INVALID_RECORD (87).
    """

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class OffsetOutOfRange(LogError):
    """A read asked for an offset outside ``[log_start_offset, log_end_offset]``."""

    code = OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(f"offset {offset} is outside the log range [{log_start_offset}, {log_end_offset}]")
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class InvalidPartitionDirectoryError(LogError, ValueError):
    """A partition directory name is not ``<topic>-<partition>`` with a legal topic name."""

    code = INVALID_TOPIC_EXCEPTION


class LogStorageError(LogError, OSError):
    """Writing to the log's files failed (disk full, I/O error); the failed append was rolled back."""

    code = KAFKA_STORAGE_ERROR
