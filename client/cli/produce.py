"""``kafkakit produce``: records from stdin or a file, one per line (like kafka-console-producer).

Line format (Kafka's LineMessageReader properties, given with ``--property``):

- ``parse.key=true``: ``key<key.separator>value`` (separator default TAB);
- ``parse.headers=true``: ``h1:v1,h2:v2<headers.delimiter>...`` before the key
  (``headers.delimiter`` TAB, ``headers.separator`` ``,``, ``headers.key.separator`` ``:``);
- ``null.marker=X``: a key, value or header value equal to X is sent as null;
- ``ignore.error=true``: a line missing its separator is sent with the whole line as value.

``--json`` reads ``{"key": .., "value": .., "headers": {..}, "partition": .., "timestamp": ..}`` lines instead.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from kafkakit.cli.config import (
    UsageError,
    bool_setting,
    check_known,
    connection_settings,
    ensure_topic_for_producing,
    int_setting,
    parse_properties,
)
from kafkakit.cli.output import error, terminal

READER_PROPERTIES = (
    "parse.key",
    "key.separator",
    "parse.headers",
    "headers.delimiter",
    "headers.separator",
    "headers.key.separator",
    "null.marker",
    "ignore.error",
)
# --producer-property name -> (Producer keyword, converter)
_PRODUCER_PROPERTIES = {
    "linger.ms": "linger_ms",
    "batch.size": "max_batch_size",
    "max.request.size": "max_request_size",
    "delivery.timeout.ms": "delivery_timeout_ms",
    "request.timeout.ms": "request_timeout_ms",
    "enable.idempotence": "enable_idempotence",
    "buffer.memory": "buffer_memory",
    "max.block.ms": "max_block_ms",
}
_ACKS = {"all": "all", "-1": "all", "0": 0, "1": 1}


def register(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add ``produce``."""
    p = commands.add_parser("produce", parents=[common], help="send lines of stdin (or a file) as records")
    p.add_argument("--topic", required=True)
    p.add_argument("--file", help="read records from FILE instead of stdin")
    p.add_argument(
        "--property",
        action="append",
        metavar="KEY=VALUE",
        help="line parsing: " + ", ".join(READER_PROPERTIES),
    )
    p.add_argument(
        "--json",
        action="store_true",
        help='JSON lines: {"key", "value", "headers", "partition", "timestamp"}',
    )
    p.add_argument("--partition", type=int, help="send every record to this partition")
    p.add_argument("--rate", type=float, metavar="N", help="send at most N records per second")
    p.add_argument("--acks", "--request-required-acks", dest="acks", choices=sorted(_ACKS), default="all")
    p.add_argument(
        "--compression-type",
        "--compression-codec",
        dest="compression_type",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        default="none",
    )
    p.add_argument(
        "--producer-property",
        action="append",
        metavar="KEY=VALUE",
        help="producer setting: " + ", ".join(_PRODUCER_PROPERTIES),
    )
    p.set_defaults(func=produce)


@dataclass(frozen=True, slots=True)
class LineReader:
    """Kafka's LineMessageReader: how a line splits into headers, key and value."""

    parse_key: bool = False
    key_separator: bytes = b"\t"
    parse_headers: bool = False
    headers_delimiter: bytes = b"\t"
    headers_separator: bytes = b","
    headers_key_separator: bytes = b":"
    null_marker: bytes | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LineReader:
        """Build from ``--property`` values; a bad one is a usage error naming it."""
        check_known(props, READER_PROPERTIES)

        def text(name: str, default: bytes) -> bytes:
            value = props.get(name)
            if value is None:
                return default
            if not value:
                raise UsageError(f"--property {name}: must not be empty")
            return value.encode()

        marker = props.get("null.marker")
        return cls(
            parse_key=bool_setting("--property parse.key", props.get("parse.key", "false")),
            key_separator=text("key.separator", b"\t"),
            parse_headers=bool_setting("--property parse.headers", props.get("parse.headers", "false")),
            headers_delimiter=text("headers.delimiter", b"\t"),
            headers_separator=text("headers.separator", b","),
            headers_key_separator=text("headers.key.separator", b":"),
            null_marker=None if marker is None else marker.encode(),
            ignore_error=bool_setting("--property ignore.error", props.get("ignore.error", "false")),
        )

    def _null(self, value: bytes) -> bytes | None:
        return None if self.null_marker is not None and value == self.null_marker else value

    def parse(
        self, line: bytes, number: int
    ) -> tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]:
        """``(key, value, headers)`` of one line (its terminator already removed)."""
        headers: list[tuple[str, bytes | None]] = []
        rest = line
        if self.parse_headers:
            head, sep, after = rest.partition(self.headers_delimiter)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"line {number}: no headers delimiter {self.headers_delimiter!r} found")
            else:
                rest = after
                if head != self.null_marker:
                    for pair in head.split(self.headers_separator):
                        if not pair:
                            continue
                        name, ksep, value = pair.partition(self.headers_key_separator)
                        headers.append((name.decode(), self._null(value) if ksep else None))
        key: bytes | None = None
        if self.parse_key:
            raw_key, sep, after = rest.partition(self.key_separator)
            if not sep:
                if not self.ignore_error:
                    raise UsageError(f"line {number}: no key separator {self.key_separator!r} found")
            else:
                key, rest = self._null(raw_key), after
        return key, self._null(rest), headers


def _json_record(line: bytes, number: int) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise UsageError(f"line {number}: not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UsageError(f"line {number}: expected a JSON object")
    unknown = set(data) - {"key", "value", "headers", "partition", "timestamp"}
    if unknown:
        raise UsageError(f"line {number}: unknown field(s) {', '.join(sorted(unknown))}")

    def encode(value: Any, what: str) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, str):
            return value.encode()
        return json.dumps(value, separators=(",", ":")).encode()  # a JSON value is sent as its text

    raw_headers = data.get("headers") or {}
    items = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
    try:
        headers = [(str(k), encode(v, "header")) for k, v in items]
    except (TypeError, ValueError):
        raise UsageError(
            f"line {number}: headers must be an object or a list of [name, value] pairs"
        ) from None
    partition = data.get("partition")
    timestamp = data.get("timestamp")
    for name, value in (("partition", partition), ("timestamp", timestamp)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"line {number}: {name} must be an integer")
    return {
        "key": encode(data.get("key"), "key"),
        "value": encode(data.get("value"), "value"),
        "headers": headers,
        "partition": partition,
        "timestamp_ms": timestamp,
    }


async def read_lines(stream: BinaryIO) -> AsyncIterator[bytes]:
    """Lines of ``stream`` without their terminators, read in a thread so sending goes on meanwhile."""
    loop = asyncio.get_running_loop()
    read = getattr(stream, "read1", stream.read)
    pending = b""
    while True:
        chunk = await loop.run_in_executor(None, read, 1 << 16)
        if not chunk:
            break
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


def _producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    props = parse_properties(args.producer_property, "--producer-property")
    check_known(props, tuple(_PRODUCER_PROPERTIES), "--producer-property")
    settings: dict[str, Any] = {}
    for key, value in props.items():
        name = _PRODUCER_PROPERTIES[key]
        settings[name] = bool_setting(key, value) if name == "enable_idempotence" else int_setting(key, value)
    settings["acks"] = _ACKS[args.acks]
    settings["compression_type"] = None if args.compression_type == "none" else args.compression_type
    return settings


async def produce(args: argparse.Namespace) -> int:
    from kafkakit.producer import Producer

    if args.rate is not None and args.rate <= 0:
        raise UsageError("--rate must be positive")
    reader = None if args.json else LineReader.from_properties(parse_properties(args.property))
    if args.json and args.property:
        raise UsageError("--property does not apply to --json input")
    settings = {**connection_settings(args), **_producer_settings(args)}
    try:
        stream: BinaryIO = open(args.file, "rb") if args.file else sys.stdin.buffer  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"--file: cannot read {args.file}: {exc.strerror}") from None
    failures: list[BaseException] = []
    sent = attempted = 0

    def delivered(future: Any) -> None:
        exc = None if future.cancelled() else future.exception()
        if exc is not None:
            if not failures:
                error(f"delivery failed: {exc}")
            failures.append(exc)

    progress = _Progress() if terminal(sys.stderr) else None
    try:
        async with Producer(**settings) as producer:
            await ensure_topic_for_producing(args, producer)
            started = time.monotonic()
            number = 0
            async for line in read_lines(stream):
                number += 1
                if args.json:
                    if not line.strip():
                        continue
                    record = _json_record(line, number)
                else:
                    assert reader is not None
                    key, value, headers = reader.parse(line, number)
                    record = {
                        "key": key,
                        "value": value,
                        "headers": headers,
                        "partition": None,
                        "timestamp_ms": None,
                    }
                if args.partition is not None and record["partition"] is None:
                    record["partition"] = args.partition
                if args.rate is not None:
                    delay = started + sent / args.rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                attempted += 1
                try:
                    future = await producer.send(args.topic, **record)
                except Exception as exc:  # e.g. RecordTooLargeError: counted as a failed delivery
                    delivered(_Failed(exc))
                    continue
                future.add_done_callback(delivered)
                sent += 1
                if progress is not None:
                    progress.advance(sent)
            await producer.flush()
    finally:
        if progress is not None:
            progress.stop()
        if stream is not sys.stdin.buffer:
            stream.close()
    if failures:
        error(f"{len(failures)} of {attempted} record(s) failed")
        return 1
    return 0


class _Failed:
    """A future-like for a record whose send() itself raised."""

    def __init__(self, exc: BaseException) -> None:
        self._exc = exc

    def cancelled(self) -> bool:
        return False

    def exception(self) -> BaseException:
        return self._exc


class _Progress:
    """A records-sent counter on a terminal's stderr (rich), refreshed a few times a second."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.completed} records sent"),
            TimeElapsedColumn(),
            console=Console(file=sys.stderr),
            transient=True,
        )
        self._task = self._progress.add_task("produce", total=None)
        self._progress.start()

    def advance(self, sent: int) -> None:
        self._progress.update(self._task, completed=sent)

    def stop(self) -> None:
        self._progress.stop()
