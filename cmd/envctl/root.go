package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// Exit codes. A kind of API error has its own code so scripts can branch
// without parsing text; every other error is 1.
const (
	exitError       = 1 // a failed request or operation
	exitUsage       = 2 // bad flags or arguments
	exitConflict    = 3 // a save became a version but not current; a compare-and-swap lost (conflict)
	exitNotFound    = 4 // not_found
	exitQuota       = 5 // quota_exceeded
	exitUnavailable = 6 // unavailable: the server cannot be reached, or a dependency of it is down
)

// exitCodesHelp is the table of exit codes in envctl --help.
const exitCodesHelp = `Exit codes:
  0  success
  1  error (a failed request or operation; a failed save, build or migrate)
  2  usage error
  3  conflict: a version was made but is not current (a save conflict, or build
     or migrate --switch lost to another change), or a switch lost its
     compare-and-swap (code conflict)
  4  not found (code not_found)
  5  quota exceeded (code quota_exceeded)
  6  unavailable: envd cannot be reached, or one of its dependencies is down
     (code unavailable), or no node has room for the instance now (code
     insufficient_capacity)
exec exits with the command's own exit code.
With -o json an error is printed on stderr as one line of JSON:
  {"error":{"code":"not_found","message":"...","details":{...},"status":404}}`

// app holds the global flags and the process's streams.
type app struct {
	url, token, dataDir string
	caCert              string // --ca-cert
	output              string
	showVersion         bool
	stdin               io.Reader
	stdout, stderr      io.Writer
	c                   *client.Client
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ error }

// exitCodeError ends envctl with code, printing err when it is not nil.
type exitCodeError struct {
	code int
	err  error
}

func (e *exitCodeError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit code %d", e.code)
	}
	return e.err.Error()
}

func (e *exitCodeError) Unwrap() error { return e.err }

// run executes envctl with args and returns the process exit code.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	return a.exitCode(err)
}

// exitCode prints err and returns the exit code for it.
func (a *app) exitCode(err error) int {
	if err == nil {
		return 0
	}
	var (
		ec *exitCodeError
		ue usageError
	)
	switch {
	case errors.As(err, &ec):
		if ec.err != nil {
			a.printError(ec.err)
		}
		return ec.code
	case errors.As(err, &ue) || isCobraUsage(err):
		if a.output == outJSON {
			a.printJSONError(errorDetail{Code: "usage", Message: err.Error()})
		} else {
			fmt.Fprintf(a.stderr, "envctl: %v\nRun 'envctl --help' for usage.\n", err)
		}
		return exitUsage
	default:
		a.printError(err)
		return kindExitCode(err)
	}
}

// kindExitCode is the exit code of an error's kind (see exitCodesHelp).
func kindExitCode(err error) int {
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return exitNotFound
	case errors.Is(err, errdefs.ErrConflict):
		return exitConflict
	case errors.Is(err, errdefs.ErrQuotaExceeded):
		return exitQuota
	case errors.Is(err, errdefs.ErrUnavailable), errors.Is(err, errdefs.ErrInsufficientCapacity), unreachable(err):
		return exitUnavailable
	}
	return exitError
}

// unreachable says whether err is a failure to connect to the server.
func unreachable(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) && oe.Op == "dial"
}

// errorDetail is what -o json prints for an error, as {"error": ...}: the
// API's error body plus the HTTP status.
type errorDetail struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
	Status  int            `json:"status,omitempty"`
}

// describe returns err as an errorDetail: the API's code, message, details
// and status; an operation's own error code; "unavailable" when the server
// cannot be reached; else "error".
func describe(err error) errorDetail {
	var (
		cer *types.Error
		of  *opFailedError
	)
	switch {
	case errors.As(err, &cer):
		return errorDetail{Code: cer.Code, Message: cer.Message, Details: cer.Details, Status: cer.Status}
	case errors.As(err, &of):
		d := errorDetail{Code: "error", Message: of.Error(),
			Details: map[string]any{"operation": of.op.ID, "state": string(of.op.State)}}
		if of.op.Error != nil {
			d.Code = of.op.Error.Code
		}
		return d
	case unreachable(err):
		return errorDetail{Code: "unavailable", Message: err.Error()}
	}
	return errorDetail{Code: "error", Message: err.Error()}
}

func (a *app) printError(err error) {
	if a.output == outJSON {
		a.printJSONError(describe(err))
		return
	}
	var cer *types.Error
	if errors.As(err, &cer) {
		details := ""
		for _, k := range slices.Sorted(maps.Keys(cer.Details)) {
			details += fmt.Sprintf(", %s: %v", k, cer.Details[k])
		}
		fmt.Fprintf(a.stderr, "envctl: %s (%s%s)\n", cer.Message, cer.Code, details)
		return
	}
	fmt.Fprintf(a.stderr, "envctl: %v\n", err)
}

// printJSONError writes d on one line, so the last line of stderr parses
// even after progress lines.
func (a *app) printJSONError(d errorDetail) {
	b, err := json.Marshal(struct {
		Error errorDetail `json:"error"`
	}{d})
	if err != nil {
		fmt.Fprintf(a.stderr, "envctl: %s\n", d.Message)
		return
	}
	fmt.Fprintf(a.stderr, "%s\n", b)
}

// isCobraUsage recognizes cobra's own usage errors, which it does not type.
func isCobraUsage(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "flag needs an argument", "invalid argument"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "envctl",
		Short: "Control envd: projects, instances, versions and operations",
		Long: `envctl is the command-line client of envd.

The server is found from --url and --token (or ENVD_URL and ENVD_TOKEN), else
from the data dir of a local "envd up" (--data-dir or ENVD_DATA_DIR; default
/var/lib/envd as root, else ~/.local/share/envd): DIR/envd.url and
DIR/admin.token.

What is kept, three ways (a project can use all three):
  save              envctl save INSTANCE writes the instance's root filesystem changes
                    (apt-get installs, edits, deletions) as a new numbered version in the
                    registry; new instances, on any node, start from it. Until you save,
                    envctl rm loses those changes.
  retained layer    envctl up P --retain: envctl stop releases memory and CPU but keeps the
                    root filesystem on the node; envctl start brings it back without a save.
                    A long-stopped one is hibernated as a version and can start on any node.
  volume            project create --volume work:/workspace (or envctl volume add): a
                    directory kept across every instance of the project, never part of a
                    version; envctl volume archive/restore moves it between nodes.
envctl show INSTANCE says what protects an instance and what stop or rm would lose.

Output (-o): table (default), json, yaml, or name (one identifier per line:
project names, instance ids, version numbers, operation ids, token ids; for
xargs). Progress goes to stderr, never into the output.

Shell completion: source <(envctl completion bash), or zsh or fish (see
envctl completion --help); project names, instance ids and version numbers
complete from the server.

` + exitCodesHelp,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.showVersion {
				return a.printVersion(cmd)
			}
			return cmd.Help()
		},
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Annotations[outputIsFile] != "" {
				return nil // -o names the file this command writes
			}
			switch a.output {
			case outTable, outJSON, outYAML, outName:
			default:
				return usageError{fmt.Errorf("output format %q: must be table, json, yaml or name", a.output)}
			}
			if a.output == outName && cmd.Annotations[noNameOutput] != "" {
				return usageError{fmt.Errorf("%s: -o name: the output has no identifier (use -o json or yaml)", cmdName(cmd))}
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&a.url, "url", "", "envd URL (default $ENVD_URL, else DATA_DIR/envd.url)")
	pf.StringVar(&a.token, "token", "", "API token (default $ENVD_TOKEN, else DATA_DIR/admin.token)")
	pf.StringVar(&a.caCert, "ca-cert", "", "PEM file of the CA (or self-signed certificate) to trust for an https URL (default $ENVD_CA_CERT, else DATA_DIR/tls/cert.pem when the URL comes from DATA_DIR)")
	pf.StringVar(&a.dataDir, "data-dir", "", "data dir of a local envd (default $ENVD_DATA_DIR, else /var/lib/envd as root, ~/.local/share/envd otherwise)")
	pf.StringVarP(&a.output, "output", "o", outTable, "output format: table, json, yaml or name")
	_ = root.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{outTable, outJSON, outYAML, outName}, cobra.ShellCompDirectiveNoFileComp))
	root.Flags().BoolVar(&a.showVersion, "version", false, "print envctl's version and the server's when it answers")

	root.AddCommand(
		a.infoCommand(),
		a.imageCommand(),
		a.projectCommand(),
		a.upCommand(), a.execCommand(), a.lsCommand(), a.showCommand(), a.rmCommand(), a.saveCommand(), a.forkCommand(),
		a.versionsCommand(), a.versionCommand(), a.diffCommand(), a.changesCommand(), a.switchCommand(), a.pinCommand(true), a.pinCommand(false),
		a.opCommand(), a.buildCommand(), a.migrateCommand(), a.gcCommand(), a.adminCommand(), a.usageCommand(),
	)
	root.AddCommand(a.lifecycleCommands()...)
	root.AddCommand(a.checkpointCommands()...)
	root.AddCommand(a.ownTokenCommand()) // tokens.go
	root.AddCommand(a.volumeCommand(), a.hibernateCommand())
	root.AddCommand(a.sshCommands()...)
	root.AddCommand(a.egressCommands()...)
	root.AddCommand(a.portCommands()...)
	root.AddCommand(a.cpCommand())
	root.AddCommand(a.specCommand()) // specs.go
	root.AddCommand(a.nodesCommand())
	root.AddCommand(a.webhookCommand())
	a.addCompletions(root) // complete.go
	markNameless(root)     // names.go
	return root
}

// client returns the API client, finding the server on first use.
func (a *app) client() (*client.Client, error) {
	if a.c != nil {
		return a.c, nil
	}
	url, token := a.url, a.token
	if url == "" {
		url = os.Getenv("ENVD_URL")
	}
	if token == "" {
		token = os.Getenv("ENVD_TOKEN")
	}
	urlDir := "" // the data dir the URL came from
	if url == "" || token == "" {
		dir, err := a.resolveDataDir()
		if err != nil {
			return nil, err
		}
		if url == "" {
			b, err := os.ReadFile(filepath.Join(dir, "envd.url"))
			if err != nil {
				return nil, fmt.Errorf("no envd server: set --url or ENVD_URL, or start one with envd up (%w)", err)
			}
			url, urlDir = strings.TrimSpace(string(b)), dir
		}
		if token == "" {
			b, err := os.ReadFile(filepath.Join(dir, "admin.token"))
			if err != nil {
				return nil, fmt.Errorf("no API token: set --token or ENVD_TOKEN (%w)", err)
			}
			token = strings.TrimSpace(string(b))
		}
	}
	opts, err := a.tlsOptions(url, urlDir)
	if err != nil {
		return nil, err
	}
	c, err := client.New(url, token, append(opts, client.WithUserAgent("envctl"))...)
	if err != nil {
		return nil, err
	}
	a.c = c
	return a.c, nil
}

func (a *app) resolveDataDir() (string, error) {
	if a.dataDir != "" {
		return a.dataDir, nil
	}
	if d := os.Getenv("ENVD_DATA_DIR"); d != "" {
		return d, nil
	}
	if os.Geteuid() == 0 {
		return "/var/lib/envd", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the data dir: %w", err)
	}
	return filepath.Join(home, ".local", "share", "envd"), nil
}

// Argument validators that report usage errors.

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageError{fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())}
	}
	return nil
}

func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s: want %d argument(s), got %d (usage: %s)", cmdName(cmd), n, len(args), cmd.UseLine())}
		}
		return nil
	}
}

func rangeArgs(lo, hi int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < lo || len(args) > hi {
			return usageError{fmt.Errorf("%s: want %d to %d arguments, got %d (usage: %s)", cmdName(cmd), lo, hi, len(args), cmd.UseLine())}
		}
		return nil
	}
}

// cmdName is the command's path without "envctl ".
func cmdName(cmd *cobra.Command) string {
	return strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
}

// versionArg parses a version number argument.
func versionArg(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, usageError{fmt.Errorf("version %q: must be a positive integer", s)}
	}
	return n, nil
}

// group is a command that only holds subcommands. Given alone, a noun
// with an ls verb that needs no argument lists (envctl nodes is envctl
// nodes ls, as kubectl get nodes lists); any other bare noun is a usage
// error, which names the ls verb when there is one.
func group(use, short string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ls := lsVerb(cmd)
			if ls != nil && (ls.Args == nil || ls.Args(ls, nil) == nil) {
				ls.SetContext(cmd.Context())
				return ls.RunE(ls, nil)
			}
			if ls != nil {
				return usageError{fmt.Errorf("%s: missing subcommand (to list: %s %s; see %s --help)", cmdName(cmd), cmd.CommandPath(), ls.Use, cmd.CommandPath())}
			}
			return usageError{fmt.Errorf("%s: missing subcommand (see %s --help)", cmdName(cmd), cmd.CommandPath())}
		},
	}
	c.AddCommand(subs...)
	return c
}

// lsVerb is the ls subcommand of a group, nil when it has none.
func lsVerb(group *cobra.Command) *cobra.Command {
	for _, sub := range group.Commands() {
		if sub.Name() == "ls" && sub.RunE != nil {
			return sub
		}
	}
	return nil
}
