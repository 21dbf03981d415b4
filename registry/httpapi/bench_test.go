package httpapi

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"strata/bench"
)

// Schema lookups by id (what a consumer's deserializer asks for each new
// id it meets) through the REST API, beside a plain GET of the same server
// (GET /, a constant answer: the HTTP, routing and metrics without the
// registry), each from 8 clients at once for a while: requests per second
// and the p99 latency.
func BenchmarkRegistryLookup(b *testing.B) {
	srv, _ := serve(b)
	const schemas = 1000
	for i := range schemas {
		body := fmt.Sprintf(`{"schema": %s}`, q(fmt.Sprintf(`{"type":"record","name":"R%d","fields":[{"name":"id","type":"long"}]}`, i)))
		resp, err := http.Post(srv.URL+fmt.Sprintf("/subjects/s%d/versions", i), ContentType, strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("registering schema %d: %s", i, resp.Status)
		}
	}
	const clients, span = 8, 3 * time.Second
	load := func(path func(*rand.Rand) string) (perSec float64, p99 time.Duration) {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		end := time.Now().Add(span)
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), 1))
				var mine []time.Duration
				for time.Now().Before(end) {
					began := time.Now()
					resp, err := srv.Client().Get(srv.URL + path(rng))
					if err != nil {
						b.Error(err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						b.Errorf("GET: %s", resp.Status)
						return
					}
					mine = append(mine, time.Since(began))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			}()
		}
		wg.Wait()
		return float64(len(lat)) / span.Seconds(), bench.Percentile(lat, 99)
	}
	plain := func(*rand.Rand) string { return "/" }
	lookup := func(rng *rand.Rand) string { return fmt.Sprintf("/schemas/ids/%d", 1+rng.IntN(schemas)) }
	load(lookup) // warm
	plainRate, plainP99 := load(plain)
	rate, p99 := load(lookup)
	const cmd = "make bench (go test -bench RegistryLookup ./registry/httpapi)"
	bench.Must(b, cmd, bench.Figure{Name: "schema registry lookups by id, 8 clients", Value: rate / 1000, Unit: "k/s",
		Reference: "a plain GET of the same server", ReferenceValue: plainRate / 1000, Runs: 1})
	bench.Must(b, cmd, bench.Figure{Name: "schema registry lookup by id p99, 8 clients", Value: float64(p99.Microseconds()) / 1000, Unit: "ms",
		Reference: "a plain GET of the same server", ReferenceValue: float64(plainP99.Microseconds()) / 1000, Runs: 1})
}
