package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/versions"
)

func TestPrefetchParts(t *testing.T) {
	files := []string{"/bin/sh", "/usr/bin/dot", "/usr/lib/libcairo.so.2", "/usr/share/fonts/a.ttf"}
	for _, tc := range []struct {
		name       string
		head       int
		wantHead   []string
		wantTail   []string
		wantHoldUp time.Duration
	}{
		{"head unknown: all of it, held briefly", 0, files, nil, warmFilesHold},
		{"head known: what the first command read, held longer", 2, files[:2], files[2:], warmHeadHold},
		{"head is the whole list", 4, files, nil, warmFilesHold},
		{"head past the list (a shorter list stored later)", 9, files, nil, warmFilesHold},
	} {
		t.Run(tc.name, func(t *testing.T) {
			head, tail, hold := prefetchParts(versions.Project{Prefetch: files, PrefetchHead: tc.head})
			assert.Equal(t, tc.wantHead, head)
			assert.Equal(t, tc.wantTail, tail)
			assert.Equal(t, tc.wantHoldUp, hold)
		})
	}
}

// TestNextSessionEnd: the channel closes when a session (Hold) on that
// instance ends, not before and not for another instance's; every waiter
// is let go; a terminated instance's waits are dropped.
func TestNextSessionEnd(t *testing.T) {
	m := &Manager{activity: newActivity()}
	a, a2, b := m.nextSessionEnd("a"), m.nextSessionEnd("a"), m.nextSessionEnd("b")
	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	release := m.Hold("a")
	assert.False(t, closed(a), "a session that has not ended")
	otherRelease := m.Hold("b")
	release()
	assert.True(t, closed(a))
	assert.True(t, closed(a2), "every waiter is let go")
	assert.False(t, closed(b), "another instance's session is still open")
	release() // a second release is a no-op
	next := m.nextSessionEnd("a")
	assert.False(t, closed(next), "a new wait is for the next session")
	m.forgetSessionEnds("a") // terminated
	m.Hold("a")()
	assert.False(t, closed(next), "dropped, not run")
	otherRelease()
	assert.True(t, closed(b))
}
