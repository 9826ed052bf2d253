package command

import "io"

// Activity is told of exec sessions, so that an instance in use is not
// idle (lifecycle.Manager's Hold and Touch).
type Activity interface {
	// Hold marks a session open on instance id until release.
	Hold(id string) (release func())
	// Touch records activity on instance id now.
	Touch(id string)
}

type noActivity struct{}

func (noActivity) Hold(string) func() { return func() {} }
func (noActivity) Touch(string)       {}

// WithActivity makes r report its sessions to a; without it they are not
// reported.
func (r *Runner) WithActivity(a Activity) *Runner {
	r.activity = a
	return r
}

// touchingReader touches the instance on every read that returns input:
// every keystroke of a terminal is activity.
type touchingReader struct {
	r     io.Reader
	touch func()
}

func (t touchingReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n > 0 {
		t.touch()
	}
	return n, err
}
