package kafka

import (
	"testing"
)

// CheckPassword derives the SCRAM key (PBKDF2) once per good password and
// not again while the user's credential stays; a wrong password costs the
// derivation every time and evicts nothing; a password changed through the
// users file (SetUsers, what SIGHUP runs), through
// AlterUserScramCredentials or removed stops the old one working at once.
func TestPasswordCheckRemembersOnlyGoodCurrentPasswords(t *testing.T) {
	a, err := NewAuth(AuthConfig{Mechanisms: []string{MechPlain, MechScramSHA256},
		Users: []User{{Name: "u", Password: "one"}, {Name: "v", Password: "vee"}}})
	if err != nil {
		t.Fatal(err)
	}
	setUsers := func(upassword string) func(t *testing.T) {
		return func(t *testing.T) {
			if err := a.SetUsers([]User{{Name: "u", Password: upassword}, {Name: "v", Password: "vee"}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	alter := func(password string, remove bool) func(t *testing.T) {
		return func(t *testing.T) {
			c := storedCred{Deleted: true}
			if !remove {
				var err error
				if c, err = deriveCred(scramHash(MechScramSHA256), password, minScramIterations); err != nil {
					t.Fatal(err)
				}
			}
			if err := a.alter(map[string]map[string]storedCred{"u": {MechScramSHA256: c, MechScramSHA512: {Deleted: true}}}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, step := range []struct {
		name           string
		change         func(t *testing.T) // before the check, if set
		user, password string
		ok             bool
		derivations    int64
	}{
		{"first check derives", nil, "u", "one", true, 1},
		{"the same password again derives nothing", nil, "u", "one", true, 0},
		{"a wrong password derives", nil, "u", "two", false, 1},
		{"a wrong password again derives again", nil, "u", "two", false, 1},
		{"the good one still derives nothing", nil, "u", "one", true, 0},
		{"another user derives for their own", nil, "v", "vee", true, 1},
		{"an unknown user derives nothing and fails", nil, "w", "one", false, 0},
		{"users file changed: the old password fails", setUsers("two"), "u", "one", false, 1},
		{"users file changed: the new one works", nil, "u", "two", true, 1},
		{"users file changed: the new one again derives nothing", nil, "u", "two", true, 0},
		{"reloaded with the same password: a fresh salt, derived once", setUsers("two"), "u", "two", true, 1},
		{"AlterUserScramCredentials: the old password fails", alter("three", false), "u", "two", false, 1},
		{"AlterUserScramCredentials: the new one works", nil, "u", "three", true, 1},
		{"AlterUserScramCredentials: again derives nothing", nil, "u", "three", true, 0},
		{"credential removed: the remembered password fails", alter("", true), "u", "three", false, 0},
		{"the other user's password works (derived once: the reloads gave it a fresh salt too)", nil, "v", "vee", true, 1},
		{"the other user's again derives nothing", nil, "v", "vee", true, 0},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.change != nil {
				step.change(t)
			}
			before := a.derivations.Load()
			if got := a.CheckPassword(step.user, step.password); got != step.ok {
				t.Fatalf("CheckPassword(%s, %s): %v, want %v", step.user, step.password, got, step.ok)
			}
			if got := a.derivations.Load() - before; got != step.derivations {
				t.Fatalf("%d key derivations, want %d", got, step.derivations)
			}
		})
	}
}

// A request with a remembered password costs a map lookup and an HMAC,
// not PBKDF2.
func BenchmarkCheckPassword(b *testing.B) {
	a, err := NewAuth(AuthConfig{Mechanisms: []string{MechPlain}, Users: []User{{Name: "u", Password: "one"}}})
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name, password string
	}{{"remembered", "one"}, {"wrong", "two"}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				a.CheckPassword("u", bc.password)
			}
		})
	}
}
