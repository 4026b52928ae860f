"""Build kio message objects of any version from plain Python values.

kio has one class per message *version*, with nested classes per version too.
Callers describe a request once, as keyword arguments holding ints, strings,
dicts and lists; ``make_request`` turns that into the class for the negotiated
version, dropping fields that version does not have and converting ints into
the timedelta/datetime/ErrorCode values kio's writers expect.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Mapping
from functools import cache
from typing import Any

from kafkakit.protocol.framing import request_class, response_class
from kio.schema.errors import ErrorCode

_UTC = datetime.UTC


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldInfo:
    name: str
    kafka_type: str | None
    entity: type | None  # nested entity class, for struct and array-of-struct fields
    is_tuple: bool
    required: bool


def _unwrap_optional(tp: Any) -> Any:
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) in (typing.Union, __import__("types").UnionType) and len(args) == 1:
        return args[0]
    return tp


@cache
def _fields(cls: type) -> tuple[_FieldInfo, ...]:
    hints = typing.get_type_hints(cls)
    infos = []
    for f in dataclasses.fields(cls):
        tp = _unwrap_optional(hints[f.name])
        is_tuple = typing.get_origin(tp) is tuple
        inner = typing.get_args(tp)[0] if is_tuple else tp
        entity = inner if isinstance(inner, type) and dataclasses.is_dataclass(inner) else None
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        infos.append(_FieldInfo(f.name, f.metadata.get("kafka_type"), entity, is_tuple, required))
    return tuple(infos)


def _convert_scalar(kafka_type: str | None, value: Any) -> Any:
    if value is None or kafka_type is None:
        return value
    if kafka_type.startswith("timedelta") and isinstance(value, int):
        return datetime.timedelta(milliseconds=value)
    if kafka_type == "datetime_i64" and isinstance(value, int):
        return None if value < 0 else datetime.datetime.fromtimestamp(value / 1000, tz=_UTC)
    if kafka_type == "error_code" and not isinstance(value, ErrorCode):
        return ErrorCode(int(value))
    return value


def build_entity(cls: type, data: Mapping[str, Any]) -> Any:
    """Instantiate kio entity ``cls`` from ``data``, recursively; unknown keys are dropped."""
    kwargs: dict[str, Any] = {}
    for info in _fields(cls):
        if info.name not in data:
            if info.required:
                raise TypeError(f"{cls.__module__}.{cls.__name__}: missing field {info.name!r}")
            continue
        value = data[info.name]
        if info.entity is not None and value is not None:
            if info.is_tuple:
                value = tuple(v if isinstance(v, info.entity) else build_entity(info.entity, v) for v in value)
            elif not isinstance(value, info.entity):
                value = build_entity(info.entity, value)
        elif info.is_tuple and value is not None:
            value = tuple(_convert_scalar(info.kafka_type, v) for v in value)
        else:
            value = _convert_scalar(info.kafka_type, value)
        kwargs[info.name] = value
    return cls(**kwargs)


def make_request(api_key: int, version: int, **fields: Any) -> Any:
    """The kio request object for ``api_key`` at ``version`` built from plain values."""
    return build_entity(request_class(api_key, version), fields)


def make_response(api_key: int, version: int, **fields: Any) -> Any:
    """The kio response object for ``api_key`` at ``version`` built from plain values."""
    return build_entity(response_class(api_key, version), fields)


def millis(value: datetime.timedelta | datetime.datetime | int | None) -> int:
    """Milliseconds from a kio timedelta/datetime field (None and -1 stay -1)."""
    if value is None:
        return -1
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return round(value.timestamp() * 1000)
    return int(value)
