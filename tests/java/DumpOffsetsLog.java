// Prints a __consumer_offsets segment as Apache Kafka's own code reads it (FileRecords and
// GroupCoordinatorRecordSerde): one line per batch, then one per record.  Used by
// tests/test_broker_txn_offsets.py to check broker_min's on-disk format; run with
// `java -cp '<kafka lib>/*' DumpOffsetsLog.java <segment.log>`.
import java.io.File;
import java.nio.ByteBuffer;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.FileLogInputStream.FileChannelRecordBatch;
import org.apache.kafka.common.record.internal.FileRecords;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.coordinator.common.runtime.CoordinatorRecord;
import org.apache.kafka.coordinator.group.GroupCoordinatorRecordSerde;

public class DumpOffsetsLog {
    public static void main(String[] args) throws Exception {
        GroupCoordinatorRecordSerde serde = new GroupCoordinatorRecordSerde();
        try (FileRecords records = FileRecords.open(new File(args[0]))) {
            for (FileChannelRecordBatch batch : records.batches()) {
                batch.ensureValid();
                System.out.println("batch baseOffset=" + batch.baseOffset() + " producerId=" + batch.producerId()
                    + " producerEpoch=" + batch.producerEpoch() + " isTransactional=" + batch.isTransactional()
                    + " isControl=" + batch.isControlBatch());
                for (Record record : batch) {
                    if (batch.isControlBatch()) {
                        System.out.println("  control offset=" + record.offset() + " type=" + ControlRecordType.parse(record.key()));
                        continue;
                    }
                    ByteBuffer value = record.hasValue() ? record.value() : null;
                    CoordinatorRecord parsed = serde.deserialize(record.key(), value);
                    System.out.println("  record offset=" + record.offset() + " key=" + parsed.key()
                        + " value=" + (parsed.value() == null ? "null" : parsed.value().message()));
                }
            }
        }
    }
}
