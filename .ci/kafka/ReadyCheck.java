// Readiness probe of the CI test broker (.ci/kafka-broker.sh). Compiled once with javac
// against the broker's jars (kafka-clients is among them) and run as:
//   java -cp "<classes>:<libs>/*" ReadyCheck 127.0.0.1:19092 60000
// Exits 0 once the broker answers DescribeCluster AND a transactional round trip works:
// a transactional producer inits (so __transaction_state exists with RF=1), sends one
// record and commits, and a read_committed consumer reads that record back.
// Exits 1 when the budget (ms) runs out first.
import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ReadyCheck {
    static final String TOPIC = "__ksrunner_readycheck";

    public static void main(String[] args) throws Exception {
        String bootstrap = args.length > 0 ? args[0] : "127.0.0.1:19092";
        long budgetMs = args.length > 1 ? Long.parseLong(args[1]) : 60_000L;
        long deadline = System.currentTimeMillis() + budgetMs;
        try {
            run(bootstrap, deadline);
        } catch (Exception e) {
            System.err.println("NOT READY: " + e);
            System.exit(1);
        }
        System.exit(0);
    }

    static long left(long deadline) {
        return Math.max(1_000L, deadline - System.currentTimeMillis());
    }

    static void run(String bootstrap, long deadline) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "5000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "10000");
        try (Admin admin = Admin.create(ap)) {
            while (true) {
                try {
                    DescribeClusterResult r = admin.describeCluster();
                    Collection<Node> nodes = r.nodes().get(10, TimeUnit.SECONDS);
                    if (!nodes.isEmpty()) {
                        System.out.println("cluster " + r.clusterId().get() + " nodes " + nodes);
                        break;
                    }
                } catch (Exception e) {
                    if (System.currentTimeMillis() > deadline) throw e;
                }
                Thread.sleep(200);
            }
            try {
                admin.createTopics(List.of(new NewTopic(TOPIC, 1, (short) 1))).all().get(left(deadline), TimeUnit.MILLISECONDS);
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof TopicExistsException)) throw e;
            }
        }

        String value = UUID.randomUUID().toString();
        RecordMetadata md;
        Properties pp = new Properties();
        pp.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        pp.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, "ksrunner-readycheck");
        pp.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        pp.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(left(deadline)));
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(pp)) {
            producer.initTransactions();
            producer.beginTransaction();
            md = producer.send(new ProducerRecord<>(TOPIC, "k", value)).get(left(deadline), TimeUnit.MILLISECONDS);
            producer.commitTransaction();
        }

        Properties cp = new Properties();
        cp.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        cp.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        cp.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        cp.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        cp.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(cp)) {
            TopicPartition tp = new TopicPartition(TOPIC, md.partition());
            consumer.assign(List.of(tp));
            consumer.seek(tp, md.offset());
            while (true) {
                for (ConsumerRecord<String, String> rec : consumer.poll(Duration.ofMillis(500))) {
                    if (value.equals(rec.value())) {
                        System.out.println("READY: transactional round trip on " + bootstrap + " (offset " + rec.offset() + ")");
                        return;
                    }
                }
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("committed record not read back before the deadline");
                }
            }
        }
    }
}
