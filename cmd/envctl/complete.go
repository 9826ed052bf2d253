package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

// Dynamic shell completion: cobra's "completion bash|zsh|fish" scripts
// call "envctl __complete ARGS...", which answers from the server with
// the user's own URL and token. A completer that fails (no server, a
// refused token, a slow answer) offers nothing and prints nothing: a
// completion must never put an error into the user's command line.

// completer lists the candidates of one argument; args are the arguments
// before it (a version completes within args[0], the project).
type completer func(ctx context.Context, c *client.Client, args []string) ([]string, error)

// completeTimeout bounds a completion's API call: a shell waits for it.
const completeTimeout = 3 * time.Second

func completeProjects(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ps, err := c.ListProjects(ctx)
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Name+"\t"+fmt.Sprintf("base %s, current version %d", p.BaseImage, p.Current))
	}
	return out, err
}

func completeInstances(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	is, err := c.ListInstances(ctx, "")
	out := make([]string, 0, len(is))
	for _, i := range is {
		out = append(out, i.ID+"\t"+fmt.Sprintf("%s, %s version %d", i.State, i.Project, i.Version))
	}
	return out, err
}

func completeVersions(ctx context.Context, c *client.Client, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	vs, err := c.ListVersions(ctx, args[0])
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		desc := fmt.Sprintf("%s, %s", v.Kind, v.State)
		if v.Current {
			desc += ", current"
		}
		if v.Message != "" {
			desc += ": " + strings.ReplaceAll(v.Message, "\n", " ")
		}
		out = append(out, strconv.Itoa(v.Number)+"\t"+desc)
	}
	return out, err
}

func completeVolumes(ctx context.Context, c *client.Client, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	vs, err := c.ListVolumes(ctx, args[0])
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		out = append(out, v.Name+"\t"+v.Path)
	}
	return out, err
}

func completeOwnTokens(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ts, err := c.ListOwnTokens(ctx)
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, strconv.FormatInt(t.ID, 10)+"\t"+t.Tenant+", "+tokenState(t))
	}
	return out, err
}

func completeTokens(ctx context.Context, c *client.Client, _ []string) ([]string, error) {
	ts, err := c.ListTokens(ctx, "")
	out := make([]string, 0, len(ts))
	for _, t := range ts {
		out = append(out, strconv.FormatInt(t.ID, 10)+"\t"+t.Tenant+", "+tokenState(t))
	}
	return out, err
}

// positionalCompletions are the completers of each command's arguments,
// by position; the command is named as cmdName names it.
var positionalCompletions = map[string][]completer{
	"up":                 {completeProjects},
	"ls":                 {completeProjects},
	"versions":           {completeProjects},
	"version show":       {completeProjects, completeVersions},
	"switch":             {completeProjects, completeVersions},
	"diff":               {completeProjects, completeVersions, completeVersions},
	"changes":            {completeInstances},
	"fork":               {completeInstances},
	"checkpoint":         {completeInstances},
	"checkpoints":        {completeProjects},
	"pin":                {completeProjects, completeVersions},
	"unpin":              {completeProjects, completeVersions},
	"build":              {completeProjects},
	"migrate":            {completeProjects},
	"project show":       {completeProjects},
	"project rm":         {completeProjects},
	"project retention":  {completeProjects},
	"project limits":     {completeProjects},
	"project network":    {completeProjects},
	"volume ls":          {completeProjects},
	"volume add":         {completeProjects},
	"volume rm":          {completeProjects, completeVolumes},
	"volume archive":     {completeProjects, completeVolumes},
	"volume restore":     {completeProjects, completeVolumes},
	"volume archives":    {completeProjects},
	"volume archive-rm":  {completeProjects, completeVolumes},
	"exec":               {completeInstances},
	"show":               {completeInstances},
	"rm":                 {completeInstances},
	"save":               {completeInstances},
	"stop":               {completeInstances},
	"start":              {completeInstances},
	"pause":              {completeInstances},
	"resume":             {completeInstances},
	"renew":              {completeInstances},
	"hibernate":          {completeInstances},
	"token revoke":       {completeOwnTokens},
	"admin token revoke": {completeTokens},
	"ssh":                {completeInstances},
	"ssh-proxy":          {completeInstances},
	"ssh-config":         {completeInstances},
	"spec export":        {completeProjects, completeVersions},
}

// flagCompletions complete a flag's value from the command's arguments.
var flagCompletions = map[string]map[string]completer{
	"up":              {"version": completeVersions},
	"switch":          {"expected": completeVersions},
	"build":           {"from": completeVersions},
	"volume archives": {"volume": completeVolumes},
}

// addCompletions sets the completers on root's commands.
func (a *app) addCompletions(root *cobra.Command) {
	walkCommands(root, func(sub *cobra.Command) {
		name := cmdName(sub)
		if cs, ok := positionalCompletions[name]; ok {
			sub.ValidArgsFunction = a.positional(name, cs)
		}
		for flag, c := range flagCompletions[name] {
			_ = sub.RegisterFlagCompletionFunc(flag, a.compFunc(c))
		}
	})
}

// walkCommands calls fn on every command under cmd.
func walkCommands(cmd *cobra.Command, fn func(*cobra.Command)) {
	for _, sub := range cmd.Commands() {
		fn(sub)
		walkCommands(sub, fn)
	}
}

// positional completes argument len(args) with cs; past them, exec's
// command line completes file names, any other command nothing.
func (a *app) positional(name string, cs []completer) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(cs) {
			if name == "exec" {
				return nil, cobra.ShellCompDirectiveDefault
			}
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return a.compFunc(cs[len(args)])(cmd, args, toComplete)
	}
}

// compFunc runs c with the user's client, keeping the candidates that
// start with toComplete; on any error it offers nothing.
func (a *app) compFunc(c completer) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		cl, err := a.client()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx := cmd.Context()
		if ctx == nil {
			ctx = context.Background()
		}
		ctx, cancel := context.WithTimeout(ctx, completeTimeout)
		defer cancel()
		all, err := c(ctx, cl, args)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, s := range all {
			if strings.HasPrefix(s, toComplete) {
				out = append(out, s)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
