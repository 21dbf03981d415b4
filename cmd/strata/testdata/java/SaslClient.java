import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The Java client against strata over SASL_SSL, run by cmd/strata's tests:
 *
 *   SaslClient BOOTSTRAP CA_PEM USER PASSWORD TOPIC [NEW_USER NEW_PASSWORD]
 *
 * Logs in with SCRAM-SHA-512; with NEW_USER, first sets that user's
 * SCRAM-SHA-512 password through the Admin API (what kafka-configs does)
 * and continues as that user. Produces ten records to TOPIC and reads them
 * back. Exits 0 on success, 3 on an authentication failure, 1 otherwise.
 */
public class SaslClient {
    static Properties props(String bootstrap, String ca, String user, String password) {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("security.protocol", "SASL_SSL");
        p.put("ssl.truststore.type", "PEM");
        p.put("ssl.truststore.location", ca);
        p.put("sasl.mechanism", "SCRAM-SHA-512");
        p.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + user + "\" password=\"" + password + "\";");
        p.put("max.block.ms", "30000");
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        return p;
    }

    public static void main(String[] a) throws Exception {
        String bootstrap = a[0], ca = a[1], user = a[2], password = a[3], topic = a[4];
        try {
            if (a.length > 6) {
                try (Admin admin = Admin.create(props(bootstrap, ca, user, password))) {
                    admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(a[5],
                            new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), a[6]))).all().get();
                }
                user = a[5];
                password = a[6];
            }
            Properties pp = props(bootstrap, ca, user, password);
            pp.put("key.serializer", StringSerializer.class.getName());
            pp.put("value.serializer", StringSerializer.class.getName());
            pp.put("acks", "all");
            pp.put("delivery.timeout.ms", "30000");
            List<String> sent = new ArrayList<>();
            try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
                for (int i = 0; i < 10; i++) {
                    String v = "java-" + i;
                    producer.send(new ProducerRecord<>(topic, 0, "k" + i, v)).get();
                    sent.add(v);
                }
            }
            Properties cp = props(bootstrap, ca, user, password);
            cp.put("key.deserializer", StringDeserializer.class.getName());
            cp.put("value.deserializer", StringDeserializer.class.getName());
            cp.put("enable.auto.commit", "false");
            List<String> got = new ArrayList<>();
            try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
                TopicPartition tp = new TopicPartition(topic, 0);
                consumer.assign(List.of(tp));
                consumer.seekToBeginning(List.of(tp));
                long deadline = System.currentTimeMillis() + 60_000;
                while (got.size() < sent.size() && System.currentTimeMillis() < deadline) {
                    for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                        got.add(r.value());
                    }
                }
            }
            if (!got.equals(sent)) {
                System.err.println("consumed " + got + ", produced " + sent);
                System.exit(1);
            }
            System.out.println("OK produced and consumed " + got.size() + " records as " + user);
        } catch (Exception e) {
            for (Throwable c = e; c != null; c = c.getCause()) {
                if (c instanceof SaslAuthenticationException) {
                    System.err.println("AUTHENTICATION_FAILED: " + c.getMessage());
                    System.exit(3);
                }
            }
            e.printStackTrace();
            System.exit(1);
        }
    }
}
