"""Record batch v2 codec (magic 2): encode, decode, CRC, compression, control records.

This is the hot path shared by the producer (encoding), the consumer
(decoding) and the broker (header parsing, CRC checks, offset rewrites). It is
hand-written for speed instead of using ``kio.records``, which builds a
datetime object per record and supports no compression.
"""

from .columns import RecordColumns, decode_record_columns
from .compression import XERIAL_MAGIC, Compression, compress, decompress
from .decoder import (
    RawRecord,
    decode_batch,
    decode_batch_list,
    decode_batches,
    decode_batches_in_ranges,
    decode_raw_records,
    read_control_type,
)
from .encoder import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    BatchBuilder,
    QueuedRecords,
    RecordTuple,
    build_control_batch,
    encode_batch,
    encode_headers,
    encode_queued_batches,
    encode_values,
)
from .header import (
    HEADER_SIZE,
    MAGIC,
    BatchHeader,
    iter_batch_headers,
    read_batch_header,
    set_base_offset,
    set_log_append_time,
    verify_crc,
    write_crc,
)
from .visibility import visible_batches

__all__ = [
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "HEADER_SIZE",
    "MAGIC",
    "XERIAL_MAGIC",
    "BatchBuilder",
    "BatchHeader",
    "Compression",
    "QueuedRecords",
    "RawRecord",
    "RecordColumns",
    "RecordTuple",
    "build_control_batch",
    "compress",
    "decode_batch",
    "decode_batch_list",
    "decode_batches",
    "decode_batches_in_ranges",
    "decode_raw_records",
    "decode_record_columns",
    "decompress",
    "encode_batch",
    "encode_headers",
    "encode_queued_batches",
    "encode_values",
    "iter_batch_headers",
    "read_batch_header",
    "read_control_type",
    "set_base_offset",
    "set_log_append_time",
    "verify_crc",
    "visible_batches",
    "write_crc",
]
