//go:build !linux

package segment

// populateResident is Linux's (populate_linux.go); elsewhere the page
// tables are never filled, and point lookups keep reading with pread.
func populateResident(data []byte) bool { return false }
