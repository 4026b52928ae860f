"""Transaction versions: which one a coordinator allows, and the request versions each may use.

Transaction version 1 is what every broker since Kafka 0.11 speaks;
version 2 (KIP-890) is used when the transaction coordinator finalizes the
feature ``transaction.version`` >= 2. See :mod:`kafkakit.producer.transactions`
for what each changes on the wire.
"""

from __future__ import annotations

from kafkakit.errors import UnsupportedVersionError
from kafkakit.net.connection import BrokerConnection
from kafkakit.protocol.framing import ApiKey

#: Transaction versions kafkakit speaks (see kafkakit.producer.transactions).
TRANSACTION_VERSION_1 = 1
TRANSACTION_VERSION_2 = 2
#: The ApiVersions finalized feature that enables transaction version 2.
TRANSACTION_VERSION_FEATURE = "transaction.version"
#: Request versions per transaction version: (lowest, highest) each may use.
_TV1_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.END_TXN: (0, 4),
}
_TV2_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (12, 12),
    ApiKey.TXN_OFFSET_COMMIT: (5, 5),
    ApiKey.END_TXN: (5, 5),
}

def version_range(api_key: int, transaction_version: int) -> tuple[int, int] | None:
    """The request versions of ``api_key`` a transaction of ``transaction_version`` may use (None: any)."""
    table = _TV2_VERSIONS if transaction_version >= TRANSACTION_VERSION_2 else _TV1_VERSIONS
    return table.get(api_key)


def choose_version(conn: BrokerConnection, api_key: int, transaction_version: int) -> int:
    """The version of ``api_key`` to send over ``conn`` for a transaction of ``transaction_version``."""
    chosen = conn.version(api_key)
    bounds = version_range(api_key, transaction_version)
    if bounds is None:
        return chosen
    chosen = min(chosen, bounds[1])
    if chosen < bounds[0]:
        raise UnsupportedVersionError(
            f"transaction version {transaction_version} needs API {api_key} v{bounds[0]}+, "
            f"but {conn.host}:{conn.port} speaks up to v{chosen}"
        )
    return chosen


def supported_transaction_version(conn: BrokerConnection) -> int:
    """The highest transaction version both ``conn``'s broker and kafkakit can use."""
    if conn.finalized_features.get(TRANSACTION_VERSION_FEATURE, 0) < TRANSACTION_VERSION_2:
        return TRANSACTION_VERSION_1
    for api_key, (low, _) in _TV2_VERSIONS.items():
        if not conn.supports(api_key) or conn.version(api_key) < low:
            return TRANSACTION_VERSION_1
    return TRANSACTION_VERSION_2
