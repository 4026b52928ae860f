"""``python -m kafkakit.broker``: the same as ``kafkakit-broker``."""

from kafkakit.broker.cli import main

raise SystemExit(main())
