package segment

import (
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/edsrzf/mmap-go"
)

// A fresh mapping of a file in the page cache, populated, is read without
// page faults; without the populate the same reads fault.
func TestPopulateResidentSavesTheFaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "0.msg")
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i)
	}
	// Written as the engine writes, in small appends: in the page cache now.
	w, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	for p := 0; p < len(data); p += 1000 {
		if _, err := w.Write(data[p:min(p+1000, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, tc := range []struct {
		name      string
		populate  bool
		maxFaults int64
		minFaults int64
	}{
		{"not populated", false, 1 << 30, 64},
		{"populated", true, 16, 0},
	} {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		mm, err := mmap.Map(f, mmap.RDONLY, 0)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if tc.populate {
			populateResident(mm)
		}
		var before, after syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_THREAD, &before)
		var sum byte
		for p := 0; p < len(mm); p += 4096 {
			sum += mm[p]
		}
		syscall.Getrusage(syscall.RUSAGE_THREAD, &after)
		mm.Unmap()
		if faults := after.Minflt - before.Minflt; faults > tc.maxFaults || faults < tc.minFaults {
			t.Errorf("%s: reading a page in each of 4,096 took %d minor faults, want %d to %d", tc.name, faults, tc.minFaults, tc.maxFaults)
		}
		if sum == 1 { // keeps the reads
			t.Log("sum", sum)
		}
	}
}
