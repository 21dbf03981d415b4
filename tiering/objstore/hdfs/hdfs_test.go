package hdfs_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	hdfsclient "github.com/colinmarc/hdfs/v2"

	"strata/internal/testsvc"
	"strata/tiering/objstore"
	"strata/tiering/objstore/hdfs"
	"strata/tiering/objstore/objtest"
)

func TestContract(t *testing.T) {
	nn := testsvc.StartHDFS(t)
	at := func(t *testing.T, root string) objstore.Bucket {
		b, err := hdfs.New(hdfs.Config{NameNodes: []string{nn}, Root: root})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	roots := map[objstore.Bucket]string{}
	objtest.Run(t, func(t *testing.T) objstore.Bucket {
		root := "/" + testsvc.UniquePrefix(t)
		b := at(t, root)
		roots[b] = root
		return b
	}, objtest.Options{
		// The minicluster's blocks are 4 MiB: this spans three.
		LargeSize: 11 << 20,
		// Another node's client of the same NameNode and root.
		Peer: func(t *testing.T, b objstore.Bucket) objstore.Bucket { return at(t, roots[b]) },
	})
}

func TestUnreachableNameNode(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	start := time.Now()
	b, err := hdfs.New(hdfs.Config{NameNodes: []string{addr}, Root: "/x", DialTimeout: 2 * time.Second})
	if err == nil {
		err = b.Check(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), addr) {
		t.Fatalf("an unreachable NameNode gave %v; want an error naming %s", err, addr)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("an unreachable NameNode took %s to report", d)
	}
}

func TestRelativeRootRefused(t *testing.T) {
	if _, err := hdfs.New(hdfs.Config{NameNodes: []string{"127.0.0.1:1"}, Root: "relative"}); err == nil || !strings.Contains(err.Error(), "relative") {
		t.Fatalf("a relative root: %v", err)
	}
}

// A staged upload a dead process left is swept once old; a fresh one stays.
func TestSweepTemp(t *testing.T) {
	nn := testsvc.StartHDFS(t)
	root := "/" + testsvc.UniquePrefix(t)
	b, err := hdfs.New(hdfs.Config{NameNodes: []string{nn}, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Check(context.Background()); err != nil { // creates the staging folder
		t.Fatal(err)
	}
	c, err := hdfsclient.NewClient(hdfsclient.ClientOptions{Addresses: []string{nn}, User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, name := range []string{"upload-dead", "upload-live"} {
		if err := c.CreateEmptyFile(root + "/" + objstore.TempDir + "/" + name); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := c.Chtimes(root+"/"+objstore.TempDir+"/upload-dead", old, old); err != nil {
		t.Fatal(err)
	}
	n, err := b.SweepTemp(context.Background(), time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("SweepTemp = %d, %v; want the one stale file", n, err)
	}
	if _, err := c.Stat(root + "/" + objstore.TempDir + "/upload-live"); err != nil {
		t.Fatalf("a fresh staged upload was swept: %v", err)
	}
}
