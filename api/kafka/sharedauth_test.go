package kafka

import (
	"encoding/json"
	"testing"
)

// revStore stands in for the cluster's etcd (which api/kafka does not
// reach; cluster/e2e's TestRotatedPasswordHoldsOnEveryNode runs the real
// one): each Save lands at the next revision it is told.
type revStore struct{ next int64 }

func (s *revStore) Save(map[string][]byte) (int64, error) { return s.next, nil }

// A node applies watched credential changes in revision order against its
// own saves: a change it watches late (older than the one it saved) does
// not bring an old password back; a newer removal does take effect; a
// list read before its own save keeps the save.
func TestSharedCredentialsApplyByRevision(t *testing.T) {
	store := &revStore{}
	a, err := NewAuth(AuthConfig{Mechanisms: []string{MechScramSHA256}, Users: []User{{Name: "u"}}, Shared: store})
	if err != nil {
		t.Fatal(err)
	}
	enc := func(password string) []byte {
		c, err := deriveCred(scramHash(MechScramSHA256), password, minScramIterations)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := json.Marshal(map[string]storedCred{MechScramSHA256: c})
		return v
	}
	works := func(step string, password string, want bool) {
		t.Helper()
		if got := a.CheckPassword("u", password); got != want {
			t.Fatalf("%s: password %q works: %v; want %v", step, password, got, want)
		}
	}
	if applied, err := a.UpdateShared("u", enc("one"), 5); !applied || err != nil {
		t.Fatalf("first change: applied %v, %v", applied, err)
	}
	works("set at revision 5 by another node", "one", true)

	store.next = 10
	c, _ := deriveCred(scramHash(MechScramSHA256), "two", minScramIterations)
	if err := a.alter(map[string]map[string]storedCred{"u": {MechScramSHA256: c}}); err != nil {
		t.Fatal(err)
	}
	works("rotated here at revision 10", "two", true)
	works("rotated here at revision 10", "one", false)

	if applied, _ := a.UpdateShared("u", enc("one"), 5); applied {
		t.Fatal("a late event of revision 5 applied over revision 10")
	}
	works("after a late event of revision 5", "two", true)
	works("after a late event of revision 5", "one", false)

	if err := a.ReplaceShared(map[string]SharedCredential{"u": {Value: enc("one"), Rev: 5}}, 8); err != nil {
		t.Fatal(err)
	}
	works("after a list read at revision 8", "two", true)

	if applied, _ := a.UpdateShared("u", nil, 11); !applied {
		t.Fatal("a removal at revision 11 not applied")
	}
	works("removed at revision 11", "two", false)

	if err := a.ReplaceShared(map[string]SharedCredential{"u": {Value: enc("three"), Rev: 12}}, 12); err != nil {
		t.Fatal(err)
	}
	works("listed at revision 12", "three", true)
	if err := a.ReplaceShared(map[string]SharedCredential{"u": {Value: []byte("{not json")}}, 13); err == nil {
		t.Fatal("a value that is not credentials was taken")
	}
}
