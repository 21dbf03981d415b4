package catalog

import "testing"

// Every pair of states: only the documented lifecycle steps are allowed.
func TestCanTransition(t *testing.T) {
	allowed := map[[2]State]bool{
		{Active, Sealed}: true, {Sealed, Uploading}: true, {Sealed, Deleted}: true,
		{Uploading, Cold}: true, {Uploading, Sealed}: true, {Uploading, Uploading}: true,
		{Cold, Remote}: true, {Cold, Deleted}: true, {Remote, Deleted}: true,
		{Cold, Cold}: true, {Remote, Remote}: true, // a retype's new object
	}
	states := []State{Active, Sealed, Uploading, Cold, Remote, Deleted}
	for _, from := range states {
		for _, to := range states {
			if got := CanTransition(from, to); got != allowed[[2]State{from, to}] {
				t.Errorf("CanTransition(%s, %s) = %t", from, to, got)
			}
		}
	}
}
