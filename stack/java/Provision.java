import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.attribute.AttributeParser;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * Creates topics and consumer groups on one broker in a single JVM, with RocketMQ's own admin client
 * (mqadmin starts a JVM per command: eight commands cost seconds of stack start-up). Run as a source
 * file: {@code java -cp <rocketmq jars> Provision.java NAMESRV BROKER_ADDR SPEC...} where SPEC is
 * {@code topic=NAME;QUEUES;PERM;ATTRIBUTES} or {@code group=NAME;RETRY_MAX_TIMES}. Prints one line per
 * item and "provisioned." at the end; exits non-zero on the first failure.
 */
public class Provision {
    public static void main(String[] args) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt(5000L);
        admin.setNamesrvAddr(args[0]);
        admin.setInstanceName("sortie-provision-" + System.nanoTime());
        admin.start();
        try {
            for (int i = 2; i < args.length; i++) {
                String[] kv = args[i].split("=", 2);
                String[] f = kv[1].split(";", -1);
                if (kv[0].equals("topic")) {
                    int queues = Integer.parseInt(f[1]);
                    TopicConfig topic = new TopicConfig(f[0], queues, queues, Integer.parseInt(f[2]));
                    if (f.length > 3 && !f[3].isEmpty()) {
                        topic.setAttributes(AttributeParser.parseToMap(f[3]));
                    }
                    admin.createAndUpdateTopicConfig(args[1], topic);
                    System.out.println("created topic " + f[0]);
                } else if (kv[0].equals("group")) {
                    SubscriptionGroupConfig group = new SubscriptionGroupConfig();
                    group.setGroupName(f[0]);
                    group.setRetryMaxTimes(Integer.parseInt(f[1]));
                    admin.createAndUpdateSubscriptionGroupConfig(args[1], group);
                    System.out.println("created group " + f[0]);
                } else {
                    throw new IllegalArgumentException("not topic=... or group=...: " + args[i]);
                }
            }
            System.out.println("provisioned.");
        } finally {
            admin.shutdown();
        }
    }
}
