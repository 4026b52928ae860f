"""pyspark version gates for tests of APIs that older supported releases lack."""

from __future__ import annotations

import pyspark
import pytest

PYSPARK_VERSION = tuple(int(part) for part in pyspark.__version__.split(".")[:2])

# Read limits passed to latestOffset(start, limit) and Trigger.AvailableNow for Python
# sources arrived in pyspark 4.2; 4.0/4.1 run AvailableNow as one batch (documented in docs/spark.md).
requires_read_limit_api = pytest.mark.skipif(
    PYSPARK_VERSION < (4, 2),
    reason=f"needs pyspark >= 4.2 (read limits / Trigger.AvailableNow); this is {pyspark.__version__}",
)
