package types

import "time"

// OpKindRollout is the operation that runs a rollout; its events are the
// rollout's log.
const OpKindRollout OpKind = "rollout"

// OpKindRollback is the operation that switches a rollout's projects back
// (POST /v1/admin/rollouts/{id}/rollback); its target is the rollout and
// its result the Rollout with its projects.
const OpKindRollback OpKind = "rollback"

// Rollout states. Succeeded, stopped_budget, failed, canceled and
// rolled_back are final (a final rollout other than rolled_back may still
// be rolled back); rolling_back lasts until its rollback operation has
// switched every project it could back.
const (
	RolloutRunning       = "running"
	RolloutPaused        = "paused"
	RolloutSucceeded     = "succeeded"      // every selected project was tried
	RolloutStoppedBudget = "stopped_budget" // failures exceeded max_failures; the rest stay pending
	RolloutFailed        = "failed"         // the rollout itself failed (message says why)
	RolloutCanceled      = "canceled"
	RolloutRolledBack    = "rolled_back"
	RolloutRollingBack   = "rolling_back"
)

// Statuses of a project in a rollout.
const (
	RolloutProjectPending          = "pending"
	RolloutProjectRunning          = "running"
	RolloutProjectSwitched         = "switched"          // migrated, validated, current
	RolloutProjectValidationFailed = "validation_failed" // the new version failed validation; current untouched
	RolloutProjectConflicts        = "conflicts"         // the base update and the project changed the same paths; not moved
	RolloutProjectSkipped          = "skipped"           // current moved during its migration, or the rollout ended first
	RolloutProjectRolledBack       = "rolled_back"       // switched, then switched back by a rollback
	RolloutProjectFailed           = "failed"            // the migration failed for another reason
	RolloutProjectClean            = "clean"             // dry run: no conflicts
)

// CreateRolloutRequest is the body of POST /v1/admin/rollouts.
type CreateRolloutRequest struct {
	// From and To are base images (imported names or repo@digest): the
	// projects whose current version sits on From (by layers) move to To.
	From string `json:"from"`
	To   string `json:"to"`
	// Tenant limits the rollout to one tenant's projects; "" = every tenant.
	Tenant string `json:"tenant,omitempty"`
	// Selector is a glob (path.Match) on project names; "" = every project.
	Selector string `json:"selector,omitempty"`
	// Validate are commands (argv, no shell; ["sh", "-c", "..."] for one)
	// each project's trial instance runs after the project's own declared
	// ones.
	Validate [][]string `json:"validate,omitempty"`
	// WaveSize is how many projects migrate at once (default 5); a node
	// also caps its own rollout migrations (its rollout concurrency).
	WaveSize int `json:"wave_size,omitempty"`
	// MaxFailures: the rollout stops (stopped_budget) when more projects
	// than this failed (validation_failed, conflicts, failed); default 0.
	MaxFailures int `json:"max_failures,omitempty"`
	// DryRun reports each selected project's conflicts and makes nothing.
	DryRun bool `json:"dry_run,omitempty"`
	// AllowConflicts migrates a project with conflicts too (the project's
	// files win); by default such a project is reported and not moved.
	AllowConflicts bool `json:"allow_conflicts,omitempty"`
}

// Rollout is a fleet upgrade and its report.
type Rollout struct {
	ID             string     `json:"id"`
	OperationID    string     `json:"operation_id"`
	State          string     `json:"state"`
	Message        string     `json:"message,omitempty"`
	From           string     `json:"from"` // repo@digest
	To             string     `json:"to"`
	FromName       string     `json:"from_name,omitempty"`
	ToName         string     `json:"to_name,omitempty"`
	Tenant         string     `json:"tenant,omitempty"`
	Selector       string     `json:"selector,omitempty"`
	Validate       [][]string `json:"validate,omitempty"`
	WaveSize       int        `json:"wave_size"`
	MaxFailures    int        `json:"max_failures"`
	DryRun         bool       `json:"dry_run"`
	AllowConflicts bool       `json:"allow_conflicts"`
	// Totals counts the projects by status.
	Totals    map[string]int   `json:"totals"`
	Projects  []RolloutProject `json:"projects,omitempty"` // in GET /v1/admin/rollouts/{id}
	CreatedAt time.Time        `json:"created_at"`
	UpdatedAt time.Time        `json:"updated_at"`
	// FinishedAt is when it reached a final state.
	FinishedAt *time.Time `json:"finished_at,omitempty"`

	// RollbackOperationID is the operation of its newest rollback (kind
	// rollback), absent before one was asked.
	RollbackOperationID string `json:"rollback_operation_id,omitempty"`
}

// RolloutProject is one selected project of a rollout.
type RolloutProject struct {
	Tenant  string `json:"tenant"`
	Project string `json:"project"`
	Status  string `json:"status"`
	// OldVersion is the current version when selected; NewVersion the
	// migrated version (0 = none made).
	OldVersion       int      `json:"old_version"`
	NewVersion       int      `json:"new_version,omitempty"`
	Conflicts        []string `json:"conflicts"`
	DatabaseConflict bool     `json:"database_conflict,omitempty"`
	// Message says why a project was not switched or rolled back.
	Message string `json:"message,omitempty"`
	// Output is the tail of the failing validation command's output.
	Output     string     `json:"output,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// RolloutFailure marks a project a rollout could not move (Project's
// rollout_failure); the next successful switch of current clears it.
type RolloutFailure struct {
	Rollout string    `json:"rollout"`
	Status  string    `json:"status"`
	Message string    `json:"message,omitempty"`
	At      time.Time `json:"at"`
}

// ProjectValidation is the body and answer of PUT
// /v1/projects/{p}/validation: the commands every migration of the project
// (a rollout's included) runs in its trial instance.
type ProjectValidation struct {
	Validate [][]string `json:"validate"`
}
