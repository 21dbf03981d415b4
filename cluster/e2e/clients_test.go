package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"strata/internal/testsvc"
)

// The Java client (kafka-clients from Maven) and kcat, as users run them,
// against a topic whose partitions three nodes lead: the Java producer
// bootstraps from one node and its consumer from another, and reads back
// every record it had acknowledged; kcat lists the same brokers and
// leaders from each node, and reads the same records through a third.
func TestJavaClientAndKcatAcrossNodes(t *testing.T) {
	c := newCluster(t, 3)
	createTopic(t, c.client(1), "mixed", 6)
	leaders := c.leaders(1, "mixed", func(brokers int, l []int32) bool { return brokers == 3 && allLed(brokers, l) })
	if distinct(leaders) != 3 {
		t.Fatalf("6 partitions on 3 nodes are led by %v: the test would not cross nodes", leaders)
	}

	const n = 300
	out := runJava(t, "ClusterClient", c.nodes[1].Kafka, c.nodes[3].Kafka, "mixed", strconv.Itoa(n))
	h := newHistory()
	type ack struct {
		value string
		p     int32
		o     int64
	}
	var acks []ack
	javaLeaders := map[int32]int32{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			continue
		}
		p, err1 := strconv.ParseInt(f[1], 10, 32)
		o, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		switch {
		case f[0] == "leader":
			javaLeaders[int32(p)] = int32(o)
		case f[0] == "ack" && len(f) == 4:
			acks = append(acks, ack{f[3], int32(p), o})
			h.ack(f[3], int32(p), o)
		case f[0] == "read" && len(f) == 4:
			h.readBack(f[3], int32(p), o)
		}
	}
	for p, l := range leaders {
		if javaLeaders[int32(p)] != l {
			t.Errorf("the Java client sees partition %d led by %d, Metadata by %d", p, javaLeaders[int32(p)], l)
		}
	}
	if len(acks) != n {
		t.Errorf("the Java producer reports %d acknowledgements of %d records", len(acks), n)
	}
	t.Logf("Java: %d records acknowledged through node 1, read back through node 3", h.check(t))

	kcat := testsvc.Tool(t, "kcat")
	for id, node := range c.nodes {
		md := kcatMetadata(t, kcat, node.Kafka, "mixed")
		if len(md.Brokers) != 3 || len(md.Topics) != 1 || len(md.Topics[0].Partitions) != 6 {
			t.Fatalf("kcat -L through node %d: %+v", id, md)
		}
		for _, p := range md.Topics[0].Partitions {
			if p.Leader != leaders[p.Partition] {
				t.Errorf("kcat -L through node %d: partition %d led by %d, want %d", id, p.Partition, p.Leader, leaders[p.Partition])
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := exec.CommandContext(ctx, kcat, "-b", c.nodes[2].Kafka, "-t", "mixed", "-C", "-o", "beginning", "-e", "-q",
		"-f", "%p %o %s\n").CombinedOutput()
	if err != nil {
		t.Fatalf("kcat -C through node 2: %v\n%s", err, got)
	}
	hk := newHistory()
	for _, a := range acks {
		hk.ack(a.value, a.p, a.o)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(got)), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("kcat -C printed %q", line)
		}
		p, _ := strconv.ParseInt(f[0], 10, 32)
		o, _ := strconv.ParseInt(f[1], 10, 64)
		hk.readBack(f[2], int32(p), o)
	}
	t.Logf("kcat: the Java client's %d records read back through node 2", hk.check(t))
}

func distinct(xs []int32) int {
	m := map[int32]bool{}
	for _, x := range xs {
		m[x] = true
	}
	return len(m)
}

// kcatMetadata is `kcat -L -J` through one broker.
type kcatMD struct {
	Brokers []struct {
		ID   int32  `json:"id"`
		Name string `json:"name"`
	} `json:"brokers"`
	Topics []struct {
		Topic      string `json:"topic"`
		Partitions []struct {
			Partition int32 `json:"partition"`
			Leader    int32 `json:"leader"`
		} `json:"partitions"`
	} `json:"topics"`
}

func kcatMetadata(t *testing.T, kcat, broker, topic string) kcatMD {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcat, "-b", broker, "-L", "-J", "-t", topic).Output()
	var md kcatMD
	if err == nil {
		err = json.Unmarshal(out, &md)
	}
	if err != nil {
		t.Fatalf("kcat -L -J through %s: %v\n%s", broker, err, out)
	}
	return md
}

// runJava compiles testdata/java/CLASS.java against kafka-clients (the
// jars scripts/jars resolves from Maven for the Kafka peer) and runs it,
// returning its standard output; it fails the test unless it exits 0.
func runJava(t *testing.T, class string, args ...string) string {
	t.Helper()
	cp, err := exec.Command("../../scripts/jars", "kafka").Output()
	if err != nil {
		var exit *exec.ExitError
		errors.As(err, &exit)
		t.Fatalf("scripts/jars kafka: %v\n%s", err, exit.Stderr)
	}
	classpath := strings.TrimSpace(string(cp))
	classes := t.TempDir()
	if out, err := exec.Command("javac", "-d", classes, "-cp", classpath, "testdata/java/"+class+".java").CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "java", append([]string{"-cp", classes + ":" + classpath, class}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("java %s: %v\n%s\n%s", class, err, lastLines(string(out), 20), lastLines(stderr.String(), 40))
	}
	return string(out)
}

func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
