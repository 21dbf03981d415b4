package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"strata/engine/segment"
)

// segmentCmd runs the offline segment tools: they read files directly and
// need no running service.
func segmentCmd(args []string, out io.Writer) error {
	if len(args) != 2 {
		return errors.New("usage: strata segment dump FILE | strata segment verify DIR")
	}
	switch args[0] {
	case "dump":
		return segment.Dump(args[1], out)
	case "verify":
		var progress func(done, total int)
		if isTerminal(os.Stderr) {
			progress = func(done, total int) { fmt.Fprintf(os.Stderr, "\rverified %d/%d files", done, total) }
		}
		reports, err := segment.VerifyDir(args[1], progress)
		if progress != nil {
			fmt.Fprintln(os.Stderr)
		}
		if err != nil {
			return err
		}
		bad := 0
		var records int
		for _, r := range reports {
			status := "ok"
			if r.Problem != nil {
				status = fmt.Sprintf("BAD at byte %d: %v", r.ProblemAt, r.Problem)
				bad++
			}
			fmt.Fprintf(out, "%s\t%d records\toffsets %d..%d\t%d bytes\t%s\n", r.Path, r.Records, r.FirstOffset, r.LastOffset, r.Bytes, status)
			records += r.Records
		}
		fmt.Fprintf(out, "%d files, %d records, %d with problems\n", len(reports), records, bad)
		if bad > 0 {
			return fmt.Errorf("%d of %d segment files have problems", bad, len(reports))
		}
		return nil
	}
	return fmt.Errorf("strata segment: unknown command %q (want dump or verify)", args[0])
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
