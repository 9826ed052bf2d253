package proc

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Threads is how many OS threads this process has now (the Threads line of
// /proc/self/status): what debug.SetMaxThreads bounds, unlike the
// runtime's threadcreate profile, which counts threads ever made.
func Threads() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("Threads:")); ok {
			return strconv.Atoi(string(bytes.TrimSpace(v)))
		}
	}
	return 0, fmt.Errorf("/proc/self/status has no Threads line")
}
