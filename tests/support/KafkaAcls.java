// Adds ACL bindings to a test broker (run as a single-file program: java -cp libs/* KafkaAcls.java).
// The Kafka jars scripts/services.py caches carry the Admin API, not the kafka-acls tool.
// Arguments: BOOTSTRAP PRINCIPAL then RULE...; a RULE is TYPE:NAME:OPERATION:allow|deny,
// e.g. TOPIC:*:WRITE:allow or CLUSTER:kafka-cluster:IDEMPOTENT_WRITE:allow.
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class KafkaAcls {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        List<AclBinding> bindings = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            String[] rule = args[i].split(":");
            bindings.add(new AclBinding(
                new ResourcePattern(ResourceType.valueOf(rule[0]), rule[1], PatternType.LITERAL),
                new AccessControlEntry(args[1], "*", AclOperation.valueOf(rule[2]),
                    rule[3].equals("allow") ? AclPermissionType.ALLOW : AclPermissionType.DENY)));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(bindings).all().get();
        }
    }
}
