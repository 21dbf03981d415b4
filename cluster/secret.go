package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PeerSecret is the secret the nodes under prefix prove their replica
// requests to each other with (docs/replication.md, "Who is a peer"): 32
// random bytes, made by the first node that asks and kept in etcd, which
// only the nodes reach, so every node of the cluster reads the same one
// and nothing else knows it.
func PeerSecret(ctx context.Context, cli *clientv3.Client, prefix string) ([]byte, error) {
	key := normalizePrefix(prefix) + "/peer_secret"
	// Read first: a transaction that may put is refused while etcd's
	// NOSPACE alarm is raised, and a node restarted then must still read
	// the secret the cluster has.
	got, err := cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("cluster: the peer secret: %w", err)
	}
	if len(got.Kvs) == 1 {
		return decodeSecret(key, got.Kvs[0].Value)
	}
	fresh := make([]byte, 32)
	rand.Read(fresh)
	resp, err := cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, hex.EncodeToString(fresh))).
		Else(clientv3.OpGet(key)).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("cluster: the peer secret: %w", err)
	}
	if resp.Succeeded {
		return fresh, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) != 1 {
		return nil, fmt.Errorf("cluster: the peer secret %s: not found after it existed", key)
	}
	return decodeSecret(key, kvs[0].Value)
}

func decodeSecret(key string, v []byte) ([]byte, error) {
	secret, err := hex.DecodeString(string(v))
	if err != nil || len(secret) < 16 {
		return nil, fmt.Errorf("cluster: the peer secret %s is not 16 or more hex-encoded bytes", key)
	}
	return secret, nil
}
