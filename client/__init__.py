"""kafkakit: an asyncio Kafka client speaking the Kafka wire protocol.

Public names::

    from kafkakit import Producer, Consumer, Admin, TopicPartition, NewTopic

Every public name is imported on first use, so that ``import kafkakit.broker`` does not
pay for the client's modules, and the pytest plugin (``kafkakit.testing.plugin``, loaded in
every pytest session) imports nothing heavy.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any


def _import_kio_without_hypothesis() -> None:
    """Import kio's phantom types with its Hypothesis integration off.

    kio registers a Hypothesis strategy for every protocol type when Hypothesis can be
    imported; with Hypothesis installed that costs 0.4-0.5 s per interpreter on a slow VM
    (every Spark Python worker and runner, every CLI call, every broker_min process) and
    kafkakit never uses those strategies. kio checks once, at import of
    ``kio.static._phantom`` (``try: import hypothesis.strategies``), so the check is made to
    fail for that one import. Nothing changes when Hypothesis (or kio) was imported first.
    """
    if "hypothesis" in sys.modules or "kio.static._phantom" in sys.modules:
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` raises ImportError
    try:
        import kio.static._phantom  # noqa: F401
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()

if TYPE_CHECKING:
    from kafkakit.acls import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        PatternType,
        ResourceType,
        ScramCredentialInfo,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )
    from kafkakit.admin import Admin
    from kafkakit.consumer import Consumer, ConsumerRebalanceListener, FetchedRange
    from kafkakit.errors import (
        AuthenticationError,
        AuthorizationError,
        BrokerResponseError,
        ClusterAuthorizationFailedError,
        CommitFailedError,
        GroupAuthorizationFailedError,
        GroupProtocolUnsupportedError,
        KafkaConfigError,
        KafkaConnectionError,
        KafkaError,
        KafkaTimeoutError,
        NotYetSupportedError,
        SaslAuthenticationError,
        ShareGroupsNotSupportedError,
        SslAuthenticationError,
        SSLVerificationError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
        UnsupportedSaslMechanismError,
    )
    from kafkakit.producer import Producer, TransactionHandle, complete_transaction
    from kafkakit.security.oauthbearer import OAuthBearerToken
    from kafkakit.security.tls import create_ssl_context
    from kafkakit.share_consumer import (
        AcknowledgementResult,
        AcknowledgeType,
        ShareConsumer,
        ShareConsumerRecord,
    )
    from kafkakit.structs import (
        ConsumerRecord,
        NewTopic,
        OffsetAndMetadata,
        OffsetAndTimestamp,
        RecordMetadata,
        TopicPartition,
    )

__version__ = "0.1.0"

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "PatternType",
    "ResourceType",
    "ScramCredentialInfo",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "OAuthBearerToken",
    "create_ssl_context",
    "AuthenticationError",
    "AuthorizationError",
    "ClusterAuthorizationFailedError",
    "GroupAuthorizationFailedError",
    "GroupProtocolUnsupportedError",
    "SaslAuthenticationError",
    "SslAuthenticationError",
    "SSLVerificationError",
    "TopicAuthorizationFailedError",
    "TransactionalIdAuthorizationFailedError",
    "UnsupportedSaslMechanismError",
    "Admin",
    "BrokerResponseError",
    "CommitFailedError",
    "Consumer",
    "ConsumerRebalanceListener",
    "ConsumerRecord",
    "FetchedRange",
    "KafkaConfigError",
    "KafkaConnectionError",
    "KafkaError",
    "KafkaTimeoutError",
    "NewTopic",
    "NotYetSupportedError",
    "OffsetAndMetadata",
    "OffsetAndTimestamp",
    "Producer",
    "RecordMetadata",
    "AcknowledgeType",
    "AcknowledgementResult",
    "ShareConsumer",
    "ShareConsumerRecord",
    "ShareGroupsNotSupportedError",
    "TopicPartition",
    "TransactionHandle",
    "complete_transaction",
    "__version__",
]

_LAZY = {
    "AuthenticationError": "kafkakit.errors",
    "AuthorizationError": "kafkakit.errors",
    "BrokerResponseError": "kafkakit.errors",
    "ClusterAuthorizationFailedError": "kafkakit.errors",
    "CommitFailedError": "kafkakit.errors",
    "GroupAuthorizationFailedError": "kafkakit.errors",
    "GroupProtocolUnsupportedError": "kafkakit.errors",
    "KafkaConfigError": "kafkakit.errors",
    "KafkaConnectionError": "kafkakit.errors",
    "KafkaError": "kafkakit.errors",
    "KafkaTimeoutError": "kafkakit.errors",
    "NotYetSupportedError": "kafkakit.errors",
    "SaslAuthenticationError": "kafkakit.errors",
    "SslAuthenticationError": "kafkakit.errors",
    "SSLVerificationError": "kafkakit.errors",
    "TopicAuthorizationFailedError": "kafkakit.errors",
    "TransactionalIdAuthorizationFailedError": "kafkakit.errors",
    "UnsupportedSaslMechanismError": "kafkakit.errors",
    "ConsumerRecord": "kafkakit.structs",
    "NewTopic": "kafkakit.structs",
    "OffsetAndMetadata": "kafkakit.structs",
    "OffsetAndTimestamp": "kafkakit.structs",
    "RecordMetadata": "kafkakit.structs",
    "TopicPartition": "kafkakit.structs",
    "AclBinding": "kafkakit.acls",
    "AclBindingFilter": "kafkakit.acls",
    "AclOperation": "kafkakit.acls",
    "AclPermissionType": "kafkakit.acls",
    "PatternType": "kafkakit.acls",
    "ResourceType": "kafkakit.acls",
    "ScramCredentialInfo": "kafkakit.acls",
    "UserScramCredentialDeletion": "kafkakit.acls",
    "UserScramCredentialUpsertion": "kafkakit.acls",
    "OAuthBearerToken": "kafkakit.security.oauthbearer",
    "create_ssl_context": "kafkakit.security.tls",
    "Producer": "kafkakit.producer",
    "TransactionHandle": "kafkakit.producer",
    "complete_transaction": "kafkakit.producer",
    "Consumer": "kafkakit.consumer",
    "ConsumerRebalanceListener": "kafkakit.consumer",
    "FetchedRange": "kafkakit.consumer",
    "Admin": "kafkakit.admin",
    "ShareConsumer": "kafkakit.share_consumer",
    "ShareConsumerRecord": "kafkakit.share_consumer",
    "AcknowledgeType": "kafkakit.share_consumer",
    "AcknowledgementResult": "kafkakit.share_consumer",
    "ShareGroupsNotSupportedError": "kafkakit.errors",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'kafkakit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
