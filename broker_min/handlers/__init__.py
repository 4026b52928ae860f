"""The handler registry: api key -> :class:`~kafkakit.broker.handlers.base.ApiHandler`.

One module per request family; each exports ``HANDLERS``, a tuple of
``ApiHandler`` records.  ApiVersions advertises exactly what is registered
here, so adding an API means adding its module to ``_MODULES``.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kafkakit.broker.handlers import (
    acls,
    api_versions,
    cluster,
    configs,
    consumer_groups,
    coordinator,
    describe_topic_partitions,
    fetch,
    groups,
    leader_epochs,
    list_offsets,
    metadata,
    offsets,
    produce,
    producer_id,
    sasl,
    scram,
    share_fetch,
    share_groups,
    topics,
    txn,
    txn_markers,
)
from kafkakit.broker.handlers.base import ApiHandler
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.errors import ErrorCode

_MODULES = (
    api_versions,
    metadata,
    describe_topic_partitions,
    topics,
    produce,
    fetch,
    list_offsets,
    leader_epochs,
    cluster,
    configs,
    coordinator,
    producer_id,
    groups,
    consumer_groups,
    offsets,
    txn,
    txn_markers,
    sasl,
    acls,
    scram,
    share_groups,
    share_fetch,
)

HANDLERS: dict[int, ApiHandler] = {h.api_key: h for m in _MODULES for h in m.HANDLERS}


def unsupported_version_response(header: RequestHeaderInfo) -> Any | None:
    """How to answer an API or version the broker does not serve, or None to close the connection.

    ApiVersions gets the v0-format UNSUPPORTED_VERSION answer listing our ranges.
    Another API gets UNSUPPORTED_VERSION in its own response format when kio
    knows that format and it has a top-level error code; otherwise there is no
    way to answer that the client could read, and Kafka closes the connection.
    """
    if header.api_key == api_versions.API_KEY:
        return api_versions.unsupported_api_versions_response()
    try:
        cls = response_class(header.api_key, header.api_version)
    except Exception:
        return None
    if not any(f.name == "error_code" for f in dataclasses.fields(cls)):
        return None
    try:
        return _filled(cls)
    except Exception:
        return None


def _filled(cls: type) -> Any:
    """An instance of ``cls`` with neutral values and error_code UNSUPPORTED_VERSION."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING:
            continue
        values[f.name] = _neutral(str(f.type), f.metadata.get("kafka_type"))
    return cls(**values)


def _neutral(type_text: str, kafka_type: str | None) -> Any:
    if type_text.startswith("tuple"):
        return ()
    if kafka_type == "error_code":
        return ErrorCode.unsupported_version
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return datetime.timedelta(0)
    if kafka_type == "string":
        return None if "None" in type_text else ""
    if kafka_type == "bool":
        return False
    if kafka_type in ("bytes", "records", "uuid", "datetime_i64"):
        return None
    return 0


__all__ = ["HANDLERS", "ApiHandler", "unsupported_version_response"]
