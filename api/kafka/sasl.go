package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/xdg-go/scram"
)

// session is one connection's SASL state. A nil session (authentication
// off) lets every request through.
type session struct {
	auth   *Auth
	remote string
	mech   string                    // chosen by SaslHandshake
	conv   *scram.ServerConversation // a SCRAM exchange under way
	user   string                    // set once authenticated
	closed bool                      // answer this request, then close

	// the SCRAM exchange's first two messages, for librdkafka's final one
	// (scramcompat.go)
	clientFirst, serverFirst string
}

func (s *Server) newSession(remote string) *session {
	if s.cfg.Auth == nil {
		return nil
	}
	return &session{auth: s.cfg.Auth, remote: remote}
}

// closeAfterAnswer says the connection ends once the current answer is
// written (a failed authentication, as in Kafka).
func (ss *session) closeAfterAnswer() bool { return ss != nil && ss.closed }

// maxPreAuthBytes is the largest frame read before authentication: Kafka's
// sasl.server.max.receive.size (524288).
const maxPreAuthBytes = 512 << 10

// preAuth says whether the connection has yet to authenticate with SASL
// (never when authentication is off).
func (ss *session) preAuth() bool { return ss != nil && ss.user == "" }

// preAuthAPI says whether a request with this API key may be read before
// authentication: ApiVersions, SaslHandshake and SaslAuthenticate, as in
// Kafka.
func preAuthAPI(key int16) bool {
	return key == apiVersionsKey || key == saslHandshakeKey || key == saslAuthenticateKey
}

const (
	saslHandshakeKey    = 17
	saslAuthenticateKey = 36
)

// errUnauthenticated closes a connection that asks for anything but
// ApiVersions and SASL before authenticating, as Kafka does.
var errUnauthenticated = errors.New("request before SASL authentication")

// handleSession answers req for the connection's session: SASL requests
// here, everything else after authentication and authorization.
func (s *Server) handleSession(ss *session, req kmsg.Request, cl clientInfo) (kmsg.Response, error) {
	switch r := req.(type) {
	case *kmsg.ApiVersionsRequest:
		return s.handle(req, cl), nil
	case *kmsg.SASLHandshakeRequest:
		return s.saslHandshake(ss, r), nil
	case *kmsg.SASLAuthenticateRequest:
		return s.saslAuthenticate(ss, r), nil
	}
	if ss == nil {
		switch r := req.(type) {
		case *kmsg.DescribeUserSCRAMCredentialsRequest, *kmsg.AlterUserSCRAMCredentialsRequest:
			return s.scramAdmin(nil, r), nil
		}
		return s.handle(req, cl), nil
	}
	if ss.user == "" {
		return nil, fmt.Errorf("%w (API %s)", errUnauthenticated, kmsg.NameForKey(req.Key()))
	}
	cl.user = ss.user
	return s.authorized(ss, req, cl)
}

func (s *Server) saslHandshake(ss *session, r *kmsg.SASLHandshakeRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLHandshakeResponse)
	if ss == nil {
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		return resp
	}
	resp.SupportedMechanisms = ss.auth.mechanisms
	switch {
	case r.Version == 0:
		// v0 is followed by bare SASL tokens, not SaslAuthenticate: clients
		// use v1 when SaslAuthenticate is offered, as it is here.
		resp.ErrorCode = kerr.UnsupportedVersion.Code
		ss.closed = true
	case ss.user != "" || ss.mech != "":
		resp.ErrorCode = kerr.IllegalSaslState.Code
		ss.closed = true
	case !ss.auth.enabled(r.Mechanism):
		resp.ErrorCode = kerr.UnsupportedSaslMechanism.Code
		ss.closed = true
		s.log.Info("kafka: SASL mechanism refused", "remote", ss.remote, "mechanism", r.Mechanism)
	default:
		ss.mech = r.Mechanism
	}
	return resp
}

// saslAuthenticate runs one step of the chosen mechanism. The bytes hold
// passwords or proofs: they are never logged, nor echoed in messages.
func (s *Server) saslAuthenticate(ss *session, r *kmsg.SASLAuthenticateRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.SASLAuthenticateResponse)
	fail := func(code int16, msg string) kmsg.Response {
		resp.ErrorCode, resp.ErrorMessage = code, &msg
		if ss != nil {
			ss.closed = true
		}
		return resp
	}
	if ss == nil || ss.mech == "" || ss.user != "" {
		return fail(kerr.IllegalSaslState.Code, "SaslAuthenticate is expected only after a successful SaslHandshake")
	}
	failed := func(user string, reason string) kmsg.Response {
		// The name is the client's: logged cut short, at most once a
		// second, and its address is muted before its next request (as a
		// refused produce is), so a stranger can neither fill the log
		// nor spend the cores on password hashing at will.
		if len(user) > 64 {
			user = strings.ToValidUTF8(user[:64], "") + "..."
		}
		s.refusal("kafka: authentication failed", "remote", ss.remote, "mechanism", ss.mech, "user", user, "reason", reason)
		if host, _, err := net.SplitHostPort(ss.remote); err == nil {
			s.penalties.set(host, true)
		}
		return fail(kerr.SaslAuthenticationFailed.Code,
			fmt.Sprintf("Authentication failed during authentication due to invalid credentials with SASL mechanism %s", ss.mech))
	}
	if ss.mech == MechPlain {
		// authzid NUL authcid NUL passwd (RFC 4616)
		parts := bytes.Split(r.SASLAuthBytes, []byte{0})
		if len(parts) != 3 || len(parts[1]) == 0 {
			return failed("", "malformed PLAIN message")
		}
		user := string(parts[1])
		if len(parts[0]) > 0 && string(parts[0]) != user {
			return failed(user, "authorization id differs from the user")
		}
		if !ss.auth.CheckPassword(user, string(parts[2])) {
			return failed(user, "unknown user or wrong password")
		}
		return s.authenticated(ss, user, resp)
	}
	if ss.conv == nil {
		mech := ss.mech
		srv, err := scramHash(mech).NewServer(func(user string) (scram.StoredCredentials, error) {
			c, ok := ss.auth.credential(user, mech)
			if !ok {
				return scram.StoredCredentials{}, errors.New("no such user")
			}
			return c.scram(), nil
		})
		if err != nil {
			return failed("", "SCRAM server: "+err.Error())
		}
		ss.conv = srv.NewConversation()
	}
	msg := string(r.SASLAuthBytes)
	first := ss.conv.Username() == ""
	if !first && librdkafkaFinal(ss.serverFirst, msg) {
		user := ss.conv.Username()
		out, ok := scramFinalLenient(ss.auth, ss.mech, user, ss.clientFirst, ss.serverFirst, msg)
		if !ok {
			return failed(user, "wrong password or malformed final message")
		}
		resp.SASLAuthBytes = []byte(out)
		return s.authenticated(ss, user, resp)
	}
	out, err := ss.conv.Step(msg)
	if err != nil {
		// Not the library's error: its parse errors quote the client's
		// message, proof included.
		if first {
			return failed(ss.conv.Username(), "unknown user or malformed first message")
		}
		return failed(ss.conv.Username(), "wrong password or malformed final message")
	}
	resp.SASLAuthBytes = []byte(out)
	if first {
		ss.clientFirst, ss.serverFirst = msg, out
	}
	if ss.conv.Done() {
		if !ss.conv.Valid() {
			return failed(ss.conv.Username(), "invalid proof")
		}
		return s.authenticated(ss, ss.conv.Username(), resp)
	}
	return resp
}

func (s *Server) authenticated(ss *session, user string, resp *kmsg.SASLAuthenticateResponse) kmsg.Response {
	ss.user, ss.conv = user, nil
	s.log.Info("kafka: authenticated", "remote", ss.remote, "mechanism", ss.mech, "user", user)
	if host, _, err := net.SplitHostPort(ss.remote); err == nil {
		s.penalties.set(host, false) // a client that signs in is not the stranger the failures were
	}
	return resp
}
