"""kafkakit.broker.raft: the KRaft metadata quorum (KIP-595), being built for issue 13.

Not wired into the broker yet: a broker_min node still runs alone.
"""
