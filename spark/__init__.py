"""kafkakit.spark: PySpark source and sink (not yet supported: see docs/spark.md)."""
