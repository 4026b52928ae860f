"""``kafkakit consume``: print a topic's records (like kafka-console-consumer).

Without ``--group`` the topic's partitions (or ``--partition``) are assigned and
read from the end, ``--from-beginning``, ``--offset`` or a timestamp; with
``--group`` the consumer joins the group, starts at its committed offsets
(``--from-beginning`` picks the reset policy) and commits what it printed.
Output: the value per line; ``--property print.key=true`` and the other
DefaultMessageFormatter properties; ``--format`` for a Python format string;
``--output json`` for JSON lines.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import sys
from collections.abc import Callable
from typing import Any

from kafkakit.cli.config import (
    UsageError,
    bool_setting,
    check_known,
    connection_settings,
    open_admin,
    parse_properties,
)

FORMATTER_PROPERTIES = (
    "print.timestamp",
    "print.key",
    "print.offset",
    "print.partition",
    "print.headers",
    "print.value",
    "key.separator",
    "line.separator",
    "headers.separator",
    "null.literal",
)
_FORMAT_FIELDS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``consume``."""
    p = commands.add_parser("consume", parents=[common], help="print records of a topic")
    p.add_argument("--topic", required=True)
    p.add_argument("--group", help="consume as a member of this group (committing offsets)")
    p.add_argument("--partition", type=int, help="read only this partition (without --group)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="start offset: a number, earliest or latest (needs --partition)")
    start.add_argument(
        "--from-timestamp", type=int, metavar="MS", help="start at the first record at/after MS"
    )
    start.add_argument(
        "--from-datetime",
        metavar="ISO",
        help="like --from-timestamp: 2024-05-01T12:00:00Z (no zone: local time)",
    )
    p.add_argument("--max-messages", type=int, metavar="N", help="exit after N records")
    p.add_argument("--timeout-ms", type=int, metavar="MS", help="exit when no record arrives for MS")
    p.add_argument(
        "--property", action="append", metavar="KEY=VALUE", help="output: " + ", ".join(FORMATTER_PROPERTIES)
    )
    p.add_argument(
        "--format", metavar="TEMPLATE", help="Python format string over " + ", ".join(_FORMAT_FIELDS)
    )
    p.add_argument("--output", choices=("text", "json"), default="text", help="text (default) or JSON lines")
    p.add_argument(
        "--isolation-level", choices=("read_uncommitted", "read_committed"), default="read_uncommitted"
    )
    p.set_defaults(func=consume)


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("utf-8", "backslashreplace")


def make_formatter(args: argparse.Namespace) -> Callable[[Any], bytes]:
    """The function turning one record into the bytes printed for it (validated up front)."""
    props = parse_properties(args.property)
    check_known(props, FORMATTER_PROPERTIES)
    if args.output == "json":
        if props or args.format:
            raise UsageError("--output json does not combine with --property or --format")
        return _json_line
    if args.format is not None:
        if props:
            raise UsageError("--format does not combine with --property")
        return _template(args.format)
    flags = {
        name: bool_setting(
            f"--property {name}", props.get(name, "true" if name == "print.value" else "false")
        )
        for name in FORMATTER_PROPERTIES
        if name.startswith("print.")
    }
    sep = props.get("key.separator", "\t").encode()
    line_sep = props.get("line.separator", "\n").encode()
    headers_sep = props.get("headers.separator", ",").encode()
    null = props.get("null.literal", "null").encode()

    def default(record: Any) -> bytes:
        fields: list[bytes] = []
        if flags["print.timestamp"]:
            kind = _TIMESTAMP_TYPES.get(record.timestamp_type)
            fields.append(
                b"NO_TIMESTAMP"
                if kind is None or record.timestamp < 0
                else f"{kind}:{record.timestamp}".encode()
            )
        if flags["print.partition"]:
            fields.append(f"Partition:{record.partition}".encode())
        if flags["print.offset"]:
            fields.append(f"Offset:{record.offset}".encode())
        if flags["print.headers"]:
            headers = record.headers
            fields.append(
                headers_sep.join(k.encode() + b":" + (null if v is None else bytes(v)) for k, v in headers)
                if headers
                else b"NO_HEADERS"
            )
        if flags["print.key"]:
            fields.append(null if record.key is None else bytes(record.key))
        if flags["print.value"]:
            fields.append(null if record.value is None else bytes(record.value))
        return sep.join(fields) + line_sep

    return default


def _template(template: str) -> Callable[[Any], bytes]:
    sample = dict.fromkeys(_FORMAT_FIELDS, "")
    try:
        template.format(**sample)
    except KeyError as exc:
        raise UsageError(f"--format: unknown field {exc}; fields are {', '.join(_FORMAT_FIELDS)}") from None
    except (ValueError, IndexError) as exc:
        raise UsageError(f"--format: {exc}") from None

    def render(record: Any) -> bytes:
        headers = ",".join(f"{k}:{'null' if v is None else _text(v)}" for k, v in record.headers)
        text = template.format(
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            timestamp=record.timestamp,
            key="null" if record.key is None else _text(record.key),
            value="null" if record.value is None else _text(record.value),
            headers=headers,
        )
        return text.encode() + b"\n"

    return render


def _json_line(record: Any) -> bytes:
    return (
        json.dumps(
            {
                "topic": record.topic,
                "partition": record.partition,
                "offset": record.offset,
                "timestamp": record.timestamp,
                "timestamp_type": _TIMESTAMP_TYPES.get(record.timestamp_type),
                "key": _text(record.key),
                "value": _text(record.value),
                "headers": {k: _text(v) for k, v in record.headers},
            },
            ensure_ascii=False,
        ).encode()
        + b"\n"
    )


def parse_datetime(text: str) -> int:
    """Epoch milliseconds of an ISO 8601 date-time (local time when it has no zone)."""
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(f"not an ISO 8601 date-time: {text!r} (e.g. 2024-05-01T12:00:00Z)") from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def _check_flags(args: argparse.Namespace) -> None:
    if args.max_messages is not None and args.max_messages < 1:
        raise UsageError("--max-messages must be positive")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms must not be negative")
    if args.group is not None:
        for flag, value in (("--partition", args.partition), ("--offset", args.offset)):
            if value is not None:
                raise UsageError(f"{flag} cannot be used with --group (the group assigns partitions)")
        if args.from_timestamp is not None or args.from_datetime is not None:
            raise UsageError(
                "--from-timestamp/--from-datetime cannot be used with --group; see groups reset-offsets"
            )
    if args.offset is not None:
        if args.partition is None:
            raise UsageError("--offset needs --partition")
        if args.offset not in ("earliest", "latest"):
            try:
                if int(args.offset) < 0:
                    raise ValueError
            except ValueError:
                raise UsageError(
                    f"--offset: expected a non-negative number, earliest or latest, got {args.offset!r}"
                ) from None


async def consume(args: argparse.Namespace) -> int:
    from kafkakit.consumer import Consumer
    from kafkakit.structs import TopicPartition

    _check_flags(args)
    formatter = make_formatter(args)
    timestamp = parse_datetime(args.from_datetime) if args.from_datetime else args.from_timestamp
    settings = connection_settings(args)
    async with open_admin(args) as admin:  # an unknown topic fails here with its Kafka error
        (description,) = await admin.describe_topics([args.topic])
    partitions = [p.partition for p in description.partitions]
    if args.partition is not None and args.partition not in partitions:
        from kafkakit.errors import UnknownTopicOrPartitionError

        raise UnknownTopicOrPartitionError(f"{args.topic} has no partition {args.partition}")
    consumer = Consumer(
        **settings,
        group_id=args.group,
        auto_offset_reset="earliest" if args.from_beginning else "latest",
        enable_auto_commit=args.group is not None,
        isolation_level=args.isolation_level,
        allow_auto_create_topics=False,
    )
    count = 0
    out = sys.stdout.buffer
    await consumer.start()
    try:
        if args.group is not None:
            consumer.subscribe([args.topic])
        else:
            tps = [TopicPartition(args.topic, p) for p in partitions if args.partition in (None, p)]
            consumer.assign(tps)
            await _position(consumer, tps, args, timestamp)
        loop = asyncio.get_running_loop()
        idle_deadline = None if args.timeout_ms is None else loop.time() + args.timeout_ms / 1000
        while args.max_messages is None or count < args.max_messages:
            wait = 1.0 if idle_deadline is None else max(0.0, idle_deadline - loop.time())
            remaining = None if args.max_messages is None else args.max_messages - count
            batches = await consumer.getmany(timeout_ms=int(wait * 1000), max_records=remaining)
            records = [r for batch in batches.values() for r in batch]
            if not records:
                if idle_deadline is not None and loop.time() >= idle_deadline:
                    break
                continue
            out.write(b"".join(formatter(r) for r in records))
            out.flush()
            count += len(records)
            if idle_deadline is not None:
                idle_deadline = loop.time() + args.timeout_ms / 1000
        if args.group is not None:
            await consumer.commit()
    finally:
        await consumer.stop()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


async def _position(consumer: Any, tps: list[Any], args: argparse.Namespace, timestamp: int | None) -> None:
    """Seek each assigned partition to where this command starts reading."""
    if args.from_beginning or args.offset == "earliest":
        await consumer.seek_to_beginning(*tps)
    elif args.offset is not None and args.offset != "latest":
        for tp in tps:
            consumer.seek(tp, int(args.offset))
    elif timestamp is not None:
        found = await consumer.offsets_for_times(dict.fromkeys(tps, timestamp))
        later = [tp for tp, hit in found.items() if hit is None]
        for tp, hit in found.items():
            if hit is not None:
                consumer.seek(tp, hit.offset)
        if later:
            await consumer.seek_to_end(*later)
    else:
        await consumer.seek_to_end(*tps)
