package kafka

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"strata/engine/memory"
)

// Whatever SASL bytes a client sends before it is authenticated, the
// server answers or refuses them: never a panic, never a login.
func FuzzSASLAuthenticate(f *testing.F) {
	f.Add("SCRAM-SHA-256", []byte("n,,n=writer,r=abc"), []byte("c=biws,r=abcdef,p=AAAA"))
	f.Add("SCRAM-SHA-512", []byte("n,,n=writer,r=abc"), []byte("c=biws,r=abc,p="))
	f.Add("SCRAM-SHA-256", []byte("y,a=x,n=writer,r=abc,m=1"), []byte(",,,"))
	f.Add("PLAIN", []byte("\x00writer\x00nope"), []byte("\x00\x00"))
	srv := New(memory.New(100), Config{Logger: quiet, Auth: authConfig(f, "")})
	f.Fuzz(func(t *testing.T, mech string, first, final []byte) {
		ss := srv.newSession("fuzz")
		hs := kmsg.NewPtrSASLHandshakeRequest()
		hs.Version, hs.Mechanism = 1, mech
		srv.handleSession(ss, hs, clientInfo{})
		for _, b := range [][]byte{first, final} {
			auth := kmsg.NewPtrSASLAuthenticateRequest()
			auth.SASLAuthBytes = b
			srv.handleSession(ss, auth, clientInfo{})
		}
		if ss.user != "" {
			t.Fatalf("fuzzed bytes logged in as %q", ss.user)
		}
	})
}
