"""Zigzag varints of record batch v2 (Kafka's ``ByteUtils.writeVarint``/``writeVarlong``).

The encoders keep a tuple of precomputed byte strings for small non-negative
values (lengths and offset deltas are almost always small), so the hot loops
index a tuple instead of calling a function.
"""

from __future__ import annotations

from kafkakit.errors import CorruptRecordError

__all__ = ["SMALL_LIMIT", "SMALL", "encode_zigzag", "zigzag", "read_uvarint", "read_zigzag"]


def encode_zigzag(value: int) -> bytes:
    """The zigzag varint bytes of a signed 64-bit ``value``."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


#: ``SMALL[n]`` is ``encode_zigzag(n)`` for 0 <= n < SMALL_LIMIT.
SMALL_LIMIT = 1 << 15


def _small_table() -> tuple[bytes, ...]:
    # Zigzag of n >= 0 is 2n: one byte below 64, two below 8192, three up to SMALL_LIMIT.
    # Built from byte pairs and triples rather than by encode_zigzag's loop: every
    # process that imports kafkakit builds it (45 ms -> about 10 on a slow VM).
    one = [bytes((2 * n,)) for n in range(64)]
    two = [bytes(((2 * n & 0x7F) | 0x80, 2 * n >> 7)) for n in range(64, 8192)]
    three = [bytes(((2 * n & 0x7F) | 0x80, (2 * n >> 7 & 0x7F) | 0x80, 2 * n >> 14)) for n in range(8192, SMALL_LIMIT)]
    return (*one, *two, *three)


SMALL: tuple[bytes, ...] = _small_table()


def zigzag(value: int) -> bytes:
    """``encode_zigzag`` with the table fast path for small non-negative values."""
    if 0 <= value < SMALL_LIMIT:
        return SMALL[value]
    return encode_zigzag(value)


def read_uvarint(data: bytes, pos: int) -> tuple[int, int]:
    """Read an unsigned varint (still zigzag-encoded) at ``pos``; return (raw value, next pos)."""
    result = 0
    shift = 0
    while True:
        try:
            b = data[pos]
        except IndexError:
            raise CorruptRecordError("varint runs past the end of the records") from None
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint longer than 10 bytes")


def read_zigzag(data: bytes, pos: int) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; return (signed value, next pos)."""
    raw, pos = read_uvarint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos
