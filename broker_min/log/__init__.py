"""The broker's on-disk log, laid out as Apache Kafka lays it out.

``<data_dir>/<topic>-<N>/`` holds segments named by base offset
(``00000000000000000000.log`` with ``.index`` and ``.timeindex``) containing
record batches in the wire format exactly as produced, so Fetch is served
straight from the files with ``sendfile``.  See :mod:`.partition` for the
append/read/recovery rules, :mod:`.segment` for the file formats and
:mod:`.cleaner` / :mod:`.cleaner_task` for log compaction.
"""

from .batch import BatchHeader, read_batch_header
from .config import LogConfig
from .errors import (
    InvalidBatchError,
    InvalidPartitionDirectoryError,
    LogError,
    LogStorageError,
    OffsetOutOfRange,
)
from .layout import is_valid_topic_name, parse_partition_dir
from .manager import LogManager
from .partition import AppendedBatch, AppendResult, PartitionLog
from .records import check_record_set_keys
from .segment import FileSlice, LogSegment, raise_descriptor_limit

__all__ = [
    "AppendResult",
    "AppendedBatch",
    "BatchHeader",
    "FileSlice",
    "InvalidBatchError",
    "InvalidPartitionDirectoryError",
    "LogConfig",
    "LogError",
    "LogManager",
    "LogSegment",
    "LogStorageError",
    "OffsetOutOfRange",
    "PartitionLog",
    "check_record_set_keys",
    "is_valid_topic_name",
    "parse_partition_dir",
    "raise_descriptor_limit",
    "read_batch_header",
]
