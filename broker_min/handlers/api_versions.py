"""ApiVersions (key 18), v0-4: advertise exactly the APIs the handler registry implements.

The response header is always v0 (no tagged fields), even for the flexible
versions, so a client that sent a version we do not know can still read our
answer; kio's ApiVersions response classes already carry header v0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafkakit.broker.handlers.base import NO_THROTTLE, ApiHandler, make, nested
from kafkakit.protocol import RequestHeaderInfo, response_class
from kio.schema.api_versions.v0.response import ApiVersion as ApiVersionV0
from kio.schema.api_versions.v0.response import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from kafkakit.broker.state import BrokerState

API_KEY = 18
MIN_VERSION = 0
MAX_VERSION = 4


def _advertised() -> list[tuple[int, int, int]]:
    # Imported late: the registry imports this module.
    from kafkakit.broker.handlers import HANDLERS

    return sorted((h.api_key, h.min_version, h.max_version) for h in HANDLERS.values())


async def handle_api_versions(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """List every implemented API with its version range."""
    cls = response_class(API_KEY, header.api_version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(make(entry, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in _advertised())
    return make(cls, error_code=ErrorCode.none, api_keys=keys, throttle_time=NO_THROTTLE)


def unsupported_api_versions_response() -> Any:
    """The v0-format UNSUPPORTED_VERSION answer with our ranges; clients retry within them."""
    keys = tuple(make(ApiVersionV0, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in _advertised())
    return make(ApiVersionsResponseV0, error_code=ErrorCode.unsupported_version, api_keys=keys)


HANDLERS = (ApiHandler(API_KEY, MIN_VERSION, MAX_VERSION, handle_api_versions),)
