package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"strata/internal/testsvc"
	"strata/registry"
	"strata/registry/storetest"
)

func etcdClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{testsvc.StartEtcd(t)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func open(t *testing.T, cli *clientv3.Client, prefix string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Config{Client: cli, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// The contract on a real etcd; a reopened store is another client on the
// same prefix, as another node (or this one restarted) would be.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (registry.Store, func() registry.Store) {
		prefix := "/" + testsvc.UniquePrefix(t)
		s := open(t, etcdClient(t), prefix)
		return s, func() registry.Store { return open(t, etcdClient(t), prefix) }
	})
}

// Revision follows commits made through another client, which is how a
// node learns that another node changed the registry.
func TestRevisionSeesAnotherWriter(t *testing.T) {
	ctx := context.Background()
	prefix := "/" + testsvc.UniquePrefix(t)
	a, b := open(t, etcdClient(t), prefix), open(t, etcdClient(t), prefix)
	for want := uint64(1); want <= 3; want++ {
		if _, err := a.Commit(ctx, want-1, []registry.Write{{Key: "next_id", Value: fmt.Appendf(nil, "%d", want)}}); err != nil {
			t.Fatal(err)
		}
		if rev, err := b.Revision(ctx); err != nil || rev != want {
			t.Fatalf("the other store's revision: %d, %v; want %d", rev, err, want)
		}
	}
}

// A change etcd would refuse for its size is refused naming the limit,
// and writes nothing.
func TestLimitsNamed(t *testing.T) {
	ctx := context.Background()
	s := open(t, etcdClient(t), "/"+testsvc.UniquePrefix(t))
	many := make([]registry.Write, MaxTxnOps)
	for i := range many {
		many[i] = registry.Write{Key: fmt.Sprintf("version/s/%010d", i), Value: []byte("{}")}
	}
	for _, tc := range []struct {
		name   string
		writes []registry.Write
		want   string
	}{
		{"too many keys", many, "max-txn-ops"},
		// Past etcd's 1.5 MiB, and past the client's 2 MiB.
		{"too many bytes for etcd", []registry.Write{{Key: "schema/1", Value: []byte(strings.Repeat("x", 1600<<10))}}, "max-request-bytes"},
		{"too many bytes for the client", []registry.Write{{Key: "schema/1", Value: []byte(strings.Repeat("x", 3<<20))}}, "max-request-bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Commit(ctx, 0, tc.writes)
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, registry.ErrConflict) || !errors.Is(err, registry.ErrTooLarge) {
				t.Fatalf("commit: %v; want ErrTooLarge naming %s", err, tc.want)
			}
			if kv, rev, err := s.Load(ctx); err != nil || len(kv) != 0 || rev != 0 {
				t.Fatalf("after the refused commit: %d keys at %d, %v; want none at 0", len(kv), rev, err)
			}
		})
	}
}
