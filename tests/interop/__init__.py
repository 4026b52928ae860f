"""Third-party Kafka clients (confluent-kafka, aiokafka, kafka-python, kcat) against broker_min."""
