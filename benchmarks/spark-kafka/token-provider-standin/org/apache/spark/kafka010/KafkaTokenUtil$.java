package org.apache.spark.kafka010;

import java.util.Map;

import org.apache.spark.SparkConf;
import scala.Option;

/** Stand-in for Spark's KafkaTokenUtil object (benchmark only): no delegation tokens. */
public final class KafkaTokenUtil$ {
    public static final KafkaTokenUtil$ MODULE$ = new KafkaTokenUtil$();

    private KafkaTokenUtil$() {}

    public boolean needTokenUpdate(Map<String, Object> params, Option<?> clusterConfig) {
        return false;
    }

    public Option<?> findMatchingTokenClusterConfig(SparkConf conf, String bootstrapServers) {
        return Option.empty();
    }
}
