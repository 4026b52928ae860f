// Apache Kafka's own KafkaShareConsumer (KIP-932): N members of one share group read one topic,
// each taking a little time per record (so that the work spreads), with implicit acknowledgement.
//
//   java -cp "$KAFKA_LIB/*" ShareGroupConsumers.java BOOTSTRAP GROUP TOPIC MEMBERS TOTAL
//
// Prints "CONSUMER i records" per member, then "DISTINCT n" (distinct offsets read by all) and
// "DUPLICATES n" (records read more than once). Exits 1 when TOTAL distinct records were not
// read within 90 s.

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public class ShareGroupConsumers {
    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String group = args[1];
        String topic = args[2];
        int members = Integer.parseInt(args[3]);
        int total = Integer.parseInt(args[4]);
        Map<Long, Integer> seen = new ConcurrentHashMap<>();
        AtomicBoolean done = new AtomicBoolean(false);
        AtomicInteger duplicates = new AtomicInteger();
        int[] counts = new int[members];
        List<Thread> threads = new ArrayList<>();
        long start = System.currentTimeMillis();
        long deadline = start + 90_000;
        for (int i = 0; i < members; i++) {
            final int index = i;
            Thread thread = new Thread(() -> {
                Properties props = new Properties();
                props.put("bootstrap.servers", bootstrap);
                props.put("group.id", group);
                props.put("client.id", "share-" + index);
                props.put("key.deserializer", ByteArrayDeserializer.class.getName());
                props.put("value.deserializer", ByteArrayDeserializer.class.getName());
                props.put("max.poll.records", "5");
                try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
                    consumer.subscribe(List.of(topic));
                    while (!done.get() && System.currentTimeMillis() < deadline) {
                        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
                        for (ConsumerRecord<byte[], byte[]> record : records) {
                            if (counts[index]++ == 0) {
                                System.err.println("FIRST " + index + " " + (System.currentTimeMillis() - start));
                            }
                            if (seen.merge(record.offset(), 1, Integer::sum) > 1) {
                                duplicates.incrementAndGet();
                            }
                            Thread.sleep(40);  // the work a record takes
                        }
                        if (seen.size() >= total) {
                            done.set(true);
                        }
                    }
                    System.err.println("DONE " + index + " " + (System.currentTimeMillis() - start));
                    consumer.commitSync();
                    System.err.println("CLOSING " + index + " " + (System.currentTimeMillis() - start));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            thread.start();
            threads.add(thread);
        }
        for (Thread thread : threads) {
            thread.join();
        }
        for (int i = 0; i < members; i++) {
            System.out.println("CONSUMER " + i + " " + counts[i]);
        }
        System.out.println("DISTINCT " + seen.size());
        System.out.println("DUPLICATES " + duplicates.get());
        System.exit(seen.size() >= total ? 0 : 1);
    }
}
