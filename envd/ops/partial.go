package ops

import "errors"

// partial is a failure whose work has a result worth keeping.
type partial struct {
	result any
	err    error
}

func (p *partial) Error() string { return p.err.Error() }
func (p *partial) Unwrap() error { return p.err }

// FailWithResult is what a Func returns when it failed after making
// something the client must see (a migration's failed version and its
// conflicts): the operation fails with err and its result is result.
func FailWithResult(result any, err error) error {
	if err == nil {
		return nil
	}
	return &partial{result: result, err: err}
}

// partialResult is the result a failure carries, or nil.
func partialResult(err error) any {
	var p *partial
	if errors.As(err, &p) {
		return p.result
	}
	return nil
}
