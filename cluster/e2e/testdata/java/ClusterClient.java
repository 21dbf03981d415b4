import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client against a strata cluster, run by cluster/e2e's tests:
 *
 *   ClusterClient PRODUCE_BOOTSTRAP CONSUME_BOOTSTRAP TOPIC N
 *
 * Produces N records (idempotent, acks=all) spread over every partition of
 * TOPIC, bootstrapping from one node, then reads every partition from the
 * start, bootstrapping from another, until it has read N records. Prints
 * what it saw for the test to check, one fact a line:
 *
 *   leader PARTITION NODE      as the producer's metadata has it
 *   ack PARTITION OFFSET VALUE an acknowledged record
 *   read PARTITION OFFSET VALUE a record read back
 *
 * Exits 0 when it read N records, 1 otherwise.
 */
public class ClusterClient {
    static Properties props(String bootstrap) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("max.block.ms", "30000");
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    public static void main(String[] a) throws Exception {
        String produceVia = a[0], consumeVia = a[1], topic = a[2];
        int n = Integer.parseInt(a[3]);
        try {
            Properties pp = props(produceVia);
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            pp.put("acks", "all");
            pp.put("enable.idempotence", "true");
            pp.put("delivery.timeout.ms", "30000");
            List<TopicPartition> parts = new ArrayList<>();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (PartitionInfo pi : producer.partitionsFor(topic)) {
                    parts.add(new TopicPartition(topic, pi.partition()));
                    System.out.println("leader " + pi.partition() + " " + (pi.leader() == null ? -1 : pi.leader().id()));
                }
                List<Future<RecordMetadata>> sent = new ArrayList<>();
                List<String> values = new ArrayList<>();
                for (int i = 0; i < n; i++) {
                    String v = "java-" + i;
                    sent.add(producer.send(new ProducerRecord<>(topic, i % parts.size(), "k" + i, v)));
                    values.add(v);
                }
                for (int i = 0; i < n; i++) {
                    RecordMetadata md = sent.get(i).get();
                    System.out.println("ack " + md.partition() + " " + md.offset() + " " + values.get(i));
                }
            }
            Properties cp = props(consumeVia);
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", StringDeserializer.class.getName());
            cp.put("enable.auto.commit", "false");
            int got = 0;
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
                consumer.assign(parts);
                consumer.seekToBeginning(parts);
                long deadline = System.currentTimeMillis() + 60_000;
                while (got < n && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        System.out.println("read " + r.partition() + " " + r.offset() + " " + r.value());
                        got++;
                    }
                }
            }
            if (got < n) {
                System.err.println("read " + got + " of " + n + " records");
                System.exit(1);
            }
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }
}
