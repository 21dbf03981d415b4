package testsvc

import (
	"context"
	"database/sql"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// The harness itself: every service make test promises is up and answering.
func TestServicesAnswer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	m := StartMinIO(t)
	if _, err := m.Client(t).ListBuckets(ctx); err != nil {
		t.Errorf("MinIO at %s does not answer ListBuckets: %v", m.Endpoint, err)
	}

	nn := StartHDFS(t)
	if !strings.HasPrefix(nn, "127.0.0.1:") {
		t.Errorf("NameNode %s is not on loopback", nn)
	}
	conn, err := net.DialTimeout("tcp", nn, 5*time.Second)
	if err != nil {
		t.Errorf("NameNode at %s: %v", nn, err)
	} else {
		conn.Close()
	}

	pg, err := sql.Open("pgx", StartPostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	var one int
	if err := pg.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Errorf("PostgreSQL does not answer SELECT 1: %d, %v", one, err)
	}
	pg.Close()

	etcd := StartEtcd(t)
	resp, err := http.Get("http://" + etcd + "/health")
	if err != nil {
		t.Fatalf("etcd at %s: %v", etcd, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `"health":"true"`) {
		t.Errorf("etcd at %s /health = %s", etcd, body)
	}
}
