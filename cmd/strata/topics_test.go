package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"strata/api/admin"
	"strata/internal/testsvc"
)

// Each topic's tiering and retention configs are honoured by `strata
// serve`, given at creation through the Kafka Admin API or changed at
// runtime with `strata topic alter`, and they survive a restart:
//   - remote.storage.enable=false: the topic never tiers;
//   - local.retention.ms=0: local copies go right after their upload, and
//     only then (the broker's tiering.local_retention keeps them an hour);
//   - retention.ms, set at runtime: cold objects past it are deleted and
//     the low watermark rises past them;
//   - segment.bytes: the topic's segments roll at its own size.
func TestTopicConfigsHonoured(t *testing.T) {
	sets := []string{"segment.max_bytes=4KiB", "segment.roll_check_interval=5", "tiering.enabled=false",
		"tiering.min_sealed_age=0s", "tiering.local_retention=1h", "iceberg.file_delete_delay=0s"}
	s := startServe(t, sets...)
	dir := strings.TrimPrefix(s.sets[0], "data_dir=")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(s.Kafka))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	str := func(v string) *string { return &v }
	for topic, cfgs := range map[string]map[string]*string{
		"tiered":   nil,
		"local":    {"remote.storage.enable": str("false")},
		"dropped":  {"local.retention.ms": str("0")},
		"expiring": nil,
		"bigsegs":  {"segment.bytes": str("1048576")},
	} {
		resp, err := adm.CreateTopic(ctx, 1, 1, cfgs, topic)
		if err != nil || resp.Err != nil {
			t.Fatalf("create %s: %v %v", topic, err, resp.Err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	for _, topic := range []string{"tiered", "local", "dropped", "expiring", "bigsegs"} {
		for i := 0; i < 200; i++ {
			r := &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("%s-%03d %s", topic, i, strings.Repeat("p", 40))), Timestamp: old}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	tierRun := func() {
		t.Helper()
		var out strings.Builder
		if err := tierCmd([]string{"run", "--admin-addr", s.Admin}, &out); err != nil {
			t.Fatalf("strata tier run: %v\n%s", err, out.String())
		}
	}
	view := func(topic string) admin.PartitionView {
		t.Helper()
		var v admin.TopicView
		if err := adminCall(s.Admin, "GET", "/v1/topics/"+topic, nil, &v); err != nil || len(v.Partitions) != 1 {
			t.Fatalf("GET /v1/topics/%s: %v %+v", topic, err, v)
		}
		return v.Partitions[0]
	}
	tierRun()

	if p := view("tiered"); p.ColdSegments == 0 || p.WarmBytes == 0 || p.TieredUpTo < 0 {
		t.Errorf("tiered: %+v: want cold segments whose local copies stay (tiering.local_retention=1h)", p)
	}
	if p := view("local"); p.ColdSegments != 0 || p.TieringLagBytes == 0 || p.TieredUpTo != -1 {
		t.Errorf("local (remote.storage.enable=false): %+v: want nothing tiered, its sealed bytes local", p)
	}
	if n := countFiles(t, filepath.Join(dir, "cold", "topic=local")); n != 0 {
		t.Errorf("local (remote.storage.enable=false): %d files in the bucket", n)
	}
	if p := view("dropped"); p.ColdSegments == 0 || p.WarmBytes != 0 || p.LocalSegments != 1 {
		t.Errorf("dropped (local.retention.ms=0): %+v: want every sealed segment cold and its local copy gone", p)
	}
	if p := view("bigsegs"); p.ColdSegments != 0 && p.LocalSegments+p.ColdSegments > 1 {
		t.Errorf("bigsegs (segment.bytes=1MiB): %+v: want its 11KB in one active segment", p)
	}
	before := view("expiring")
	if before.ColdSegments == 0 || before.LowWatermark != 0 {
		t.Fatalf("expiring before its retention.ms: %+v", before)
	}

	// Changed at runtime, through the CLI; the next pass applies it.
	var out strings.Builder
	if err := topicCmd([]string{"alter", "expiring", "--set", "retention.ms=3600000", "--admin-addr", s.Admin}, &out); err != nil {
		t.Fatalf("strata topic alter: %v\n%s", err, out.String())
	}
	if !regexpLine(out.String(), `retention.ms\s+3600000\s+DYNAMIC_TOPIC_CONFIG`) {
		t.Fatalf("strata topic alter printed:\n%s", out.String())
	}
	tierRun()
	after := view("expiring")
	if after.ColdSegments != 0 || int64(after.LowWatermark) <= before.TieredUpTo || after.LowWatermark == 0 {
		t.Errorf("expiring after retention.ms=1h on records 2h old: %+v: want no cold segment left and the low watermark past them (tiered up to %d)", after, before.TieredUpTo)
	}
	// The manifest stays, and the topic's table (in _iceberg/), empty.
	if n := countFiles(t, filepath.Join(dir, "cold", "topic=expiring"), "_iceberg"); n > 1 {
		t.Errorf("expiring: %d files left in the bucket", n)
	}

	// Refusals name the key and why.
	err = topicCmd([]string{"alter", "expiring", "--set", "retention.ms=abc", "--admin-addr", s.Admin}, &out)
	if err == nil || err.Error() != "Invalid value abc for configuration retention.ms: Not a number of type LONG" {
		t.Errorf("alter retention.ms=abc: %v", err)
	}
	err = topicCmd([]string{"alter", "expiring", "--set", "cleanup.policy=compact", "--admin-addr", s.Admin}, &out)
	if err == nil || !strings.Contains(err.Error(), "strata does not compact logs yet") {
		t.Errorf("alter cleanup.policy=compact: %v", err)
	}
	if err := topicCmd([]string{"describe", "nosuch", "--admin-addr", s.Admin}, &out); err == nil || !strings.Contains(err.Error(), "unknown topic") {
		t.Errorf("describe a topic that does not exist: %v", err)
	}

	// The configs are in the catalog: a restart keeps them.
	cl.Close()
	if err := s.stop(); err != nil {
		t.Fatal(err)
	}
	s = startServe(t, append([]string{"data_dir=" + dir, "cold.local.dir=" + dir + "/cold"}, sets...)...)
	out.Reset()
	if err := topicCmd([]string{"describe", "local", "--admin-addr", s.Admin}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`remote.storage.enable\s+false\s+DYNAMIC_TOPIC_CONFIG`, `segment.bytes\s+4096\s+STATIC_BROKER_CONFIG`,
		`max.message.bytes\s+1048588\s+DEFAULT_CONFIG`, `^\s+0\s+0\s+200\s`} {
		if !regexpLine(out.String(), want) {
			t.Errorf("strata topic describe local after a restart: no line like %q in\n%s", want, out.String())
		}
	}
}

func regexpLine(text, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, line := range strings.Split(text, "\n") {
		if re.MatchString(line) {
			return true
		}
	}
	return false
}

// The Java Admin client (kafka-clients, as Spark, Connect and Flink use it)
// creates a topic with configs and reads the configs CreateTopics answers,
// describes them with their sources and synonyms, alters them
// incrementally, is refused an invalid value, and describes the broker.
func TestJavaAdminClientTopicConfigs(t *testing.T) {
	s := startServe(t, "segment.max_bytes=8MiB")
	classes := t.TempDir()
	classpath := testsvc.Classpath(t, "kafka")
	if out, err := exec.Command("javac", "-d", classes, "-cp", classpath, "testdata/java/AdminConfigs.java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	raw, err := exec.CommandContext(ctx, "java", "-cp", classes+":"+classpath, "AdminConfigs", s.Kafka, "java.configs").CombinedOutput()
	out := string(raw)
	if err != nil {
		t.Fatalf("java AdminConfigs: %v\n%s", err, out)
	}
	for _, want := range []string{
		"created retention.ms=3600000 DYNAMIC_TOPIC_CONFIG",
		"created remote.storage.enable=false DYNAMIC_TOPIC_CONFIG",
		"created max.message.bytes=2000000 DYNAMIC_TOPIC_CONFIG",
		"created cleanup.policy=delete DEFAULT_CONFIG",
		"partitions 2 replication 1",
		"described retention.ms=3600000 DYNAMIC_TOPIC_CONFIG",
		"described segment.bytes=8388608 STATIC_BROKER_CONFIG",
		"synonyms segment.bytes 2 log.segment.bytes",
		"altered segment.ms=60000 DYNAMIC_TOPIC_CONFIG",
		"altered retention.ms=-1 STATIC_BROKER_CONFIG",
		"altered remote.storage.enable=false DYNAMIC_TOPIC_CONFIG",
		"refused: true Invalid value soon for configuration retention.ms: Not a number of type LONG",
		"broker log.segment.bytes=8388608 STATIC_BROKER_CONFIG",
		"broker message.max.bytes=1048588 DEFAULT_CONFIG",
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the Java Admin client did not see %q:\n%s", want, out)
		}
	}
}
