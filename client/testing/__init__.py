"""kafkakit.testing: pytest fixtures with an embedded Kafka broker (``pip install "kafkakit[testing]"``)."""
