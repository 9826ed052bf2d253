package types

// Idle actions of IdleSetting.
const (
	IdleActionStop      = "stop"
	IdleActionHibernate = "hibernate"
)

// IdleSetting is a project's idle stop: an instance Running After (a Go
// duration; "0" = never) without activity is stopped (Action stop: a
// retained one keeps its layer on the node) or saved as a non-current
// version and stopped, its layer freed (hibernate; always so for an
// instance that is not retained, so that idle stop never loses work). Any
// access wakes it. After "" and Action "" take the node's defaults. The
// body of PUT /v1/projects/{p}/idle.
type IdleSetting struct {
	After  string `json:"after,omitempty"`
	Action string `json:"action,omitempty"`
}
