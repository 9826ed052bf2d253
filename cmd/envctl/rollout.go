package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/internal/shellwords"
)

// validateFlags are --validate (a command split as a POSIX shell splits
// words, quotes kept together, nothing expanded) and --validate-sh (a
// script run by sh -c), both repeatable, in the order given per flag:
// --validate ones first.
type validateFlags struct{ words, scripts []string }

func (v *validateFlags) add(f *pflag.FlagSet) {
	f.StringArrayVar(&v.words, "validate", nil, `a validation command, split into words as a shell would ('sh -c "test -e /x"'); repeat`)
	f.StringArrayVar(&v.scripts, "validate-sh", nil, "a validation script run by sh -c; repeat")
}

// commands returns the argv of each command.
func (v *validateFlags) commands() ([][]string, error) {
	var out [][]string
	for _, line := range v.words {
		words, err := shellwords.Split(line)
		if err != nil {
			return nil, usageError{fmt.Errorf("--validate %q: %v", line, err)}
		}
		if len(words) == 0 {
			return nil, usageError{fmt.Errorf("--validate %q: an empty command", line)}
		}
		out = append(out, words)
	}
	for _, script := range v.scripts {
		if strings.TrimSpace(script) == "" {
			return nil, usageError{fmt.Errorf("--validate-sh: an empty script")}
		}
		out = append(out, []string{"sh", "-c", script})
	}
	return out, nil
}

func (a *app) rolloutCommand() *cobra.Command {
	var (
		req      types.CreateRolloutRequest
		validate validateFlags
		wait     bool
		key      string
	)
	create := &cobra.Command{
		Use:   "create --from IMAGE --to IMAGE [--tenant T] [--project-selector GLOB] [--validate CMD]... [--wave-size N] [--max-failures K] [--dry-run]",
		Short: "Move every project on one base image to another, in waves",
		Long: `Start a rollout (admin token): the projects (of --tenant, or every tenant)
whose name matches --project-selector (a glob; default all) and whose CURRENT
version sits on --from (found by layers) are migrated onto --to, --wave-size
at a time. Each is validated in a trial instance with its own declared
commands ("envctl project validation") and the --validate ones, and switched
only where validation passed, by compare-and-swap (a project whose current
moved meanwhile is reported skipped). A project whose files conflict with the
base update is reported "conflicts" and not moved, unless --allow-conflicts.
When more than --max-failures projects fail, the rollout stops
(stopped_budget). --dry-run only reports each project's conflicts.

Prints the rollout; with --wait follows it and prints its report. Exit codes:
0 started (with --wait: ended with no failed project); 1 error (with --wait:
a project failed or the rollout stopped).`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if req.From == "" || req.To == "" {
				return usageError{fmt.Errorf("--from and --to are required")}
			}
			if req.Validate, err = validate.commands(); err != nil {
				return err
			}
			ro, err := c.CreateRollout(cmd.Context(), req, client.WithIdempotencyKey(key))
			if err != nil {
				return err
			}
			if !wait {
				return a.emit(ro, func(w io.Writer) { rolloutDetail(w, ro) })
			}
			if ro.OperationID != "" {
				if _, err := a.follow(cmd.Context(), c, "rollout", types.Operation{ID: ro.OperationID}); err != nil {
					return err
				}
			}
			if ro, err = c.GetRollout(cmd.Context(), ro.ID); err != nil {
				return err
			}
			return a.rolloutOutcome(ro)
		},
	}
	f := create.Flags()
	f.StringVar(&req.From, "from", "", "the base the projects sit on: an imported image name or repo@digest")
	f.StringVar(&req.To, "to", "", "the new base")
	f.StringVar(&req.Tenant, "tenant", "", "only this tenant's projects (default: every tenant)")
	f.StringVar(&req.Selector, "project-selector", "", "only projects whose name matches this glob")
	validate.add(f)
	f.IntVar(&req.WaveSize, "wave-size", 0, "projects migrated at once (default 5)")
	f.IntVar(&req.MaxFailures, "max-failures", 0, "stop when more projects than this failed")
	f.BoolVar(&req.DryRun, "dry-run", false, "report each project's conflicts, move nothing")
	f.BoolVar(&req.AllowConflicts, "allow-conflicts", false, "migrate projects with conflicts too (their files win)")
	f.BoolVar(&wait, "wait", false, "follow the rollout and print its report")
	f.StringVar(&key, "idempotency-key", "", "retrying with the same key returns the same rollout")

	ls := &cobra.Command{
		Use:   "ls",
		Short: "List rollouts with their totals",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) ([]types.Rollout, error) {
				return c.ListRollouts(ctx)
			}, rolloutTable)
		},
	}
	show := &cobra.Command{
		Use:   "show ID",
		Short: "Show a rollout's report: each project's status, versions and failure",
		Args:  exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Rollout, error) {
				return c.GetRollout(ctx, args[0])
			}, rolloutDetail)
		},
	}
	action := func(name, short, long string, do func(c *client.Client, ctx context.Context, id string) (types.Rollout, error)) *cobra.Command {
		return &cobra.Command{
			Use: name + " ID", Short: short, Long: long, Args: exactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Rollout, error) {
					return do(c, ctx, args[0])
				}, rolloutDetail)
			},
		}
	}
	pause := action("pause", "Start no more migrations until resumed (those running finish)", "",
		(*client.Client).PauseRollout)
	resume := action("resume", "Let a paused rollout go on", "", (*client.Client).ResumeRollout)
	cancel := action("cancel", "End a rollout: no more migrations start; what it switched stays", "",
		(*client.Client).CancelRollout)
	var noWait bool
	rollback := &cobra.Command{
		Use:   "rollback ID [--no-wait]",
		Short: "Switch every project the rollout moved back to its old version",
		Long: `Switch every project the rollout switched back to the version it had, by
compare-and-swap: a project whose current changed since the rollout is left as
it is and reported. The rollout must have ended (cancel a running one first).

The rollback is an operation (kind rollback): this waits for it and prints the
rollout's report, unless --no-wait (then it prints the operation; follow it
with "envctl op watch ID"). It survives a restart of envd, and asking again is
safe: it returns the rollback still running (or the one that finished it), and
a rollback that failed or was canceled goes on where it stopped.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runOperation(a, cmd, "rollback", func(ctx context.Context, c *client.Client) (types.Operation, error) {
				return c.RollbackRollout(ctx, args[0])
			}, noWait, rolloutDetail, nil)
		},
	}
	rollback.Flags().BoolVar(&noWait, "no-wait", false, "print the operation and do not wait")
	return group("rollout", "Fleet upgrades: move projects from one base image to another", create, ls, show, pause, resume, cancel, rollback)
}

// rolloutOutcome prints a finished rollout and fails when it did not end
// well.
func (a *app) rolloutOutcome(ro types.Rollout) error {
	if err := a.emit(ro, func(w io.Writer) { rolloutDetail(w, ro) }); err != nil {
		return err
	}
	failed := ro.Totals[types.RolloutProjectValidationFailed] + ro.Totals[types.RolloutProjectFailed]
	if !ro.DryRun {
		failed += ro.Totals[types.RolloutProjectConflicts]
	}
	if ro.State != types.RolloutSucceeded || failed > 0 {
		return &exitCodeError{code: exitError, err: fmt.Errorf("rollout %s: %s, %d projects failed", ro.ID, ro.State, failed)}
	}
	return nil
}

func totalsText(t map[string]int) string {
	keys := make([]string, 0, len(t))
	for k := range t {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, t[k]))
	}
	return orDash(strings.Join(parts, " "))
}

func rolloutTable(w io.Writer, rs []types.Rollout) {
	row(w, "ID", "STATE", "FROM", "TO", "TENANT", "DRY RUN", "TOTALS", "CREATED")
	for _, r := range rs {
		row(w, r.ID, r.State, orDash(r.FromName), orDash(r.ToName), orDash(r.Tenant), yesNo(r.DryRun), totalsText(r.Totals), formatTime(r.CreatedAt))
	}
}

func rolloutDetail(w io.Writer, r types.Rollout) {
	row(w, "ID:", r.ID)
	row(w, "STATE:", r.State)
	if r.Message != "" {
		row(w, "MESSAGE:", r.Message)
	}
	row(w, "FROM:", r.FromName+" ("+r.From+")")
	row(w, "TO:", r.ToName+" ("+r.To+")")
	row(w, "TENANT:", orDash(r.Tenant))
	row(w, "SELECTOR:", orDash(r.Selector))
	val := make([]string, 0, len(r.Validate))
	for _, c := range r.Validate {
		val = append(val, shellwords.Join(c))
	}
	row(w, "VALIDATE:", orDash(strings.Join(val, "; ")))
	row(w, "WAVES:", fmt.Sprintf("%d at a time, at most %d failures", r.WaveSize, r.MaxFailures))
	row(w, "DRY RUN:", yesNo(r.DryRun))
	row(w, "OPERATION:", orDash(r.OperationID))
	if r.RollbackOperationID != "" {
		row(w, "ROLLBACK:", r.RollbackOperationID)
	}
	row(w, "TOTALS:", totalsText(r.Totals))
	row(w, "CREATED:", formatTime(r.CreatedAt))
	if len(r.Projects) == 0 {
		return
	}
	row(w)
	row(w, "TENANT", "PROJECT", "STATUS", "OLD", "NEW", "CONFLICTS", "MESSAGE")
	for _, p := range r.Projects {
		newV := "-"
		if p.NewVersion != 0 {
			newV = fmt.Sprint(p.NewVersion)
		}
		conflicts := fmt.Sprint(len(p.Conflicts))
		if len(p.Conflicts) > 0 {
			conflicts += " (" + strings.Join(p.Conflicts[:min(3, len(p.Conflicts))], ", ")
			if len(p.Conflicts) > 3 {
				conflicts += ", ..."
			}
			conflicts += ")"
		}
		row(w, p.Tenant, p.Project, p.Status, p.OldVersion, newV, conflicts, orDash(oneLine(p.Message)))
		if p.Output != "" {
			row(w, "", "", "", "", "", "output:", oneLine(lastLines(p.Output, 3)))
		}
	}
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return strings.ReplaceAll(s, "\n", " | ")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// projectValidationCommand is "envctl project validation".
func (a *app) projectValidationCommand() *cobra.Command {
	var (
		validate validateFlags
		clear    bool
	)
	cmd := &cobra.Command{
		Use:   "validation PROJECT [--validate CMD]... [--validate-sh SCRIPT]... | --clear",
		Short: "Set the commands every migration of the project runs in its trial instance",
		Long: `Set the project's declared validation: commands every migration of it (a
rollout's included) runs in a trial instance of the new version before it can
become current; each must exit 0. --validate is split into words as a POSIX
shell would (quotes group, nothing is expanded); --validate-sh SCRIPT runs
"sh -c SCRIPT". The commands replace the previous ones; --clear removes them.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Project, error) {
				cmds, err := validate.commands()
				if err != nil {
					return types.Project{}, err
				}
				if len(cmds) == 0 && !clear {
					return types.Project{}, usageError{fmt.Errorf("give --validate, --validate-sh or --clear")}
				}
				if clear && len(cmds) > 0 {
					return types.Project{}, usageError{fmt.Errorf("--clear and commands: give one of them")}
				}
				return c.SetProjectValidation(ctx, args[0], cmds)
			}, projectDetail)
		},
	}
	validate.add(cmd.Flags())
	cmd.Flags().BoolVar(&clear, "clear", false, "remove the declared validation")
	return cmd
}

// emitFailed prints a failed operation: with -o json or yaml the whole
// operation (its error, and the result it carries, such as a failed
// migration's version and conflicts); as a table the result's rows, if
// any. The error itself goes to stderr as for any failure.
func emitFailed[T any](a *app, op types.Operation, rows func(io.Writer, T)) {
	if a.structured() {
		_ = a.emit(op, nil)
		return
	}
	var res T
	if a.output == outTable && len(op.Result) > 0 && json.Unmarshal(op.Result, &res) == nil {
		_ = a.emit(res, func(w io.Writer) { rows(w, res) })
	}
}

func projectRolloutRows(w io.Writer, p types.Project) {
	if p.CurrentBase != "" {
		row(w, "CURRENT BASE:", p.CurrentBase)
	}
	if len(p.Validate) > 0 {
		val := make([]string, 0, len(p.Validate))
		for _, c := range p.Validate {
			val = append(val, shellwords.Join(c))
		}
		row(w, "VALIDATE:", strings.Join(val, "; "))
	}
	if f := p.RolloutFailure; f != nil {
		row(w, "ROLLOUT FAILED:", fmt.Sprintf("%s in rollout %s at %s: %s (cleared by the next successful switch)",
			f.Status, f.Rollout, formatTime(f.At), orDash(oneLine(f.Message))))
	}
}
