import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.CreateTopicsResult;
import org.apache.kafka.clients.admin.DescribeConfigsOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.errors.InvalidConfigurationException;

/**
 * The Java Admin client's topic config calls against strata, run by
 * cmd/strata's tests:
 *
 *   AdminConfigs BOOTSTRAP TOPIC
 *
 * createTopics with configs (reading the configs the answer carries: the
 * client threw a NullPointerException when they were missing),
 * describeConfigs of the topic and the broker, incrementalAlterConfigs
 * (set and delete), and a refused value. Prints what it saw, one
 * "name=value source" line per config; exits 0 on success, 1 otherwise.
 */
public class AdminConfigs {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", args[0]);
        p.put("request.timeout.ms", "20000");
        p.put("default.api.timeout.ms", "30000");
        String topic = args[1];
        try (Admin admin = Admin.create(p)) {
            NewTopic nt = new NewTopic(topic, 2, (short) 1).configs(Map.of(
                    "retention.ms", "3600000", "remote.storage.enable", "false", "max.message.bytes", "2000000"));
            CreateTopicsResult created = admin.createTopics(List.of(nt));
            created.all().get();
            print("created", created.config(topic).get());
            System.out.println("partitions " + created.numPartitions(topic).get() + " replication " + created.replicationFactor(topic).get());

            ConfigResource res = new ConfigResource(ConfigResource.Type.TOPIC, topic);
            Config described = admin.describeConfigs(List.of(res), new DescribeConfigsOptions().includeSynonyms(true)).all().get().get(res);
            print("described", described);
            ConfigEntry seg = described.get("segment.bytes");
            System.out.println("synonyms segment.bytes " + seg.synonyms().size() + " " + seg.synonyms().get(0).name());

            Collection<AlterConfigOp> ops = new ArrayList<>();
            ops.add(new AlterConfigOp(new ConfigEntry("segment.ms", "60000"), AlterConfigOp.OpType.SET));
            ops.add(new AlterConfigOp(new ConfigEntry("retention.ms", ""), AlterConfigOp.OpType.DELETE));
            admin.incrementalAlterConfigs(Map.of(res, ops)).all().get();
            print("altered", admin.describeConfigs(List.of(res)).all().get().get(res));

            try {
                admin.incrementalAlterConfigs(Map.of(res, List.of(
                        new AlterConfigOp(new ConfigEntry("retention.ms", "soon"), AlterConfigOp.OpType.SET)))).all().get();
                System.out.println("refused: no");
            } catch (ExecutionException e) {
                System.out.println("refused: " + (e.getCause() instanceof InvalidConfigurationException) + " " + e.getCause().getMessage());
            }

            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "0");
            print("broker", admin.describeConfigs(List.of(broker)).all().get().get(broker));
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
        }
    }

    static void print(String what, Config c) {
        Map<String, ConfigEntry> sorted = new TreeMap<>();
        for (ConfigEntry e : c.entries()) sorted.put(e.name(), e);
        for (ConfigEntry e : sorted.values()) {
            System.out.println(what + " " + e.name() + "=" + e.value() + " " + e.source());
        }
    }
}
