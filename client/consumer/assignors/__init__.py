"""Partition assignors and the consumer protocol codec for consumer groups.

``from kafkakit.consumer.assignors import RangeAssignor, encode_subscription, ...``

Pure code with no I/O: the group membership client encodes this member's
:class:`Subscription` into JoinGroup metadata, and as leader decodes every
member's, runs :meth:`PartitionAssignor.assign` and encodes each
:class:`Assignment` into SyncGroup. Semantics follow Apache Kafka's Java
client (protocol names "range", "roundrobin", "sticky", "cooperative-sticky").
"""

from .base import PartitionAssignor, RebalanceProtocol
from .protocol import (
    DEFAULT_GENERATION,
    HIGHEST_VERSION,
    PROTOCOL_TYPE,
    Assignment,
    ConsumerProtocolError,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .range import RangeAssignor
from .registry import ASSIGNORS, assignor_from_name
from .roundrobin import RoundRobinAssignor
from .sticky import (
    AbstractStickyAssignor,
    CooperativeStickyAssignor,
    StickyAssignor,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    encode_cooperative_user_data,
    encode_sticky_user_data,
)
from .sticky_algorithm import MemberData

__all__ = [
    "ASSIGNORS",
    "DEFAULT_GENERATION",
    "HIGHEST_VERSION",
    "PROTOCOL_TYPE",
    "AbstractStickyAssignor",
    "Assignment",
    "ConsumerProtocolError",
    "CooperativeStickyAssignor",
    "MemberData",
    "PartitionAssignor",
    "RangeAssignor",
    "RebalanceProtocol",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "assignor_from_name",
    "decode_assignment",
    "decode_cooperative_user_data",
    "decode_subscription",
    "decode_sticky_user_data",
    "encode_assignment",
    "encode_cooperative_user_data",
    "encode_subscription",
    "encode_sticky_user_data",
]
