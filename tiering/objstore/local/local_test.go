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
	objtest.Run(t, func(t *testing.T) objstore.Bucket {
		return m.Instrument(objstore.WithRetries(open(t), objstore.RetryPolicy{}))
	}, objtest.Options{})
}

func TestUnwritableFolder(t *testing.T) {
	if _, err := local.New("/proc/strata-cannot-be-here"); err == nil {
		t.Fatal("New on a folder that cannot be created succeeded")
	}
}
