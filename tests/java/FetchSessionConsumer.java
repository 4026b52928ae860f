// Apache Kafka's own consumer (which keeps KIP-227 fetch sessions) reads whole partitions from the
// beginning, pausing half of them for a while, and reports what it got per partition.
//
//   java -cp "$KAFKA_LIB/*" FetchSessionConsumer.java BOOTSTRAP TOTAL TOPIC:PARTITIONS...
//
// Prints "PART topic partition records distinct first last" per partition read, then
// "RESULT records". Run with FetchSessionHandler at DEBUG (-Dlog4j2.configurationFile) to see
// which fetches were full and which incremental.

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class FetchSessionConsumer {
    public static void main(String[] args) {
        String bootstrap = args[0];
        int total = Integer.parseInt(args[1]);
        List<TopicPartition> partitions = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            String[] topicAndCount = args[i].split(":");
            for (int p = 0; p < Integer.parseInt(topicAndCount[1]); p++) {
                partitions.add(new TopicPartition(topicAndCount[0], p));
            }
        }
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        props.put("enable.auto.commit", "false");
        props.put("fetch.max.wait.ms", "100");
        // A few records per partition and Fetch: many rounds, each changing some partitions' offsets.
        props.put("max.partition.fetch.bytes", "300");
        Map<String, List<Long>> seen = new TreeMap<>();
        int got = 0;
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.assign(partitions);
            consumer.seekToBeginning(partitions);
            List<TopicPartition> half = partitions.subList(0, partitions.size() / 2);
            long deadline = System.currentTimeMillis() + 90_000;
            for (int poll = 0; got < total && System.currentTimeMillis() < deadline; poll++) {
                if (poll == 3) {
                    consumer.pause(half);  // forgotten by the session, then added back
                } else if (poll == 10) {
                    consumer.resume(half);
                }
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    seen.computeIfAbsent(r.topic() + " " + r.partition(), k -> new ArrayList<>()).add(r.offset());
                    got++;
                }
            }
            for (int i = 0; i < 3; i++) {  // nothing more may come
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(100))) {
                    seen.computeIfAbsent(r.topic() + " " + r.partition(), k -> new ArrayList<>()).add(r.offset());
                    got++;
                }
            }
        }
        for (Map.Entry<String, List<Long>> e : seen.entrySet()) {
            List<Long> offsets = e.getValue();
            System.out.println("PART " + e.getKey() + " " + offsets.size() + " " + new HashSet<>(offsets).size()
                + " " + offsets.get(0) + " " + offsets.get(offsets.size() - 1));
        }
        System.out.println("RESULT " + got);
    }
}
