"""Kafka protocol framing on top of kio's generated message classes.

kio supplies every request/response schema (generated from Apache Kafka's JSON
definitions) with its reader and writer; this package adds what kio leaves to
its users: the size-prefixed frame, the request/response headers, and a cache
of schema classes, readers and writers keyed by (api key, version).
"""

from __future__ import annotations

from kafkakit.protocol.framing import (
    ApiKey,
    RequestHeaderInfo,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_chunks,
    encode_response,
    request_class,
    response_class,
)

__all__ = [
    "ApiKey",
    "RequestHeaderInfo",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_request_chunks",
    "encode_response",
    "request_class",
    "response_class",
]
