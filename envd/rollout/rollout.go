// Package rollout runs fleet upgrades: every selected project whose
// current version sits on a base image (found by layers, as migrations
// find it) is migrated onto another, wave by wave, each validated with its
// own declared commands plus the rollout's, switched only where validation
// passed (compare-and-swap from the current it had when selected), and
// reported per project. A rollout runs as an operation of kind rollout on
// the node that created it, is paused, resumed, canceled and rolled back
// through its row, and runs again after a restart (the projects it had
// finished stay finished). Its rollback is an operation of kind rollback,
// run again after a restart too.
//
// Terms: a project's old version is its current when the rollout selected
// it; its new version is the migration version the rollout made. A
// failure is a project whose status is validation_failed, conflicts or
// failed; when a real rollout has more than max_failures of them it stops
// (stopped_budget). Pacing: a node runs at most Concurrency rollout
// migrations at once, and a migration waits before it starts while the
// node runs interactive work (saves, restores, builds), up to a bound, so
// a rollout never takes a slot a user is waiting for.
//
// Switches: the rollout (old_version -> new_version) and its rollback
// (new_version -> old_version) move a project's current in three steps,
// any of which may be the last a crash lets run: the intent (the
// project's switching_to), the compare-and-swap of current, the record of
// its outcome (status, switching_to cleared). A project found with an
// intent is settled by its current: already on switching_to, the swap was
// made; still on the version it was swapped from, it was not (the rollout
// makes it, a canceled rollout does not); on a third version, someone
// else moved it and it is left as it is.
package rollout

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
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
	SetRolloutSwitching(ctx context.Context, id string, p versions.RolloutProject, status string, to int) error
	StartRollback(ctx context.Context, id string, op versions.Operation) (versions.Rollout, versions.Operation, bool, error)
	GetOperation(ctx context.Context, tenant, id string) (versions.Operation, error)
	ListAllProjects(ctx context.Context, tenant string) ([]versions.Project, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	SetCurrent(ctx context.Context, tenant, project string, n, expected int) (versions.Project, error)
	AppendEvent(ctx context.Context, opID, typ, message string, data any) (versions.Event, error)
}

// Migrator migrates one project and knows the imported bases
// (builder.Builder).
type Migrator interface {
	MigrateProject(ctx context.Context, ev builder.Events, s builder.MigrateSpec) (types.MigrateResult, error)
	Bases(ctx context.Context) ([]builder.Base, error)
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
	CancelOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	Record(p types.Principal, spec ops.Spec) (versions.Operation, error)
	Launch(op versions.Operation, run ops.Func)
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
	// Poll is how often a paused rollout looks at its state, and a
	// rollback at the rollout's operation; 0 = 1s.
	Poll time.Duration
	// CrashPoint, when set, is called at each Step of a switch with the
	// operation's context and the project (tests: to stop the work there
	// as a kill would). nil in service.
	CrashPoint func(ctx context.Context, step Step, tenant, project string)
}

// Step is a point of a switch where a crash may stop it (Deps.CrashPoint).
type Step string

// The steps of a switch, in order for each project, and the two ends of a
// rollback.
const (
	StepSwitchIntent   Step = "switch-intent"   // the rollout's intent is written; current not swapped
	StepSwitched       Step = "switched"        // current swapped to new_version; not recorded
	StepRollbackStart  Step = "rollback-start"  // the rollback's operation began; nothing switched back by it
	StepRollbackIntent Step = "rollback-intent" // the rollback's intent is written; current not swapped
	StepRolledBack     Step = "rolled-back"     // current swapped back to old_version; not recorded
	StepRollbackEnd    Step = "rollback-end"    // every project settled; the rollout not yet rolled_back
)

func (r *Runner) crashPoint(ctx context.Context, step Step, tenant, project string) {
	if r.d.CrashPoint != nil {
		r.d.CrashPoint(ctx, step, tenant, project)
	}
}

// switchTimeout bounds a swap and its record, which run to the end even
// when their operation is canceled meanwhile.
const switchTimeout = 30 * time.Second

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

// CreateRollout selects the projects and starts the rollout's operation. The
// selection is made now: projects (of req.Tenant, or every tenant) whose
// name matches req.Selector and whose current version sits on req.From.
func (r *Runner) CreateRollout(ctx context.Context, p types.Principal, req types.CreateRolloutRequest, idempotencyKey string) (types.Rollout, error) {
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
		return r.GetRollout(ctx, p, op.Target)
	}
	if err := r.d.Store.SetRolloutOperation(ctx, rec.ID, op.ID); err != nil {
		return types.Rollout{}, err
	}
	return r.GetRollout(ctx, p, rec.ID)
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
		if base, ok := builder.PickBase(bases, img); ok && base.Digest == from.Digest {
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
			if p.Status == types.RolloutProjectRunning && p.SwitchingTo != 0 {
				// Its switch may have been made: settled by its current,
				// never reported skipped while the project is moved.
				if _, err := r.settleSwitch(ctx, id, p); err != nil {
					r.d.Log.Warn("rollout: settle a switch", "rollout", id, "project", p.Project, "err", err)
				}
				continue
			}
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
	if p.SwitchingTo != 0 {
		// A restart interrupted its switch: migrated and validated, only
		// the swap (perhaps made) and its record are left.
		res := p
		res.NewVersion = p.SwitchingTo
		var err error
		if res.Status, res.Message, err = r.swapForward(ctx, p, p.SwitchingTo); err != nil {
			return "", err
		}
		return r.record(ctx, op, ro, p, res)
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
		// The switch is this package's (switchForward), not the
		// migration's, so that it is written down before it is made.
		mr, merr := r.d.Migrator.MigrateProject(ctx, op, builder.MigrateSpec{
			Tenant: p.Tenant, Project: p.Project, From: p.OldVersion, NewBase: ro.To, Trial: trial,
			Validate: ro.Validate, ConflictsOnly: ro.DryRun, StopOnConflicts: !ro.AllowConflicts,
		})
		if merr != nil && ctx.Err() != nil {
			return "", ctx.Err() // stays running; a resumed rollout tries it again
		}
		outcome(&res, mr, merr, ro.DryRun)
		if res.Status == types.RolloutProjectRunning { // made and validated
			if res.Status, res.Message, err = r.switchForward(ctx, ro.ID, p, res); err != nil {
				return "", err
			}
		}
	}
	return r.record(ctx, op, ro, p, res)
}

// record writes how a project's part of the rollout ended (and ends its
// intent) and reports it in the rollout's log.
func (r *Runner) record(ctx context.Context, op *ops.Op, ro versions.Rollout, p, res versions.RolloutProject) (string, error) {
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
	default: // made and validated: still to switch
		res.Status = types.RolloutProjectRunning
	}
}

// switchForward makes res.NewVersion the project's current: the intent,
// then the swap (swapForward); the caller records the outcome. It returns
// the project's status and message.
func (r *Runner) switchForward(ctx context.Context, id string, p, res versions.RolloutProject) (string, string, error) {
	if err := r.d.Store.SetRolloutSwitching(ctx, id, res, types.RolloutProjectRunning, res.NewVersion); err != nil {
		return "", "", err
	}
	r.crashPoint(ctx, StepSwitchIntent, p.Tenant, p.Project)
	return r.swapForward(ctx, p, res.NewVersion)
}

// swapForward swaps the project's current from its old version to v, or
// finds it swapped already (a crash lost the record), and returns the
// project's status and message. The swap is made in a context of its
// own: once the intent is written, a cancel does not leave it unknown.
func (r *Runner) swapForward(ctx context.Context, p versions.RolloutProject, v int) (string, string, error) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), switchTimeout)
	defer cancel()
	_, err := r.d.Store.SetCurrent(sctx, p.Tenant, p.Project, v, p.OldVersion)
	r.crashPoint(ctx, StepSwitched, p.Tenant, p.Project)
	switch {
	case err == nil:
		return types.RolloutProjectSwitched, "", nil
	case errors.Is(err, errdefs.ErrConflict):
		proj, gerr := r.d.Store.GetProject(sctx, p.Tenant, p.Project)
		if gerr == nil && proj.Current == v {
			return types.RolloutProjectSwitched, "", nil
		}
		return types.RolloutProjectSkipped, fmt.Sprintf("current moved during the migration; version %d is kept, not current", v), nil
	case errors.Is(err, errdefs.ErrNotFound):
		return types.RolloutProjectSkipped, "not switched: " + err.Error(), nil
	case errors.Is(err, errdefs.ErrFailedPrecondition):
		return types.RolloutProjectFailed, "not switched: " + err.Error(), nil
	}
	return "", "", err
}

// settleSwitch records the outcome of a project's switch in flight that
// will not be made now (its rollout ended): switched if current is on it,
// else skipped. It makes no swap. It returns the project's status.
func (r *Runner) settleSwitch(ctx context.Context, id string, p versions.RolloutProject) (string, error) {
	res := p
	res.NewVersion = p.SwitchingTo
	proj, err := r.d.Store.GetProject(ctx, p.Tenant, p.Project)
	switch {
	case err == nil && proj.Current == p.SwitchingTo:
		res.Status, res.Message = types.RolloutProjectSwitched, ""
	case err == nil:
		res.Status = types.RolloutProjectSkipped
		res.Message = fmt.Sprintf("the rollout ended during its switch; current is %d; version %d is kept, not current", proj.Current, p.SwitchingTo)
	case errors.Is(err, errdefs.ErrNotFound):
		res.Status, res.Message = types.RolloutProjectSkipped, "the project was deleted"
	default:
		return "", err
	}
	return res.Status, r.d.Store.FinishRolloutProject(ctx, id, res, false)
}

func conflictMessage(mr types.MigrateResult) string {
	msg := fmt.Sprintf("%d paths changed by both the base update and the project", len(mr.Conflicts))
	if mr.DatabaseConflict {
		msg += ", a package database among them"
	}
	return msg
}

// GetRollout returns a rollout with its projects.
func (r *Runner) GetRollout(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
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

// ListRollouts returns the rollouts, newest first, with their totals.
func (r *Runner) ListRollouts(ctx context.Context, p types.Principal) ([]types.Rollout, error) {
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
		Totals: map[string]int{}, CreatedAt: ro.CreatedAt, UpdatedAt: ro.UpdatedAt, FinishedAt: ro.FinishedAt,
		RollbackOperationID: ro.RollbackOperationID}
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

// RolloutAction pauses, resumes or cancels a rollout; action is "pause",
// "resume" or "cancel".
func (r *Runner) RolloutAction(ctx context.Context, p types.Principal, id, action string) (types.Rollout, error) {
	switch action {
	case "pause":
		return r.Pause(ctx, p, id)
	case "resume":
		return r.Resume(ctx, p, id)
	case "cancel":
		return r.Cancel(ctx, p, id)
	}
	return types.Rollout{}, fmt.Errorf("rollout action %q: want pause, resume or cancel: %w", action, errdefs.ErrNotFound)
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

// RollbackRollout starts the rollback of a rollout that ended (cancel a running
// or paused one first) as an operation of kind rollback (RunRollback), or
// returns the one that stands for it: the rollback operation still
// running, or the one that finished it. A rollback whose operation
// failed or was canceled is taken over by a new operation, which goes on
// where it stopped: asking again is always safe.
func (r *Runner) RollbackRollout(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	if err := admin(p, "a rollback"); err != nil {
		return types.Operation{}, err
	}
	if err := names.ValidateOpID(id); err != nil {
		return types.Operation{}, fmt.Errorf("rollout id %q: %w", id, errdefs.ErrInvalidArgument)
	}
	job := Job{Rollout: id}
	rec, err := r.d.Ops.Record(p, ops.Spec{Kind: types.OpKindRollback, Target: id, Scope: "rollouts", Asked: job, Job: job})
	if err != nil {
		return types.Operation{}, err
	}
	_, op, created, err := r.d.Store.StartRollback(ctx, id, rec)
	if err != nil {
		return types.Operation{}, err
	}
	if created {
		r.d.Ops.Launch(op, func(ctx context.Context, o *ops.Op) (any, error) { return r.RunRollback(ctx, o, job) })
	}
	return ops.View(op), nil
}

// RunRollback switches every project the rollout switched back to its old
// version, by compare-and-swap from the new one: a project whose current
// changed since stays as it is, reported in its message. It is the Func
// of a rollback operation, run again after a restart; its result is the
// rollout's view. It starts once the rollout's own operation has ended
// (the migrations a cancel let finish included), so that no switch of the
// rollout lands behind it.
func (r *Runner) RunRollback(ctx context.Context, op *ops.Op, job Job) (any, error) {
	ro, err := r.d.Store.GetRollout(ctx, job.Rollout)
	if err != nil {
		return nil, err
	}
	if ro.RollbackOperationID != op.ID {
		return nil, fmt.Errorf("the rollback of rollout %s is operation %s now: %w", ro.ID, ro.RollbackOperationID, errdefs.ErrFailedPrecondition)
	}
	if ro.State == types.RolloutRolledBack { // a run the record of whose end was lost
		return r.view(ctx, ro, true)
	}
	r.crashPoint(ctx, StepRollbackStart, "", "")
	if err := r.awaitOperation(ctx, op, ro.OperationID); err != nil {
		return nil, err
	}
	ps, err := r.d.Store.RolloutProjects(ctx, ro.ID)
	if err != nil {
		return nil, err
	}
	back, kept := 0, 0
	for _, rp := range ps {
		status, msg, err := r.revert(ctx, ro.ID, rp)
		if err != nil {
			return nil, err
		}
		switch status {
		case types.RolloutProjectRolledBack:
			back++
		case types.RolloutProjectSwitched:
			kept++
		default:
			continue
		}
		op.Event(ctx, "project", fmt.Sprintf("%s/%s: %s", rp.Tenant, rp.Project, orStatus(msg, status)),
			map[string]any{"tenant": rp.Tenant, "project": rp.Project, "status": status, "old_version": rp.OldVersion})
	}
	r.crashPoint(ctx, StepRollbackEnd, "", "")
	if ro, err = r.d.Store.SetRolloutState(ctx, ro.ID, []string{types.RolloutRollingBack}, types.RolloutRolledBack, ""); err != nil {
		return nil, err
	}
	op.Event(ctx, "rolled_back", fmt.Sprintf("%d projects switched back, %d left as they are (current moved since)", back, kept),
		map[string]any{"rolled_back": back, "kept": kept})
	return r.view(ctx, ro, true)
}

func orStatus(msg, status string) string {
	if msg == "" {
		return status
	}
	return status + ": " + msg
}

// awaitOperation waits until operation id (the rollout's) has ended.
func (r *Runner) awaitOperation(ctx context.Context, op *ops.Op, id string) error {
	told := false
	for {
		o, err := r.d.Store.GetOperation(ctx, "", id)
		if errors.Is(err, errdefs.ErrNotFound) || (err == nil && o.State != types.OpPending && o.State != types.OpRunning) {
			return nil
		}
		if err != nil {
			return err
		}
		if !told {
			op.Event(ctx, "waiting", fmt.Sprintf("waiting for the rollout's operation %s to end", id), nil)
			told = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.d.Poll):
		}
	}
}

// revert switches one project of the rollout back, in three steps like
// the rollout's switch: the intent (switching_to = old_version), the
// compare-and-swap from new_version, the record. A project found switched
// back already (a crash lost the record) is recognized by its current. It
// returns the status recorded: rolled_back, switched (left as it is, with
// msg saying why) or another status (not the rollout's to revert).
func (r *Runner) revert(ctx context.Context, id string, rp versions.RolloutProject) (status, msg string, err error) {
	if rp.Status == types.RolloutProjectRunning && rp.SwitchingTo != 0 {
		// The rollout's own switch in flight when it ended without
		// settling it (its store failed): settled by current first.
		if rp.Status, err = r.settleSwitch(ctx, id, rp); err != nil {
			return "", "", err
		}
		rp.NewVersion, rp.SwitchingTo = rp.SwitchingTo, 0
	}
	if rp.Status != types.RolloutProjectSwitched {
		return rp.Status, "", nil
	}
	if rp.SwitchingTo != rp.OldVersion {
		if err := r.d.Store.SetRolloutSwitching(ctx, id, rp, types.RolloutProjectSwitched, rp.OldVersion); err != nil {
			return "", "", err
		}
	}
	r.crashPoint(ctx, StepRollbackIntent, rp.Tenant, rp.Project)
	_, err = r.d.Store.SetCurrent(ctx, rp.Tenant, rp.Project, rp.OldVersion, rp.NewVersion)
	r.crashPoint(ctx, StepRolledBack, rp.Tenant, rp.Project)
	status = types.RolloutProjectRolledBack
	switch {
	case err == nil:
	case errors.Is(err, errdefs.ErrConflict):
		proj, gerr := r.d.Store.GetProject(ctx, rp.Tenant, rp.Project)
		if gerr != nil && !errors.Is(gerr, errdefs.ErrNotFound) {
			return "", "", gerr
		}
		if gerr != nil || proj.Current != rp.OldVersion {
			status, msg = types.RolloutProjectSwitched, "not rolled back: "+err.Error()
		}
	case errors.Is(err, errdefs.ErrNotFound), errors.Is(err, errdefs.ErrFailedPrecondition):
		status, msg = types.RolloutProjectSwitched, "not rolled back: "+err.Error()
	default:
		return "", "", err // the intent stays; the next run settles it
	}
	record := msg
	if status == types.RolloutProjectRolledBack {
		record = fmt.Sprintf("current is %d again", rp.OldVersion)
	}
	if err := r.d.Store.SetRolloutProjectStatus(ctx, id, rp.Tenant, rp.Project, types.RolloutProjectSwitched, status, record); err != nil {
		return "", "", err
	}
	return status, msg, nil
}
