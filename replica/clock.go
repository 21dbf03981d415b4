package replica

import "time"

// Clock is the time replication runs on: the system's in a node, a fake
// one in replicatest, where a script moves it and every wait (the ticks,
// a follower's backoff) fires only then.
type Clock interface {
	Now() time.Time
	// After is time.After: the channel gets the time once d has passed.
	After(d time.Duration) <-chan time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time                         { return time.Now() }
func (systemClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
