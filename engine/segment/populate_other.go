//go:build !linux

package segment

// populateResident is Linux's (populate_linux.go); elsewhere lookups take
// their page faults.
func populateResident(data []byte) {}
