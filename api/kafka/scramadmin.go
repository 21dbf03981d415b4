package kafka

import (
	"crypto/hmac"
	"slices"
	"sort"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// scramAdmin answers DescribeUserScramCredentials and
// AlterUserScramCredentials; p is the caller's permissions, nil when
// authentication is off (then there are no credentials to manage).
func (s *Server) scramAdmin(p *perms, req kmsg.Request) kmsg.Response {
	switch r := req.(type) {
	case *kmsg.DescribeUserSCRAMCredentialsRequest:
		resp := r.ResponseKind().(*kmsg.DescribeUserSCRAMCredentialsResponse)
		switch {
		case p == nil:
			resp.ErrorCode, resp.ErrorMessage = kerr.SecurityDisabled.Code, strPtr("SASL is not enabled (kafka.sasl.mechanisms)")
		case !p.cluster():
			resp.ErrorCode, resp.ErrorMessage = clusterDenied, strPtr("describing SCRAM users needs admin on every topic (topic_prefix \"\")")
		default:
			s.describeScram(r, resp)
		}
		return resp
	case *kmsg.AlterUserSCRAMCredentialsRequest:
		resp := r.ResponseKind().(*kmsg.AlterUserSCRAMCredentialsResponse)
		switch {
		case p == nil:
			s.alterScramAll(r, resp, kerr.SecurityDisabled.Code, "SASL is not enabled (kafka.sasl.mechanisms)")
		case !p.cluster():
			s.alterScramAll(r, resp, clusterDenied, "altering SCRAM users needs admin on every topic (topic_prefix \"\")")
		default:
			s.alterScram(r, resp)
		}
		return resp
	}
	return req.ResponseKind()
}

func strPtr(s string) *string { return &s }

// describeScram lists mechanisms and iterations: never salts or keys.
func (s *Server) describeScram(r *kmsg.DescribeUserSCRAMCredentialsRequest, resp *kmsg.DescribeUserSCRAMCredentialsResponse) {
	users := s.cfg.Auth.scramUsers()
	var names []string
	if len(r.Users) == 0 { // null or empty: everyone, as in Kafka
		for u := range users {
			names = append(names, u)
		}
		sort.Strings(names)
	} else {
		for _, u := range r.Users {
			names = append(names, u.Name)
		}
	}
	seen := map[string]int{}
	for _, n := range names {
		seen[n]++
	}
	for i, n := range names {
		if slices.Index(names, n) != i {
			continue // one answer per name
		}
		res := kmsg.NewDescribeUserSCRAMCredentialsResponseResult()
		res.User = n
		creds := users[n]
		switch {
		case seen[n] > 1:
			res.ErrorCode, res.ErrorMessage = kerr.DuplicateResource.Code, strPtr("the user is asked for more than once")
		case len(creds) == 0:
			res.ErrorCode, res.ErrorMessage = kerr.ResourceNotFound.Code, strPtr("no SCRAM credential for the user")
		default:
			mechs := make([]string, 0, len(creds))
			for m := range creds {
				mechs = append(mechs, m)
			}
			sort.Strings(mechs)
			for _, m := range mechs {
				res.CredentialInfos = append(res.CredentialInfos, kmsg.DescribeUserSCRAMCredentialsResponseResultCredentialInfo{
					Mechanism: scramMechNumber(m), Iterations: int32(creds[m].Iterations)})
			}
		}
		resp.Results = append(resp.Results, res)
	}
}

// alterScramAll answers every user in the request with one error.
func (s *Server) alterScramAll(r *kmsg.AlterUserSCRAMCredentialsRequest, resp *kmsg.AlterUserSCRAMCredentialsResponse, code int16, msg string) {
	for _, u := range alterUsers(r) {
		resp.Results = append(resp.Results, kmsg.AlterUserSCRAMCredentialsResponseResult{User: u, ErrorCode: code, ErrorMessage: strPtr(msg)})
	}
}

// alterUsers lists the request's users once each, in request order.
func alterUsers(r *kmsg.AlterUserSCRAMCredentialsRequest) []string {
	var users []string
	for _, d := range r.Deletions {
		if !slices.Contains(users, d.Name) {
			users = append(users, d.Name)
		}
	}
	for _, u := range r.Upsertions {
		if !slices.Contains(users, u.Name) {
			users = append(users, u.Name)
		}
	}
	return users
}

// alterScram checks each user's changes as Kafka does (a user whose
// changes are not all valid is left unchanged), then applies and persists
// the valid ones together.
func (s *Server) alterScram(r *kmsg.AlterUserSCRAMCredentialsRequest, resp *kmsg.AlterUserSCRAMCredentialsResponse) {
	existing := s.cfg.Auth.scramUsers()
	errs := map[string]kmsg.AlterUserSCRAMCredentialsResponseResult{}
	fail := func(user string, code int16, msg string) {
		if _, ok := errs[user]; !ok {
			errs[user] = kmsg.AlterUserSCRAMCredentialsResponseResult{User: user, ErrorCode: code, ErrorMessage: strPtr(msg)}
		}
	}
	changes := map[string]map[string]storedCred{}
	add := func(user, mech string, c storedCred) {
		if _, dup := changes[user][mech]; dup {
			fail(user, kerr.DuplicateResource.Code, "a user's mechanism may be changed only once per request")
			return
		}
		if changes[user] == nil {
			changes[user] = map[string]storedCred{}
		}
		changes[user][mech] = c
	}
	for _, d := range r.Deletions {
		m, ok := scramMechs[d.Mechanism]
		switch {
		case d.Name == "":
			fail(d.Name, kerr.UnacceptableCredential.Code, "the user name is empty")
		case len(d.Name) > maxScramUserBytes:
			fail(d.Name, kerr.UnacceptableCredential.Code, "the user name is longer than 1024 bytes")
		case !ok:
			fail(d.Name, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
		case existing[d.Name][m.name].StoredKey == nil:
			fail(d.Name, kerr.ResourceNotFound.Code, "no credential to delete for this mechanism")
		default:
			add(d.Name, m.name, storedCred{Deleted: true})
		}
	}
	for _, u := range r.Upsertions {
		m, ok := scramMechs[u.Mechanism]
		switch {
		case u.Name == "":
			fail(u.Name, kerr.UnacceptableCredential.Code, "the user name is empty")
		case len(u.Name) > maxScramUserBytes:
			fail(u.Name, kerr.UnacceptableCredential.Code, "the user name is longer than 1024 bytes")
		case len(u.Salt) > maxScramSaltBytes:
			fail(u.Name, kerr.UnacceptableCredential.Code, "the salt is longer than 1024 bytes")
		case !ok:
			fail(u.Name, kerr.UnsupportedSaslMechanism.Code, "unknown SCRAM mechanism")
		case u.Iterations < minScramIterations || u.Iterations > maxScramIterations:
			fail(u.Name, kerr.UnacceptableCredential.Code, "iterations must be from 4096 to 16384")
		case len(u.Salt) == 0 || len(u.SaltedPassword) != m.hash().Size():
			fail(u.Name, kerr.UnacceptableCredential.Code, "an empty salt or a salted password of the wrong size")
		default:
			// The client sends SaltedPassword (RFC 5802's Hi(password, salt,
			// i)); the server keeps only the keys derived from it.
			h := m.hash
			mac := func(key []byte, msg string) []byte { x := hmac.New(h, key); x.Write([]byte(msg)); return x.Sum(nil) }
			clientKey := mac(u.SaltedPassword, "Client Key")
			stored := h()
			stored.Write(clientKey)
			add(u.Name, m.name, storedCred{Salt: u.Salt, Iterations: int(u.Iterations), StoredKey: stored.Sum(nil), ServerKey: mac(u.SaltedPassword, "Server Key")})
		}
	}
	for u := range errs {
		delete(changes, u)
	}
	var persistErr error
	if len(changes) > 0 {
		persistErr = s.cfg.Auth.alter(changes)
	}
	for _, u := range alterUsers(r) {
		res, failed := errs[u]
		switch {
		case failed:
		case persistErr != nil:
			s.log.Error("kafka: saving SCRAM credentials", "err", persistErr)
			res = kmsg.AlterUserSCRAMCredentialsResponseResult{User: u, ErrorCode: kerr.KafkaStorageError.Code, ErrorMessage: strPtr("the credentials could not be saved")}
		default:
			res = kmsg.AlterUserSCRAMCredentialsResponseResult{User: u}
			s.log.Info("kafka: SCRAM credentials changed", "user", u)
		}
		resp.Results = append(resp.Results, res)
	}
}
