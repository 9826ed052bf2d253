package save

import (
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// Stats are the totals of this process's saves, for /metrics.
type Stats struct {
	Count, Conflicts            int
	Freeze, Encode, Push, Total time.Duration
}

// stats accumulates Stats.
type stats struct {
	mu sync.Mutex
	Stats
}

func (st *stats) add(r types.SaveResult) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.Count++
	if r.Conflict {
		st.Conflicts++
	}
	st.Freeze += time.Duration(r.FreezeMS) * time.Millisecond
	st.Encode += time.Duration(r.EncodeMS) * time.Millisecond
	st.Push += time.Duration(r.PushMS) * time.Millisecond
	st.Total += time.Duration(r.TotalMS) * time.Millisecond
}

// Stats returns the totals of the saves this process finished.
func (s *Saver) Stats() Stats {
	s.stats.mu.Lock()
	defer s.stats.mu.Unlock()
	return s.stats.Stats
}
