import java.util.Properties;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client's idempotent producer (acks=all) under a fault, run by
 * cluster/e2e's tests:
 *
 *   IdempotentProducer BOOTSTRAP TOPIC SECONDS RATE
 *
 * Sends about RATE records a second for SECONDS, spread over every
 * partition of TOPIC, then waits for every outcome. Prints one outcome a
 * line, for the test's history checker:
 *
 *   ack PARTITION OFFSET VALUE  acknowledged
 *   fail VALUE ERROR            failed (stored or not: unknown)
 *
 * Exits 0 once every record has an outcome.
 */
public class IdempotentProducer {
    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], topic = a[1];
        long seconds = Long.parseLong(a[2]);
        int rate = Integer.parseInt(a[3]);
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("key.serializer", StringSerializer.class.getName());
        p.put("value.serializer", StringSerializer.class.getName());
        p.put("acks", "all");
        p.put("enable.idempotence", "true");
        p.put("max.in.flight.requests.per.connection", "5");
        p.put("linger.ms", "5");
        p.put("request.timeout.ms", "10000");
        p.put("delivery.timeout.ms", "60000");
        p.put("max.block.ms", "30000");
        p.put("metadata.max.age.ms", "1000");
        AtomicInteger failed = new AtomicInteger();
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(p)) {
            int parts = producer.partitionsFor(topic).size();
            long end = System.currentTimeMillis() + seconds * 1000;
            for (int i = 0; System.currentTimeMillis() < end; i++) {
                String v = "java-" + i;
                producer.send(new ProducerRecord<>(topic, i % parts, null, v), (md, err) -> {
                    synchronized (System.out) {
                        if (err != null) {
                            failed.incrementAndGet();
                            System.out.println("fail " + v + " " + err.getClass().getSimpleName() + ": " + err.getMessage());
                        } else {
                            System.out.println("ack " + md.partition() + " " + md.offset() + " " + v);
                        }
                    }
                });
                Thread.sleep(1000 / rate);
            }
            producer.flush();
        }
        System.err.println(failed.get() + " records failed");
    }
}
