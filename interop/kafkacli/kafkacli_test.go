// Package kafkacli runs Apache Kafka's own command-line tools against
// `strata serve`: kafka-topics, kafka-consumer-groups, the console
// producer and consumer, and kafka-get-offsets, the classes of kafka-tools
// (scripts/kafkatools, the same Kafka release as the Apache Kafka peer)
// run with the same java, without Kafka's shell scripts. Each command's
// output is checked as an operator would read it, not only its exit code.
package kafkacli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/internal/testsvc"
	"strata/topicconfig"
)

var bin string // the strata command, built once

func TestMain(m *testing.M) { os.Exit(testsvc.RunWithStrata(m, &bin)) }

// The classes behind Kafka's scripts (bin/kafka-*.sh run kafka-run-class.sh
// with these).
const (
	topicsCmd   = "org.apache.kafka.tools.TopicCommand"
	groupsCmd   = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
	producerCmd = "org.apache.kafka.tools.ConsoleProducer"
	consumerCmd = "org.apache.kafka.tools.consumer.ConsoleConsumer"
	offsetsCmd  = "org.apache.kafka.tools.GetOffsetShell"
	configsCmd  = "org.apache.kafka.tools.ConfigCommand"
)

var (
	cpOnce sync.Once
	cp     string
)

// kafkaTool runs one of Kafka's tools against broker with stdin, and
// returns its output and exit code; wantCode says which exit code is
// expected (anything else fails the test with both outputs).
type result struct {
	stdout, stderr string
	code           int
}

func run(t *testing.T, broker string, wantCode int, stdin, class string, args ...string) result {
	t.Helper()
	java := testsvc.Java(t)
	cpOnce.Do(func() { cp = testsvc.Classpath(t, "kafkatools") })
	if cp == "" {
		t.Fatal("no classpath for Kafka's tools (scripts/jars kafkatools)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	all := append([]string{"-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp, class, "--bootstrap-server", broker}, args...)
	cmd := exec.CommandContext(ctx, java, all...)
	cmd.Stdin = strings.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v", class, strings.Join(args, " "), err)
	}
	if r.code != wantCode {
		t.Fatalf("%s %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", class, strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	return r
}

// table reads a tool's table: the rows under the header line that starts
// with first, each cut into its columns (by runs of spaces).
func table(t *testing.T, out, first string) [][]string {
	t.Helper()
	var rows [][]string
	in := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 0 && f[0] == first:
			in = true
		case in && len(f) > 0:
			rows = append(rows, f)
		case in && len(rows) > 0:
			in = false
		}
	}
	if len(rows) == 0 {
		t.Fatalf("no table under %q in:\n%s", first, out)
	}
	return rows
}

func serve(t *testing.T) testsvc.Strata {
	// Small segments, rolled often, and a tiering run on request that drops
	// local copies at once: the cold tier is a command away.
	p := testsvc.StartProcess(t, bin, t.TempDir(), "segment.max_bytes=4KiB", "segment.roll_check_interval=5",
		"tiering.schedule=@every 1h", "tiering.min_sealed_age=0s", "tiering.local_retention=0s")
	t.Cleanup(p.Stop)
	return p.Strata
}

func client(t *testing.T, s testsvc.Strata) (*kgo.Client, *kadm.Client) {
	c, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c, kadm.NewClient(c)
}

// produce writes n records to each partition, keys k<i> and values v<i>,
// in batches of 50 so that segments roll between them.
func produce(t *testing.T, c *kgo.Client, topic string, partitions int32, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < n; i += 50 {
		var recs []*kgo.Record
		for p := int32(0); p < partitions; p++ {
			for j := i; j < min(i+50, n); j++ {
				recs = append(recs, &kgo.Record{Topic: topic, Partition: p, Key: []byte(fmt.Sprintf("k%d", j)),
					Value: []byte(fmt.Sprintf("v%d %s", j, strings.Repeat("x", 40))), Timestamp: time.UnixMilli(1_700_000_000_000 + int64(j))})
			}
		}
		if err := c.ProduceSync(ctx, recs...).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
}

// tierAll runs the tiering job now: every sealed segment goes to the cold
// tier and its local copy is dropped.
func tierAll(t *testing.T, s testsvc.Strata, topic string) {
	resp, err := http.Post("http://"+s.Admin+"/v1/tiering/run", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"key": "topic=`+topic+`/partition=0/`) {
		t.Fatalf("the tiering run uploaded nothing of %s: %s", topic, body)
	}
}

// kafka-topics --create (with --config) and --describe, before and after
// --alter adds partitions. (Both need the topic configs APIs: CreateTopics
// answering configs, DescribeConfigs.) --describe lists the configs that
// are not defaults: the topic's own and the broker settings serve sets.
func TestKafkaTopicsCreateDescribe(t *testing.T) {
	s := serve(t)
	out := run(t, s.Kafka, 0, "", topicsCmd, "--create", "--topic", "orders", "--partitions", "2", "--replication-factor", "1",
		"--config", "retention.ms=86400000", "--config", "max.message.bytes=65536")
	if !strings.Contains(out.stdout, "Created topic orders.") {
		t.Fatalf("kafka-topics --create printed:\n%s", out.stdout)
	}
	out = run(t, s.Kafka, 1, "", topicsCmd, "--create", "--topic", "orders", "--partitions", "2")
	if !strings.Contains(out.stdout+out.stderr, "Topic 'orders' already exists.") {
		t.Fatalf("creating orders again printed:\n%s\n%s", out.stdout, out.stderr)
	}
	out = run(t, s.Kafka, 1, "", topicsCmd, "--create", "--topic", "refunds", "--config", "cleanup.policy=compact")
	if !strings.Contains(out.stdout+out.stderr, "Invalid value compact for configuration cleanup.policy: strata does not compact logs yet: use delete") {
		t.Fatalf("creating a compacted topic printed:\n%s\n%s", out.stdout, out.stderr)
	}
	describe := func(partitions int) {
		t.Helper()
		out := run(t, s.Kafka, 0, "", topicsCmd, "--describe", "--topic", "orders")
		// strata has no topic ids: Metadata answers the zero id, and the
		// tool leaves "TopicId:" out, as it does for any broker without.
		m := regexp.MustCompile(`Topic: orders\s+PartitionCount: ` + fmt.Sprint(partitions) + `\s+ReplicationFactor: 1\s+Configs: (\S+)`).FindStringSubmatch(out.stdout)
		if m == nil {
			t.Fatalf("kafka-topics --describe: no summary of %d partitions, replication factor 1:\n%s", partitions, out.stdout)
		}
		configs := strings.Split(m[1], ",")
		slices.Sort(configs)
		// serve's settings (segment.max_bytes, tiering.local_retention, no
		// retention, the segment age, the cold tier) and the topic's own.
		want := []string{"local.retention.ms=0", "max.message.bytes=65536", "remote.storage.enable=true", "retention.ms=86400000",
			"segment.bytes=4096", "segment.ms=600000"}
		if !slices.Equal(configs, want) {
			t.Fatalf("kafka-topics --describe: configs %q, want %q", configs, want)
		}
		for p := 0; p < partitions; p++ {
			if !regexp.MustCompile(fmt.Sprintf(`Topic: orders\s+Partition: %d\s+Leader: 0\s+Replicas: 0\s+Isr: 0`, p)).MatchString(out.stdout) {
				t.Fatalf("kafka-topics --describe: partition %d not led by node 0 with replicas and ISR [0]:\n%s", p, out.stdout)
			}
		}
	}
	describe(2)
	run(t, s.Kafka, 0, "", topicsCmd, "--alter", "--topic", "orders", "--partitions", "4")
	describe(4)
}

// kafka-topics --alter adds partitions (the old ones keep their records,
// the new ones start empty) and refuses to take any away; --list and
// --delete.
func TestKafkaTopicsAlterDelete(t *testing.T) {
	s := serve(t)
	c, adm := client(t, s)
	for _, topic := range []string{"orders", "payments"} {
		if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, topic); err != nil {
			t.Fatal(err)
		}
	}
	produce(t, c, "orders", 2, 10)
	out := run(t, s.Kafka, 0, "", topicsCmd, "--list")
	if got := strings.Fields(out.stdout); !slices.Equal(got, []string{"orders", "payments"}) {
		t.Fatalf("kafka-topics --list printed %q", got)
	}

	run(t, s.Kafka, 0, "", topicsCmd, "--alter", "--topic", "orders", "--partitions", "4")
	out = run(t, s.Kafka, 0, "", offsetsCmd, "--topic", "orders")
	if got := strings.Fields(out.stdout); !slices.Equal(got, []string{"orders:0:10", "orders:1:10", "orders:2:0", "orders:3:0"}) {
		t.Fatalf("after adding partitions, kafka-get-offsets printed %q: the old ones keep their records, the new ones start empty", got)
	}
	out = run(t, s.Kafka, 1, "", topicsCmd, "--alter", "--topic", "orders", "--partitions", "3")
	if !strings.Contains(out.stdout+out.stderr, "The topic orders currently has 4 partition(s); 3 would not be an increase.") {
		t.Fatalf("lowering the partition count printed:\n%s\n%s", out.stdout, out.stderr)
	}
	out = run(t, s.Kafka, 1, "", topicsCmd, "--alter", "--topic", "never", "--partitions", "3")
	if !strings.Contains(out.stdout+out.stderr, "Topic 'never' does not exist as expected") {
		t.Fatalf("altering a topic that does not exist printed:\n%s\n%s", out.stdout, out.stderr)
	}

	run(t, s.Kafka, 0, "", topicsCmd, "--delete", "--topic", "orders")
	out = run(t, s.Kafka, 0, "", topicsCmd, "--list")
	if got := strings.Fields(out.stdout); !slices.Equal(got, []string{"payments"}) {
		t.Fatalf("after deleting orders, kafka-topics --list printed %q", got)
	}
}

// The console producer's records come back through the console consumer
// with their partitions, offsets, keys, values and headers, from the hot
// tier and, once tiered with their local copies gone, from the cold one.
func TestKafkaConsoleRoundTrip(t *testing.T) {
	s := serve(t)
	_, adm := client(t, s)
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "events"); err != nil {
		t.Fatal(err)
	}
	var in, want []string
	for i := 0; i < 200; i++ {
		in = append(in, fmt.Sprintf("trace:t%d\tk%d\tvalue %d %s", i, i, i, strings.Repeat("y", 30)))
		want = append(want, fmt.Sprintf("Partition:0\tOffset:%d\ttrace:t%d\tk%d\tvalue %d %s", i, i, i, i, strings.Repeat("y", 30)))
	}
	// Two runs, so a segment seals between them.
	for _, part := range [][]string{in[:100], in[100:]} {
		run(t, s.Kafka, 0, strings.Join(part, "\n")+"\n", producerCmd, "--topic", "events",
			"--reader-property", "parse.key=true", "--reader-property", "parse.headers=true",
			"--reader-property", "key.separator=\t", "--reader-property", "headers.delimiter=\t")
	}
	consume := func(what string) {
		t.Helper()
		out := run(t, s.Kafka, 0, "", consumerCmd, "--topic", "events", "--from-beginning", "--max-messages", "200",
			"--formatter-property", "print.partition=true", "--formatter-property", "print.offset=true",
			"--formatter-property", "print.key=true", "--formatter-property", "print.headers=true")
		got := strings.Split(strings.TrimSuffix(out.stdout, "\n"), "\n")
		if !slices.Equal(got, want) {
			t.Fatalf("%s: the console consumer printed %d lines, the first %q; want %d, the first %q", what, len(got), got[0], len(want), want[0])
		}
		if !strings.Contains(out.stderr, "Processed a total of 200 messages") {
			t.Fatalf("%s: the console consumer did not report 200 messages:\n%s", what, out.stderr)
		}
	}
	consume("hot")
	tierAll(t, s, "events")
	consume("after tiering, local copies dropped")
}

// kafka-consumer-groups: list, describe (offsets and lag), reset offsets
// (to the earliest, to an offset, by a shift), delete a topic's offsets,
// delete the group; a group with a member cannot be deleted.
func TestKafkaConsumerGroups(t *testing.T) {
	s := serve(t)
	c, adm := client(t, s)
	if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "orders", 2, 20)
	// The console consumer reads 30 records in group billing and commits.
	run(t, s.Kafka, 0, "", consumerCmd, "--topic", "orders", "--group", "billing", "--from-beginning", "--max-messages", "30")

	out := run(t, s.Kafka, 0, "", groupsCmd, "--list")
	if got := strings.Fields(out.stdout); !slices.Equal(got, []string{"billing"}) {
		t.Fatalf("kafka-consumer-groups --list printed %q", got)
	}
	lag := func(what string, want map[string][3]string) {
		t.Helper()
		out := run(t, s.Kafka, 0, "", groupsCmd, "--describe", "--group", "billing")
		rows := table(t, out.stdout, "GROUP")
		got := map[string][3]string{}
		for _, r := range rows {
			if len(r) < 6 || r[0] != "billing" || r[1] != "orders" {
				t.Fatalf("%s: --describe row %q", what, r)
			}
			got[r[2]] = [3]string{r[3], r[4], r[5]} // current offset, log end, lag
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: --describe shows (current, end, lag) %v, want %v:\n%s", what, got, want, out.stdout)
		}
	}
	committed := 0
	out = run(t, s.Kafka, 0, "", groupsCmd, "--describe", "--group", "billing")
	for _, r := range table(t, out.stdout, "GROUP") {
		var n int
		fmt.Sscan(r[3], &n)
		committed += n
		if r[4] != "20" {
			t.Fatalf("--describe: log end %s of partition %s, want 20", r[4], r[2])
		}
	}
	if committed != 30 {
		t.Fatalf("the group committed %d records in all, it read 30:\n%s", committed, out.stdout)
	}

	out = run(t, s.Kafka, 0, "", groupsCmd, "--reset-offsets", "--group", "billing", "--topic", "orders", "--to-earliest", "--execute")
	if rows := table(t, out.stdout, "GROUP"); fmt.Sprint(rows) != "[[billing orders 0 0] [billing orders 1 0]]" {
		t.Fatalf("--reset-offsets --to-earliest printed %v", rows)
	}
	lag("after a reset to the earliest", map[string][3]string{"0": {"0", "20", "20"}, "1": {"0", "20", "20"}})
	run(t, s.Kafka, 0, "", groupsCmd, "--reset-offsets", "--group", "billing", "--topic", "orders:1", "--to-offset", "15", "--execute")
	run(t, s.Kafka, 0, "", groupsCmd, "--reset-offsets", "--group", "billing", "--topic", "orders:0", "--shift-by", "7", "--execute")
	lag("after a reset to offset 15 and a shift by 7", map[string][3]string{"0": {"7", "20", "13"}, "1": {"15", "20", "5"}})

	// A member in the group: its offsets cannot be reset, nor the group deleted.
	member, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		d, err := adm.DescribeGroups(ctx, "billing")
		if err == nil && d["billing"].State == "Stable" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the member never joined: %v %+v", err, d)
		}
		member.PollFetches(ctx) // joins
	}
	// The tool reports the failure on stdout and exits 0.
	out = run(t, s.Kafka, 0, "", groupsCmd, "--delete", "--group", "billing")
	if !strings.Contains(out.stdout, "Group 'billing' could not be deleted due to: org.apache.kafka.common.errors.GroupNotEmptyException: The group is not empty.") {
		t.Fatalf("deleting a group with a member printed:\n%s\n%s", out.stdout, out.stderr)
	}
	member.Close()

	out = run(t, s.Kafka, 0, "", groupsCmd, "--delete-offsets", "--group", "billing", "--topic", "orders:1")
	if rows := table(t, out.stdout, "TOPIC"); fmt.Sprint(rows) != "[[orders 1 Successful]]" {
		t.Fatalf("--delete-offsets printed %v", rows)
	}
	out = run(t, s.Kafka, 0, "", groupsCmd, "--describe", "--group", "billing", "--offsets")
	rows := table(t, out.stdout, "GROUP")
	if len(rows) != 1 || rows[0][2] != "0" {
		t.Fatalf("after deleting partition 1's offset, --describe shows %v", rows)
	}

	out = run(t, s.Kafka, 0, "", groupsCmd, "--delete", "--group", "billing")
	if !strings.Contains(out.stdout, "Deletion of requested consumer groups ('billing') was successful.") {
		t.Fatalf("--delete printed:\n%s", out.stdout)
	}
	out = run(t, s.Kafka, 0, "", groupsCmd, "--list")
	if got := strings.TrimSpace(out.stdout); got != "" {
		t.Fatalf("after --delete, --list printed %q", got)
	}
	out = run(t, s.Kafka, 0, "", groupsCmd, "--delete", "--group", "billing")
	if !strings.Contains(out.stdout, "Group 'billing' could not be deleted due to: org.apache.kafka.common.errors.GroupIdNotFoundException") {
		t.Fatalf("deleting a deleted group printed:\n%s\n%s", out.stdout, out.stderr)
	}
}

// kafka-get-offsets: the latest and earliest offsets and offsets by time,
// per partition, hot and after the older records went cold.
func TestKafkaGetOffsets(t *testing.T) {
	s := serve(t)
	c, adm := client(t, s)
	if _, err := adm.CreateTopic(context.Background(), 2, 1, nil, "clicks"); err != nil {
		t.Fatal(err)
	}
	produce(t, c, "clicks", 2, 300)
	check := func(what string) {
		t.Helper()
		for _, q := range []struct {
			args []string
			want []string
		}{
			{nil, []string{"clicks:0:300", "clicks:1:300"}},
			{[]string{"--time", "-1"}, []string{"clicks:0:300", "clicks:1:300"}},
			{[]string{"--time", "-2"}, []string{"clicks:0:0", "clicks:1:0"}},
			{[]string{"--time", "1700000000120"}, []string{"clicks:0:120", "clicks:1:120"}},
			{[]string{"--time", "-3"}, []string{"clicks:0:299", "clicks:1:299"}}, // the largest timestamp's
			{[]string{"--partitions", "1", "--time", "-2"}, []string{"clicks:1:0"}},
		} {
			out := run(t, s.Kafka, 0, "", offsetsCmd, append([]string{"--topic", "clicks"}, q.args...)...)
			if got := strings.Fields(out.stdout); !slices.Equal(got, q.want) {
				t.Fatalf("%s: kafka-get-offsets %s printed %q, want %q", what, strings.Join(q.args, " "), got, q.want)
			}
		}
	}
	check("hot")
	tierAll(t, s, "clicks")
	check("after tiering, local copies dropped")
}

// configsOf reads kafka-configs --describe: the header line, then each
// config as "name=value sensitive=false synonyms={...}", by name.
func configsOf(t *testing.T, out, header string) map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 || lines[0] != header {
		t.Fatalf("kafka-configs --describe printed, without %q first:\n%s", header, out)
	}
	got := map[string]string{}
	for _, l := range lines[1:] {
		name, rest, ok := strings.Cut(strings.TrimSpace(l), "=")
		if !ok {
			t.Fatalf("kafka-configs --describe: line %q is no config", l)
		}
		got[name] = rest
	}
	return got
}

// kafka-configs on a topic: describe (the overrides, and --all with the
// source of each value and its synonyms: the topic's, the broker settings
// serve sets, the defaults), --add-config and --delete-config, and the
// broker's own error for a value it refuses, which changes nothing; on a
// broker: the settings topics fall back to, by Kafka's broker names.
func TestKafkaConfigs(t *testing.T) {
	s := serve(t)
	_, adm := client(t, s)
	if _, err := adm.CreateTopic(context.Background(), 1, 1, nil, "orders"); err != nil {
		t.Fatal(err)
	}
	topic := []string{"--entity-type", "topics", "--entity-name", "orders"}
	describe := func(all bool) map[string]string {
		t.Helper()
		args := append(slices.Clone(topic), "--describe")
		header := "Dynamic configs for topic orders are:"
		if all {
			args, header = append(args, "--all"), "All configs for topic orders are:"
		}
		return configsOf(t, run(t, s.Kafka, 0, "", configsCmd, args...).stdout, header)
	}
	if got := describe(false); len(got) != 0 {
		t.Fatalf("a new topic has overrides: %v", got)
	}
	all := describe(true)
	var names []string
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	var want []string
	for _, k := range topicconfig.Keys {
		want = append(want, k.Name)
	}
	if !slices.Equal(names, want) {
		t.Fatalf("--describe --all lists %q, want every topic config %q", names, want)
	}
	for name, line := range map[string]string{
		// serve sets segment.max_bytes: the broker's value over Kafka's default.
		"segment.bytes": "4096 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=4096, DEFAULT_CONFIG:log.segment.bytes=1073741824}",
		// strata's broker always has a cold tier.
		"remote.storage.enable": "true sensitive=false synonyms={STATIC_BROKER_CONFIG:remote.log.storage.system.enable=true}",
		"local.retention.ms":    "0 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.local.retention.ms=0, DEFAULT_CONFIG:log.local.retention.ms=-2}",
		"retention.bytes":       "-1 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.bytes=-1}",
		"cleanup.policy":        "delete sensitive=false synonyms={DEFAULT_CONFIG:log.cleanup.policy=delete}",
		"strata.engine":         "segment sensitive=false synonyms={DEFAULT_CONFIG:engine.default=segment}",
		"strata.parquet.codec":  "zstd sensitive=false synonyms={DEFAULT_CONFIG:tiering.codec=zstd}",
		// The log cleaner's configs, as Kafka shows them (docs/compaction.md).
		"min.cleanable.dirty.ratio": "0.5 sensitive=false synonyms={DEFAULT_CONFIG:log.cleaner.min.cleanable.ratio=0.5}",
		"delete.retention.ms":       "86400000 sensitive=false synonyms={DEFAULT_CONFIG:log.cleaner.delete.retention.ms=86400000}",
	} {
		if all[name] != line {
			t.Fatalf("--describe --all: %s=%s, want %s=%s", name, all[name], name, line)
		}
	}

	out := run(t, s.Kafka, 0, "", configsCmd, append(slices.Clone(topic), "--alter",
		"--add-config", "retention.ms=3600000,strata.parquet.codec=snappy,local.retention.bytes=10000")...)
	if strings.TrimSpace(out.stdout) != "Completed updating config for topic orders." {
		t.Fatalf("--alter --add-config printed:\n%s", out.stdout)
	}
	overrides := map[string]string{
		"local.retention.bytes": "10000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:local.retention.bytes=10000, DEFAULT_CONFIG:log.local.retention.bytes=-2}",
		"retention.ms":          "3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000, STATIC_BROKER_CONFIG:log.retention.ms=-1}",
		"strata.parquet.codec":  "snappy sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:strata.parquet.codec=snappy, DEFAULT_CONFIG:tiering.codec=zstd}",
	}
	if got := describe(false); !maps.Equal(got, overrides) {
		t.Fatalf("after --add-config, --describe shows %v, want %v", got, overrides)
	}
	if got := describe(true)["retention.ms"]; got != overrides["retention.ms"] {
		t.Fatalf("after --add-config, --describe --all shows retention.ms=%s", got)
	}
	// What the tool shows is what the topic follows: the operator view agrees.
	if view := httpGet(t, "http://"+s.Admin+"/v1/topics/orders"); !strings.Contains(view, `"strata.parquet.codec"`) || !strings.Contains(view, `"snappy"`) {
		t.Fatalf("the operator view of orders does not show the codec set:\n%s", view)
	}

	run(t, s.Kafka, 0, "", configsCmd, append(slices.Clone(topic), "--alter", "--delete-config", "strata.parquet.codec")...)
	delete(overrides, "strata.parquet.codec")
	if got := describe(false); !maps.Equal(got, overrides) {
		t.Fatalf("after --delete-config, --describe shows %v, want %v", got, overrides)
	}
	if got := describe(true)["strata.parquet.codec"]; got != "zstd sensitive=false synonyms={DEFAULT_CONFIG:tiering.codec=zstd}" {
		t.Fatalf("after --delete-config, the codec is back to the default: %s", got)
	}

	// Refused by the broker: the tool exits 1 and prints the broker's
	// message naming the key; the topic keeps its configs.
	for _, c := range []struct{ set, want string }{
		{"retention.ms=abc", "InvalidConfigurationException: Invalid value abc for configuration retention.ms: Not a number of type LONG"},
		{"segment.bytes=100", "InvalidConfigurationException: Invalid value 100 for configuration segment.bytes: Value must be at least 1048576"},
		{"cleanup.policy=compact", "InvalidConfigurationException: Invalid value compact for configuration cleanup.policy: strata does not compact logs yet: use delete"},
		{"no.such.key=1", "InvalidConfigurationException: Unknown topic config name: no.such.key"},
		{"strata.engine=memory", "InvalidConfigurationException: Invalid value memory for configuration strata.engine: it is fixed when the topic is created"},
	} {
		out := run(t, s.Kafka, 1, "", configsCmd, append(slices.Clone(topic), "--alter", "--add-config", c.set)...)
		if !strings.Contains(out.stdout+out.stderr, "Caused by: org.apache.kafka.common.errors."+c.want) {
			t.Fatalf("--add-config %s printed, without %q:\n%s\n%s", c.set, c.want, out.stdout, out.stderr)
		}
		if got := describe(false); !maps.Equal(got, overrides) {
			t.Fatalf("after the refused --add-config %s, --describe shows %v, want %v", c.set, got, overrides)
		}
	}

	// The broker: no dynamic configs; --all lists the settings topics
	// fall back to, under Kafka's broker names (strata's for its own).
	out = run(t, s.Kafka, 0, "", configsCmd, "--entity-type", "brokers", "--entity-name", "0", "--describe")
	if got := configsOf(t, out.stdout, "Dynamic configs for broker 0 are:"); len(got) != 0 {
		t.Fatalf("broker 0 has dynamic configs %v", got)
	}
	out = run(t, s.Kafka, 0, "", configsCmd, "--entity-type", "brokers", "--entity-name", "0", "--describe", "--all")
	broker := configsOf(t, out.stdout, "All configs for broker 0 are:")
	for name, line := range map[string]string{
		"log.segment.bytes":                "4096 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.segment.bytes=4096, DEFAULT_CONFIG:log.segment.bytes=1073741824}",
		"log.retention.bytes":              "-1 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.bytes=-1}",
		"message.max.bytes":                "1048588 sensitive=false synonyms={DEFAULT_CONFIG:message.max.bytes=1048588}",
		"remote.log.storage.system.enable": "true sensitive=false synonyms={STATIC_BROKER_CONFIG:remote.log.storage.system.enable=true}",
		"engine.default":                   "segment sensitive=false synonyms={DEFAULT_CONFIG:engine.default=segment}",
		"tiering.row_group_bytes":          "1048576 sensitive=false synonyms={DEFAULT_CONFIG:tiering.row_group_bytes=1048576}",
	} {
		if broker[name] != line {
			t.Fatalf("broker 0 --describe --all: %s=%s, want %s=%s\n%s", name, broker[name], name, line, out.stdout)
		}
	}
	if want := len(topicconfig.DescribeBroker(nil)); len(broker) != want {
		t.Fatalf("broker 0 --describe --all lists %d settings, want the %d topic configs fall back to:\n%s", len(broker), want, out.stdout)
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	return string(body)
}
