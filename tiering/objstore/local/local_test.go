package local_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"strata/tiering/objstore"
	"strata/tiering/objstore/local"
	"strata/tiering/objstore/objtest"
)

func open(t *testing.T) objstore.Bucket {
	b, err := local.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// peer opens the folder again, as another node's process sharing it does.
func peer(t *testing.T, b objstore.Bucket) objstore.Bucket {
	p, err := local.New(b.(*local.Bucket).Root())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestContract(t *testing.T) {
	objtest.Run(t, open, objtest.Options{Peer: peer})
}

// The decorators must keep every promise of the backend they wrap.
func TestContractDecorated(t *testing.T) {
	m := objstore.NewMetrics(prometheus.NewRegistry())
	decorate := func(b objstore.Bucket) objstore.Bucket {
		return m.Instrument(objstore.WithRetries(b, objstore.RetryPolicy{}))
	}
	roots := map[objstore.Bucket]objstore.Bucket{} // decorated -> the local bucket under it
	objtest.Run(t, func(t *testing.T) objstore.Bucket {
		b := open(t)
		d := decorate(b)
		roots[d] = b
		return d
	}, objtest.Options{Peer: func(t *testing.T, d objstore.Bucket) objstore.Bucket { return decorate(peer(t, roots[d])) }})
}

func TestUnwritableFolder(t *testing.T) {
	if _, err := local.New("/proc/strata-cannot-be-here"); err == nil {
		t.Fatal("New on a folder that cannot be created succeeded")
	}
}
