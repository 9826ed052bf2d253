// Package rollout runs fleet upgrades: every selected project whose
// current version sits on a base image (found by layers, as migrations
// find it) is migrated onto another, wave by wave, each validated with its
// own declared commands plus the rollout's, switched only where validation
// passed (compare-and-swap from the current it had when selected), and
// reported per project. A rollout runs as an operation of kind rollout on
// the node that created it, is paused, resumed, canceled and rolled back
// through its row, and runs again after a restart (the projects it had
// finished stay finished).
//
// Terms: a project's old version is its current when the rollout selected
// it; its new version is the migration version the rollout made. A
// failure is a project whose status is validation_failed, conflicts or
// failed; when a real rollout has more than max_failures of them it stops
// (stopped_budget). Pacing: a node runs at most Concurrency rollout
// migrations at once, and a migration waits before it starts while the
// node runs interactive work (saves, restores, builds), up to a bound, so
// a rollout never takes a slot a user is waiting for.
package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/build"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// Store is what rollouts need of the store.
type Store interface {
	CreateRollout(ctx context.Context, r versions.Rollout, projects []versions.RolloutProject) (versions.Rollout, error)
	GetRollout(ctx context.Context, id string) (versions.Rollout, error)
	ListRollouts(ctx context.Context) ([]versions.Rollout, error)
	RolloutProjects(ctx context.Context, id string) ([]versions.RolloutProject, error)
	RolloutTotals(ctx context.Context, ids []string) (map[string]map[string]int, error)
	SetRolloutState(ctx context.Context, id string, from []string, state, message string) (versions.Rollout, error)
	SetRolloutOperation(ctx context.Context, id, opID string) error
	DeleteRollout(ctx context.Context, id string) error
	StartRolloutProject(ctx context.Context, id, tenant, project, trial string) error
	FinishRolloutProject(ctx context.Context, id string, p versions.RolloutProject, markFailure bool) error
	SetRolloutProjectStatus(ctx context.Context, id, tenant, project, fromStatus, status, message string) error
	ListAllProjects(ctx context.Context, tenant string) ([]versions.Project, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	SetCurrent(ctx context.Context, tenant, project string, n, expected int) (versions.Project, error)
	AppendEvent(ctx context.Context, opID, typ, message string, data any) (versions.Event, error)
}

// Migrator migrates one project and knows the imported bases
// (build.Builder).
type Migrator interface {
	MigrateProject(ctx context.Context, ev build.Events, s build.MigrateSpec) (types.MigrateResult, error)
	Bases(ctx context.Context) ([]build.Base, error)
}

// Registry reads image manifests.
type Registry interface {
	Get(ctx context.Context, ref string) (registry.Image, error)
}

// BaseResolver resolves a base image given by name or repo@digest.
type BaseResolver interface {
	ResolveBase(ctx context.Context, tenant, base string) (registry.Image, error)
}

// Operations starts operations (ops.Runner).
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
	Cancel(ctx context.Context, p types.Principal, id string) (types.Operation, error)
}

// Trials removes a trial instance a restart interrupted
// (lifecycle.Manager.RemoveIsolated).
type Trials interface {
	RemoveIsolated(id string)
}

// Interactive reports how much interactive work (saves, restores, builds)
// the node runs now.
type Interactive interface {
	InteractiveInFlight() int
}

// Deps are what a Runner works with.
type Deps struct {
	Store       Store
	Migrator    Migrator
	Reg         Registry
	Bases       BaseResolver
	Ops         Operations
	Trials      Trials
	Interactive Interactive
	Log         *slog.Logger
	// Stopping is the service's context: when it ends, a running rollout
	// is left unfinished (to run again at the next start), not canceled.
	Stopping context.Context
	// Concurrency is the most rollout migrations this node runs at once;
	// 0 = DefaultConcurrency.
	Concurrency int
	// YieldFor is the longest a rollout migration waits for the node's
	// interactive work to end before it starts anyway; 0 = 30s.
	YieldFor time.Duration
	// Poll is how often a paused rollout looks at its state; 0 = 1s.
	Poll time.Duration
}

// DefaultConcurrency is a node's rollout migrations at once by default.
const DefaultConcurrency = 2

// DefaultWaveSize is a rollout's wave size when the request names none.
const DefaultWaveSize = 5

// MaxWaveSize bounds a wave.
const MaxWaveSize = 100

// Runner creates and runs this node's rollouts.
type Runner struct {
	d     Deps
	slots chan struct{}
}

// New makes a Runner.
func New(d Deps) *Runner {
	if d.Concurrency <= 0 {
		d.Concurrency = DefaultConcurrency
	}
	if d.YieldFor == 0 {
		d.YieldFor = 30 * time.Second
	}
	if d.Poll == 0 {
		d.Poll = time.Second
	}
	return &Runner{d: d, slots: make(chan struct{}, d.Concurrency)}
}

// Job is what a rollout operation runs: the rollout's id (everything else
// is in its rows).
type Job struct {
	Rollout string `json:"rollout"`
}

// failure reports whether a project status counts against the budget.
func failure(status string) bool {
	return status == types.RolloutProjectValidationFailed || status == types.RolloutProjectConflicts ||
		status == types.RolloutProjectFailed
}

func admin(p types.Principal, what string) error {
	if !p.Admin {
		return fmt.Errorf("%s needs an admin token: %w", what, errdefs.ErrPermissionDenied)
	}
	return nil
}

// Create selects the projects and starts the rollout's operation. The
// selection is made now: projects (of req.Tenant, or every tenant) whose
// name matches req.Selector and whose current version sits on req.From.
func (r *Runner) Create(ctx context.Context, p types.Principal, req types.CreateRolloutRequest, idempotencyKey string) (types.Rollout, error) {
	if err := admin(p, "a rollout"); err != nil {
		return types.Rollout{}, err
	}
	if err := checkRequest(&req); err != nil {
		return types.Rollout{}, err
	}
	from, err := r.d.Bases.ResolveBase(ctx, "", req.From)
	if err != nil {
		return types.Rollout{}, fmt.Errorf("from: %w", err)
	}
	to, err := r.d.Bases.ResolveBase(ctx, "", req.To)
	if err != nil {
		return types.Rollout{}, fmt.Errorf("to: %w", err)
	}
	if from.Digest == to.Digest {
		return types.Rollout{}, fmt.Errorf("from %s and to %s are the same image: %w", req.From, req.To, errdefs.ErrInvalidArgument)
	}
	selected, err := r.Select(ctx, req.Tenant, req.Selector, from)
	if err != nil {
		return types.Rollout{}, err
	}
	rec := versions.Rollout{
		ID: names.NewID("ro"), Tenant: req.Tenant, Selector: req.Selector, From: from.Ref(), To: to.Ref(),
		FromName: req.From, ToName: req.To, Validate: req.Validate, WaveSize: req.WaveSize, MaxFailures: req.MaxFailures,
		DryRun: req.DryRun, AllowConflicts: req.AllowConflicts,
	}
	if _, err := r.d.Store.CreateRollout(ctx, rec, selected); err != nil {
		return types.Rollout{}, err
	}
	job := Job{Rollout: rec.ID}
	op, err := r.d.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindRollout, Target: rec.ID, Scope: "rollouts", IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Run: func(ctx context.Context, op *ops.Op) (any, error) { return r.Run(ctx, op, job) }})
	if err != nil || op.Target != rec.ID {
		// Refused, or a retry that gets the rollout the first request made.
		if derr := r.d.Store.DeleteRollout(context.WithoutCancel(ctx), rec.ID); derr != nil {
			r.d.Log.Warn("delete an unstarted rollout", "rollout", rec.ID, "err", derr)
		}
		if err != nil {
			return types.Rollout{}, err
		}
		return r.Get(ctx, p, op.Target)
	}
	if err := r.d.Store.SetRolloutOperation(ctx, rec.ID, op.ID); err != nil {
		return types.Rollout{}, err
	}
	return r.Get(ctx, p, rec.ID)
}

func checkRequest(req *types.CreateRolloutRequest) error {
	if req.From == "" || req.To == "" {
		return fmt.Errorf("from and to: both required: %w", errdefs.ErrInvalidArgument)
	}
	if req.Tenant != "" {
		if err := names.Validate("tenant", req.Tenant); err != nil {
			return err
		}
	}
	if _, err := path.Match(req.Selector, ""); err != nil {
		return fmt.Errorf("selector %q: not a glob: %w", req.Selector, errdefs.ErrInvalidArgument)
	}
	if req.WaveSize == 0 {
		req.WaveSize = DefaultWaveSize
	}
	if req.WaveSize < 0 || req.WaveSize > MaxWaveSize {
		return fmt.Errorf("wave_size %d: between 1 and %d: %w", req.WaveSize, MaxWaveSize, errdefs.ErrInvalidArgument)
	}
	if req.MaxFailures < 0 {
		return fmt.Errorf("max_failures %d: must not be negative: %w", req.MaxFailures, errdefs.ErrInvalidArgument)
	}
	for _, c := range req.Validate {
		if len(c) == 0 || c[0] == "" {
			return fmt.Errorf("validate: an empty command: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Select returns the projects of tenant ("" = all) matching selector (""
// = all) whose current version sits on from, by layers: from is the
// imported base whose layers are the longest prefix of the version's.
func (r *Runner) Select(ctx context.Context, tenant, selector string, from registry.Image) ([]versions.RolloutProject, error) {
	projects, err := r.d.Store.ListAllProjects(ctx, tenant)
	if err != nil {
		return nil, err
	}
	bases, err := r.d.Migrator.Bases(ctx)
	if err != nil {
		return nil, err
	}
	var out []versions.RolloutProject
	for _, p := range projects {
		if selector != "" {
			if ok, _ := path.Match(selector, p.Name); !ok {
				continue
			}
		}
		if p.Current == 0 {
			continue
		}
		v, err := r.d.Store.GetVersion(ctx, p.Tenant, p.Name, p.Current)
		if err != nil {
			return nil, err
		}
		img, err := r.d.Reg.Get(ctx, v.Image)
		if err != nil {
			r.d.Log.Warn("rollout selection: read a current version", "tenant", p.Tenant, "project", p.Name, "err", err)
			continue
		}
		if base, ok := build.PickBase(bases, img); ok && base.Digest == from.Digest {
			out = append(out, versions.RolloutProject{Tenant: p.Tenant, Project: p.Name, OldVersion: p.Current})
		}
	}
	return out, nil
}

// Run runs a rollout until it ends, is canceled or the service stops
// (then it stays unfinished and runs again at the next start). It is the
// Func of the rollout's operation; its result is the rollout's view.
func (r *Runner) Run(ctx context.Context, op *ops.Op, job Job) (any, error) {
	res, err := r.run(ctx, op, job)
	if err != nil && ctx.Err() != nil {
		return nil, r.interrupted(ctx, job.Rollout)
	}
	if err != nil {
		// The rollout's own failure (its store): record it if the store
		// answers, so the row does not stay running without an operation.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, serr := r.d.Store.SetRolloutState(fctx, job.Rollout, []string{types.RolloutRunning, types.RolloutPaused},
			types.RolloutFailed, err.Error()); serr != nil {
			r.d.Log.Warn("rollout: record its failure", "rollout", job.Rollout, "err", serr)
		}
	}
	return res, err
}

func (r *Runner) run(ctx context.Context, op *ops.Op, job Job) (any, error) {
	for {
		ro, err := r.d.Store.GetRollout(ctx, job.Rollout)
		if err != nil {
			return nil, err
		}
		switch ro.State {
		case types.RolloutPaused:
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(r.d.Poll):
			}
			continue
		case types.RolloutRunning:
		default: // canceled, or ended by a previous run
			return r.finish(ctx, ro, "", "")
		}
		projects, err := r.d.Store.RolloutProjects(ctx, ro.ID)
		if err != nil {
			return nil, err
		}
		if !ro.DryRun && failures(projects) > ro.MaxFailures {
			return r.finish(ctx, ro, types.RolloutStoppedBudget,
				fmt.Sprintf("%d projects failed, more than max_failures %d", failures(projects), ro.MaxFailures))
		}
		var todo []versions.RolloutProject
		for _, p := range projects {
			if p.Status == types.RolloutProjectPending || p.Status == types.RolloutProjectRunning {
				todo = append(todo, p)
			}
		}
		if len(todo) == 0 {
			return r.finish(ctx, ro, types.RolloutSucceeded, "")
		}
		wave := todo[:min(len(todo), ro.WaveSize)]
		op.Event(ctx, "wave", fmt.Sprintf("wave of %d projects (%d left)", len(wave), len(todo)), map[string]any{"projects": projectNames(wave)})
		if err := r.runWave(ctx, op, ro, wave, failures(projects)); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return r.finish(ctx, ro, types.RolloutFailed, err.Error())
		}
	}
}

// interrupted is the error of a rollout whose operation's context ended:
// a canceled operation cancels the rollout; a stopping service leaves it
// as it is, to run again at the next start.
func (r *Runner) interrupted(ctx context.Context, id string) error {
	if r.d.Stopping.Err() == nil { // the operation was canceled
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, err := r.d.Store.SetRolloutState(fctx, id, []string{types.RolloutRunning, types.RolloutPaused},
			types.RolloutCanceled, "its operation was canceled"); err == nil {
			r.skipPending(fctx, id, "not started: the rollout was canceled")
		}
	}
	return ctx.Err()
}

// finish moves a running rollout to state (unless it is "" or the rollout
// already ended), marks the projects it did not start skipped, and
// returns its view.
func (r *Runner) finish(ctx context.Context, ro versions.Rollout, state, message string) (any, error) {
	var err error
	if state != "" && ro.State == types.RolloutRunning {
		if ro, err = r.d.Store.SetRolloutState(ctx, ro.ID, []string{types.RolloutRunning}, state, message); err != nil {
			return nil, err
		}
	}
	why := map[string]string{
		types.RolloutStoppedBudget: "not started: the failure budget was exceeded",
		types.RolloutCanceled:      "not started: the rollout was canceled",
		types.RolloutFailed:        "not started: the rollout failed",
	}[ro.State]
	if why != "" {
		r.skipPending(ctx, ro.ID, why)
	}
	return r.view(ctx, ro, false)
}

// skipPending marks the rollout's projects not settled skipped. The status
// change is a compare-and-swap: a project whose start landed between the
// list and the swap is listed again (a few passes).
func (r *Runner) skipPending(ctx context.Context, id, why string) {
	for pass := 0; pass < 5; pass++ {
		projects, err := r.d.Store.RolloutProjects(ctx, id)
		if err != nil {
			r.d.Log.Warn("rollout: list projects", "rollout", id, "err", err)
			return
		}
		left := 0
		for _, p := range projects {
			if p.Status == types.RolloutProjectPending || p.Status == types.RolloutProjectRunning {
				left++
				if err := r.d.Store.SetRolloutProjectStatus(ctx, id, p.Tenant, p.Project, p.Status, types.RolloutProjectSkipped, why); err != nil {
					r.d.Log.Warn("rollout: skip a project", "rollout", id, "project", p.Project, "err", err)
				}
			}
		}
		if left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func failures(ps []versions.RolloutProject) int {
	n := 0
	for _, p := range ps {
		if failure(p.Status) {
			n++
		}
	}
	return n
}

func projectNames(ps []versions.RolloutProject) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Tenant + "/" + p.Project
	}
	return out
}

// runWave migrates the wave's projects, at most the node's Concurrency at
// once. A project that has not taken its slot when the rollout stops being
// runnable (paused, canceled, over budget) is left for later.
func (r *Runner) runWave(ctx context.Context, op *ops.Op, ro versions.Rollout, wave []versions.RolloutProject, failed int) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for _, p := range wave {
		if err := r.acquire(ctx); err != nil {
			break
		}
		mu.Lock()
		stop := firstErr != nil || (!ro.DryRun && failed > ro.MaxFailures)
		mu.Unlock()
		if stop || !r.runnable(ctx, ro.ID) {
			r.release()
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer r.release()
			status, err := r.migrate(ctx, op, ro, p)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if failure(status) {
				failed++
			}
		}()
	}
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	return firstErr
}

// runnable reports whether the rollout is still running (not paused,
// canceled).
func (r *Runner) runnable(ctx context.Context, id string) bool {
	ro, err := r.d.Store.GetRollout(ctx, id)
	return err == nil && ro.State == types.RolloutRunning
}

// acquire takes one of the node's rollout slots, after yielding to the
// node's interactive work for at most YieldFor.
func (r *Runner) acquire(ctx context.Context) error {
	if r.d.Interactive != nil {
		deadline := time.Now().Add(r.d.YieldFor)
		for r.d.Interactive.InteractiveInFlight() > 0 && time.Now().Before(deadline) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	select {
	case r.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (r *Runner) release() { <-r.slots }

// trialID is the id of a project's trial instance in one attempt.
func trialID(project string) string {
	if len(project) > 40 {
		sum := sha256.Sum256([]byte(project))
		project = project[:30] + hex.EncodeToString(sum[:4])
	}
	return names.NewID(strings.TrimRight(project, "-_."))
}

// migrate migrates one project and records its status. The error is the
// rollout's own failure (its store); a project's failure is its status.
func (r *Runner) migrate(ctx context.Context, op *ops.Op, ro versions.Rollout, p versions.RolloutProject) (string, error) {
	if p.Trial != "" { // an attempt a restart interrupted
		r.d.Trials.RemoveIsolated(p.Trial)
	}
	trial := trialID(p.Project)
	if err := r.d.Store.StartRolloutProject(ctx, ro.ID, p.Tenant, p.Project, trial); err != nil {
		return "", err
	}
	res := versions.RolloutProject{Tenant: p.Tenant, Project: p.Project}
	proj, err := r.d.Store.GetProject(ctx, p.Tenant, p.Project)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		res.Status, res.Message = types.RolloutProjectSkipped, "the project was deleted"
	case err != nil:
		return "", err
	case proj.Current != p.OldVersion:
		res.Status = types.RolloutProjectSkipped
		res.Message = fmt.Sprintf("current moved from %d to %d since the rollout selected it", p.OldVersion, proj.Current)
	default:
		mr, merr := r.d.Migrator.MigrateProject(ctx, op, build.MigrateSpec{
			Tenant: p.Tenant, Project: p.Project, From: p.OldVersion, NewBase: ro.To, Trial: trial,
			Validate: ro.Validate, Switch: !ro.DryRun, ConflictsOnly: ro.DryRun, StopOnConflicts: !ro.AllowConflicts,
		})
		if merr != nil && ctx.Err() != nil {
			return "", ctx.Err() // stays running; a resumed rollout tries it again
		}
		outcome(&res, mr, merr, ro.DryRun)
	}
	mark := !ro.DryRun && failure(res.Status)
	if err := r.d.Store.FinishRolloutProject(context.WithoutCancel(ctx), ro.ID, res, mark); err != nil {
		return "", err
	}
	msg := fmt.Sprintf("%s/%s: %s", p.Tenant, p.Project, res.Status)
	if res.Message != "" {
		msg += ": " + res.Message
	}
	op.Event(ctx, "project", msg, map[string]any{"tenant": p.Tenant, "project": p.Project, "status": res.Status,
		"old_version": p.OldVersion, "new_version": res.NewVersion})
	return res.Status, nil
}

// outcome turns a migration's result into a project's status.
func outcome(res *versions.RolloutProject, mr types.MigrateResult, err error, dryRun bool) {
	res.NewVersion, res.Conflicts, res.DatabaseConflict = mr.Version, mr.Conflicts, mr.DatabaseConflict
	switch {
	case err != nil && mr.Version != 0:
		// The version was made and did not validate (marked failed).
		res.Status, res.Message = types.RolloutProjectValidationFailed, err.Error()
		if out, ok := errdefs.Details(err)["output"].(string); ok {
			res.Output = out
		}
	case err != nil:
		res.Status, res.Message = types.RolloutProjectFailed, err.Error()
	case dryRun && len(mr.Conflicts) > 0:
		res.Status = types.RolloutProjectConflicts
		res.Message = conflictMessage(mr)
	case dryRun:
		res.Status = types.RolloutProjectClean
	case mr.Version == 0: // stopped on conflicts
		res.Status = types.RolloutProjectConflicts
		res.Message = conflictMessage(mr) + "; not moved"
	case mr.Current:
		res.Status = types.RolloutProjectSwitched
	case mr.Conflict:
		res.Status = types.RolloutProjectSkipped
		res.Message = fmt.Sprintf("current moved during the migration; version %d is kept, not current", mr.Version)
	default:
		res.Status, res.Message = types.RolloutProjectFailed, "migrated but not switched"
	}
}

func conflictMessage(mr types.MigrateResult) string {
	msg := fmt.Sprintf("%d paths changed by both the base update and the project", len(mr.Conflicts))
	if mr.DatabaseConflict {
		msg += ", a package database among them"
	}
	return msg
}

// Get returns a rollout with its projects.
func (r *Runner) Get(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	if err := admin(p, "a rollout"); err != nil {
		return types.Rollout{}, err
	}
	if err := names.ValidateOpID(id); err != nil {
		return types.Rollout{}, fmt.Errorf("rollout id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	ro, err := r.d.Store.GetRollout(ctx, id)
	if err != nil {
		return types.Rollout{}, err
	}
	return r.view(ctx, ro, true)
}

// List returns the rollouts, newest first, with their totals.
func (r *Runner) List(ctx context.Context, p types.Principal) ([]types.Rollout, error) {
	if err := admin(p, "listing rollouts"); err != nil {
		return nil, err
	}
	ros, err := r.d.Store.ListRollouts(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(ros))
	for i, ro := range ros {
		ids[i] = ro.ID
	}
	totals, err := r.d.Store.RolloutTotals(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make([]types.Rollout, 0, len(ros))
	for _, ro := range ros {
		v := toRollout(ro)
		if t := totals[ro.ID]; t != nil {
			v.Totals = t
		}
		out = append(out, v)
	}
	return out, nil
}

func toRollout(ro versions.Rollout) types.Rollout {
	return types.Rollout{ID: ro.ID, OperationID: ro.OperationID, State: ro.State, Message: ro.Message, From: ro.From, To: ro.To,
		FromName: ro.FromName, ToName: ro.ToName, Tenant: ro.Tenant, Selector: ro.Selector, Validate: ro.Validate,
		WaveSize: ro.WaveSize, MaxFailures: ro.MaxFailures, DryRun: ro.DryRun, AllowConflicts: ro.AllowConflicts,
		Totals: map[string]int{}, CreatedAt: ro.CreatedAt, UpdatedAt: ro.UpdatedAt, FinishedAt: ro.FinishedAt}
}

func (r *Runner) view(ctx context.Context, ro versions.Rollout, withProjects bool) (types.Rollout, error) {
	out := toRollout(ro)
	ps, err := r.d.Store.RolloutProjects(ctx, ro.ID)
	if err != nil {
		return types.Rollout{}, err
	}
	for _, p := range ps {
		out.Totals[p.Status]++
		if withProjects {
			conflicts := p.Conflicts
			if conflicts == nil {
				conflicts = []string{}
			}
			out.Projects = append(out.Projects, types.RolloutProject{Tenant: p.Tenant, Project: p.Project, Status: p.Status,
				OldVersion: p.OldVersion, NewVersion: p.NewVersion, Conflicts: conflicts, DatabaseConflict: p.DatabaseConflict,
				Message: p.Message, Output: p.Output, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt})
		}
	}
	return out, nil
}

// Pause stops a running rollout from starting more migrations; those
// running finish.
func (r *Runner) Pause(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	return r.move(ctx, p, id, []string{types.RolloutRunning}, types.RolloutPaused, "paused")
}

// Resume lets a paused rollout go on.
func (r *Runner) Resume(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	return r.move(ctx, p, id, []string{types.RolloutPaused}, types.RolloutRunning, "resumed")
}

// Cancel ends a running or paused rollout: no more migrations start
// (those running finish); the projects not started are reported skipped.
// What it switched stays switched (see Rollback).
func (r *Runner) Cancel(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	return r.move(ctx, p, id, []string{types.RolloutRunning, types.RolloutPaused}, types.RolloutCanceled, "canceled")
}

func (r *Runner) move(ctx context.Context, p types.Principal, id string, from []string, to, what string) (types.Rollout, error) {
	if err := admin(p, "a rollout"); err != nil {
		return types.Rollout{}, err
	}
	if err := names.ValidateOpID(id); err != nil {
		return types.Rollout{}, fmt.Errorf("rollout id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	ro, err := r.d.Store.SetRolloutState(ctx, id, from, to, "")
	if err != nil {
		return types.Rollout{}, err
	}
	r.event(ctx, ro, what, "the rollout was "+what)
	return r.view(ctx, ro, true)
}

func (r *Runner) event(ctx context.Context, ro versions.Rollout, typ, msg string) {
	if ro.OperationID == "" {
		return
	}
	// An ended operation takes no more events (a rollback's): its report
	// is the rollout's rows.
	if _, err := r.d.Store.AppendEvent(ctx, ro.OperationID, typ, msg, nil); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		r.d.Log.Warn("rollout event", "rollout", ro.ID, "err", err)
	}
}

// Rollback switches every project the rollout switched back to its old
// version, by compare-and-swap from the new one: a project whose current
// changed since stays as it is, reported in its message. The rollout must
// have ended (pause or cancel a running one first).
func (r *Runner) Rollback(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	if err := admin(p, "a rollback"); err != nil {
		return types.Rollout{}, err
	}
	if err := names.ValidateOpID(id); err != nil {
		return types.Rollout{}, fmt.Errorf("rollout id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	ro, err := r.d.Store.GetRollout(ctx, id)
	if err != nil {
		return types.Rollout{}, err
	}
	ended := []string{types.RolloutSucceeded, types.RolloutStoppedBudget, types.RolloutFailed, types.RolloutCanceled}
	if !slices.Contains(ended, ro.State) {
		return types.Rollout{}, fmt.Errorf("rollout %s is %s: cancel it (or let it end) before a rollback: %w", id, ro.State, errdefs.ErrFailedPrecondition)
	}
	if ro.DryRun {
		return types.Rollout{}, fmt.Errorf("rollout %s is a dry run: it moved nothing: %w", id, errdefs.ErrFailedPrecondition)
	}
	// Claim it first, so two rollbacks do not race.
	if ro, err = r.d.Store.SetRolloutState(ctx, id, ended, types.RolloutRolledBack, ""); err != nil {
		return types.Rollout{}, err
	}
	ps, err := r.d.Store.RolloutProjects(ctx, id)
	if err != nil {
		return types.Rollout{}, err
	}
	back, kept := 0, 0
	for _, rp := range ps {
		if rp.Status != types.RolloutProjectSwitched {
			continue
		}
		_, err := r.d.Store.SetCurrent(ctx, rp.Tenant, rp.Project, rp.OldVersion, rp.NewVersion)
		switch {
		case err == nil:
			back++
			err = r.d.Store.SetRolloutProjectStatus(ctx, id, rp.Tenant, rp.Project, rp.Status, types.RolloutProjectRolledBack,
				fmt.Sprintf("current is %d again", rp.OldVersion))
		case errors.Is(err, errdefs.ErrConflict), errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrFailedPrecondition):
			kept++
			err = r.d.Store.SetRolloutProjectStatus(ctx, id, rp.Tenant, rp.Project, rp.Status, rp.Status,
				"not rolled back: "+err.Error())
		}
		if err != nil {
			return types.Rollout{}, err
		}
	}
	r.event(ctx, ro, "rolled_back", fmt.Sprintf("%d projects switched back, %d left as they are (current moved since)", back, kept))
	return r.view(ctx, ro, true)
}
