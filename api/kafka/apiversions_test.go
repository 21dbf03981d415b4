package kafka

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/segment"
)

// ApiVersions advertises exactly what strata answers: every advertised API
// has a handler (SASL and SCRAM requests: the session's, sasl.go) and a
// rule saying who may call it (authz.go), and no API with a handler goes
// unadvertised. A client picks what to send from ApiVersions alone.
func TestApiVersionsAdvertisesWhatIsServed(t *testing.T) {
	e, err := segment.Open(segment.Config{Dir: t.TempDir(), Workers: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	auth, err := NewAuth(AuthConfig{Mechanisms: []string{MechPlain}, Users: []User{{Name: "root", Password: "pw", Permissions: []Permission{{Operation: OpAdmin}}}}})
	if err != nil {
		t.Fatal(err)
	}
	srv := New(e, Config{Logger: quiet, MaxFetchWait: time.Millisecond, Auth: auth})
	defer srv.Shutdown(context.Background())
	bySession := map[int16]bool{17: true, 36: true, 50: true, 51: true} // SaslHandshake, SaslAuthenticate, SCRAM users

	served := 0
	for key := int16(0); key < 256; key++ {
		req := kmsg.RequestForKey(key)
		if req == nil {
			continue
		}
		name := kmsg.NameForKey(key)
		v, advertised := supportedVersions[key]
		if bySession[key] {
			if !advertised {
				t.Errorf("%s (%d) is answered by the session but not advertised", name, key)
			}
			continue
		}
		if advertised {
			req.SetVersion(v.max)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp := srv.handle(req, clientInfo{ctx: ctx})
		_, missing := resp.(unhandled)
		switch {
		case advertised && missing:
			t.Errorf("%s (%d) is advertised (v%d-%d) but has no handler", name, key, v.min, v.max)
		case !advertised && !missing:
			t.Errorf("%s (%d) has a handler but is not advertised", name, key)
		case advertised:
			served++
			if v.min < 0 || v.max < v.min || v.max > req.MaxVersion() {
				t.Errorf("%s (%d) is advertised as v%d-%d; kmsg speaks it up to v%d", name, key, v.min, v.max, req.MaxVersion())
			}
			ss := &session{auth: auth, user: "root"}
			if key != apiVersionsKey {
				req = kmsg.RequestForKey(key)
				req.SetVersion(v.max)
				if _, err := srv.authorized(ss, req, clientInfo{ctx: ctx}); err != nil && strings.Contains(err.Error(), "no authorization rule") {
					t.Errorf("%s (%d) is served but has no authorization rule: %v", name, key, err)
				}
			}
		}
		cancel()
	}
	if served != len(supportedVersions)-len(bySession) {
		t.Fatalf("%d of the %d advertised APIs answered by a handler", served, len(supportedVersions)-len(bySession))
	}
}
