package types

// Readiness is the body of GET /readyz: Status is ReadyStatus when every
// check passed (HTTP 200), NotReadyStatus otherwise (HTTP 503).
type Readiness struct {
	Status string           `json:"status"`
	Checks map[string]Check `json:"checks"`
}

// Check is the outcome of one readiness check: Status is CheckOK or
// CheckFailed, Error says why it failed.
type Check struct {
	Status     string  `json:"status"`
	Error      string  `json:"error,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

// The values of Readiness.Status and Check.Status.
const (
	ReadyStatus    = "ready"
	NotReadyStatus = "not_ready"
	CheckOK        = "ok"
	CheckFailed    = "failed"
)
