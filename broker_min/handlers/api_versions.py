"""ApiVersions (key 18), v0-4: advertise exactly the APIs the handler registry implements.

The response header is always v0 (no tagged fields), even for the flexible
versions, so a client that sent a version we do not know can still read our
answer; kio's ApiVersions response classes already carry header v0.

From v3 the response carries features as Kafka 4.x sends them: the supported
range of ``transaction.version`` (0-2; omitted before v4, as Kafka omits
features whose minimum is 0 there) and its finalized level (the broker's
``transaction_version`` setting, 2 by default), which is how clients such as
the Java producer decide to use transaction version 2 (KIP-890).  Level 0 is
not listed, as Kafka lists no finalized feature at level 0.
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
FIRST_FEATURES_VERSION = 3
FIRST_ZERO_MIN_FEATURES_VERSION = 4
TRANSACTION_VERSION_FEATURE = "transaction.version"
MAX_TRANSACTION_VERSION = 2
# Kafka's epoch of the finalized feature set; a fixed value: the level changes only with a restart.
FINALIZED_FEATURES_EPOCH = 1


def _advertised() -> list[tuple[int, int, int]]:
    # Imported late: the registry imports this module.
    from kafkakit.broker.handlers import HANDLERS

    return sorted((h.api_key, h.min_version, h.max_version) for h in HANDLERS.values())


async def handle_api_versions(state: BrokerState, header: RequestHeaderInfo, request: Any) -> Any:
    """List every implemented API with its version range."""
    cls = response_class(API_KEY, header.api_version)
    entry = nested(cls, "ApiVersion")
    keys = tuple(make(entry, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in _advertised())
    if header.api_version < FIRST_FEATURES_VERSION:
        return make(cls, error_code=ErrorCode.none, api_keys=keys, throttle_time=NO_THROTTLE)
    return make(
        cls,
        error_code=ErrorCode.none,
        api_keys=keys,
        throttle_time=NO_THROTTLE,
        **_features(cls, header.api_version, state.config.transaction_version),
    )


def _features(cls: type, version: int, level: int) -> dict[str, Any]:
    """SupportedFeatures, FinalizedFeaturesEpoch and FinalizedFeatures (tagged fields, v3+)."""
    supported: tuple[Any, ...] = ()
    if version >= FIRST_ZERO_MIN_FEATURES_VERSION:
        supported = (
            make(
                nested(cls, "SupportedFeatureKey"),
                name=TRANSACTION_VERSION_FEATURE,
                min_version=0,
                max_version=MAX_TRANSACTION_VERSION,
            ),
        )
    finalized: tuple[Any, ...] = ()
    if level > 0:
        finalized = (
            make(
                nested(cls, "FinalizedFeatureKey"),
                name=TRANSACTION_VERSION_FEATURE,
                max_version_level=level,
                min_version_level=level,
            ),
        )
    return {
        "supported_features": supported,
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": finalized,
    }


def unsupported_api_versions_response() -> Any:
    """The v0-format UNSUPPORTED_VERSION answer with our ranges; clients retry within them."""
    keys = tuple(make(ApiVersionV0, api_key=k, min_version=lo, max_version=hi) for k, lo, hi in _advertised())
    return make(ApiVersionsResponseV0, error_code=ErrorCode.unsupported_version, api_keys=keys)


HANDLERS = (ApiHandler(API_KEY, MIN_VERSION, MAX_VERSION, handle_api_versions),)
