"""The protocol versions kafkakit's client implements, per API.

The connection picks, per API, the highest version inside both this range and
the broker's advertised range (ApiVersions).  Ranges start low enough for
Apache Kafka 2.8 and end where kafkakit's request code stops.
"""

from __future__ import annotations

from kafkakit.protocol.framing import ApiKey

CLIENT_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 12),  # 13 names topics by id
    ApiKey.FETCH: (4, 17),  # 13+ name topics by id; 16 adds KIP-951 leader hints
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (1, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),  # 9: KIP-848 member epochs (required of "consumer" group members)
    ApiKey.OFFSET_FETCH: (1, 7),
    ApiKey.FIND_COORDINATOR: (0, 3),
    ApiKey.JOIN_GROUP: (0, 7),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    # KIP-848 consumer groups; v1: the client generates its member id (KIP-1082).
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (1, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),  # 5: types filter and group_type (KIP-848)
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),  # 2: current_leader_epoch (KIP-320)
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    # v0 handshakes send SASL tokens as bare frames (pre-KIP-152): kafkakit speaks only v1.
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # KIP-932 share groups (kafkakit.share_consumer, kafkakit.admin_share_groups).
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),  # 2: RENEW acknowledgements (is_renew_ack)
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}


def pick_version(api_key: int, broker_range: tuple[int, int] | None) -> int | None:
    """Highest version both sides support, or None when the ranges do not meet."""
    ours = CLIENT_API_VERSIONS.get(api_key)
    if ours is None or broker_range is None:
        return None
    low = max(ours[0], broker_range[0])
    high = min(ours[1], broker_range[1])
    return high if high >= low else None
