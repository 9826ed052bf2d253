package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// prefault writes a scratch file of n bytes into dir's page cache and deletes
// it before it is written back, so the guest kernel's free lists hold n bytes
// of memory touched a moment ago.
//
// Why: on a VM whose balloon device reports free pages to the host (virtio
// free page reporting, as on the Firecracker VMs this was written on), memory
// freed for more than about two seconds goes back to the host, and the next
// first touch of each page faults into the hypervisor: writing a new 260 MB
// file then costs 0.3 to 1.4 s instead of 0.05 s. Without this, whichever
// variant runs after a pause (DiffService's long Compare, say) pays that cost
// in its spool and encode, and the others do not. With it, every run gets
// the warm memory a busy host would have.
func prefault(dir string, n int64) (time.Duration, error) {
	start := time.Now()
	f, err := os.CreateTemp(dir, "prefault-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	for w := int64(0); w < n; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return 0, fmt.Errorf("prefault %s: %w", filepath.Base(f.Name()), err)
		}
	}
	return time.Since(start), nil
}

// balloonReportsFreePages tells whether a virtio balloon driver is loaded (its
// free page reporting is what makes prefault matter).
func balloonReportsFreePages() bool {
	_, err := os.Stat("/sys/bus/virtio/drivers/virtio_balloon")
	return err == nil
}
