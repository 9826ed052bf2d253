package s3test

import (
	"context"
	"net/http"
	goruntime "runtime"
	"sync"
	"testing"
	"time"
)

// The server outlives OS threads of the test process that end: Go ends a
// thread whose goroutine locked it and never unlocked it (as creating a
// network namespace does), and a child started with Pdeathsig from that
// thread was killed with it.
func TestServerOutlivesEndedThreads(t *testing.T) {
	cfg := Start(t)
	for range 2000 {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() { goruntime.LockOSThread() }) // never unlocked: the thread ends
		}
		wg.Wait()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+cfg.Endpoint+"/", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("the server is gone after threads ended: %v", err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("Server"); got != "VERSITYGW" {
		t.Fatalf("answered by %q, not versitygw", got)
	}
}
