package org.apache.spark.kafka010;

import java.util.HashMap;
import java.util.Map;

import scala.Option;

/**
 * Stand-in for Spark's KafkaConfigUpdater (module spark-token-provider-kafka-0-10), for the benchmark
 * only: sets Kafka client parameters; delegation-token authentication is not supported (no-op).
 * See benchmarks/spark-kafka/pom.xml for why this exists.
 */
public final class KafkaConfigUpdater {
    private final Map<String, Object> params;

    public KafkaConfigUpdater(String module, scala.collection.immutable.Map<String, Object> kafkaParams) {
        this.params = new HashMap<>(scala.jdk.javaapi.CollectionConverters.asJava(kafkaParams));
    }

    public KafkaConfigUpdater set(String key, Object value) {
        params.put(key, value);
        return this;
    }

    public KafkaConfigUpdater setIfUnset(String key, Object value) {
        params.putIfAbsent(key, value);
        return this;
    }

    public KafkaConfigUpdater setAuthenticationConfigIfNeeded() {
        return this;
    }

    public KafkaConfigUpdater setAuthenticationConfigIfNeeded(Option<?> clusterConfig) {
        return this;
    }

    public Map<String, Object> build() {
        return params;
    }
}
