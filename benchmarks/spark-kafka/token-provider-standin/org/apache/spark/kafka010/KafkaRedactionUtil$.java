package org.apache.spark.kafka010;

import java.util.ArrayList;
import java.util.List;

import scala.Tuple2;
import scala.collection.immutable.Seq;

/** Stand-in for Spark's KafkaRedactionUtil object (benchmark only): parameters as strings, no redaction. */
public final class KafkaRedactionUtil$ {
    public static final KafkaRedactionUtil$ MODULE$ = new KafkaRedactionUtil$();

    private KafkaRedactionUtil$() {}

    public Seq<Tuple2<String, String>> redactParams(Seq<Tuple2<String, Object>> params) {
        List<Tuple2<String, String>> out = new ArrayList<>();
        for (Tuple2<String, Object> p : scala.jdk.javaapi.CollectionConverters.asJava(params)) {
            out.add(new Tuple2<>(p._1(), String.valueOf(p._2())));
        }
        return scala.jdk.javaapi.CollectionConverters.asScala(out).toList();
    }
}
