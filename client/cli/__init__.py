"""kafkakit.cli: the ``kafkakit`` command line (topics, produce, consume, groups, acls, users, cluster, perf).

One module per command family, each with ``register(subparsers, common)``;
:mod:`kafkakit.cli.config` maps Kafka's client setting names onto kafkakit's
and :mod:`kafkakit.cli.output` prints tables and JSON. Run ``kafkakit --help``.
"""
