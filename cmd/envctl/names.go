package main

import (
	"fmt"
	"reflect"
	"strconv"

	"github.com/envd-dev/envd/api/types"
	"github.com/spf13/cobra"
)

// noNameOutput marks a command whose output has no identifier: -o name is
// refused before it runs (a usage error), not after its work is done.
const noNameOutput = "envctl/no-name-output"

// namelessCommands print nothing -o name could name: a server's info, a
// quota (it does not carry its tenant), an exec's result.
var namelessCommands = map[string]bool{"info": true, "admin quota": true, "exec": true}

// markNameless annotates root's nameless commands.
func markNameless(root *cobra.Command) {
	walkCommands(root, func(cmd *cobra.Command) {
		if namelessCommands[cmdName(cmd)] {
			if cmd.Annotations == nil {
				cmd.Annotations = map[string]string{}
			}
			cmd.Annotations[noNameOutput] = "true"
		}
	})
}

// names returns what -o name prints for v, one identifier per line so the
// output pipes into xargs: project names, instance ids, version numbers,
// operation ids, token ids, image, volume and archive names. A list gives
// one line per element.
func names(v any) ([]string, error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice {
		out := make([]string, 0, rv.Len())
		for i := range rv.Len() {
			id, err := nameOf(rv.Index(i).Interface())
			if err != nil {
				return nil, err
			}
			out = append(out, id...)
		}
		return out, nil
	}
	return nameOf(v)
}

func nameOf(v any) ([]string, error) {
	itoa := func(n int) []string { return []string{strconv.Itoa(n)} }
	switch x := v.(type) {
	case types.Project:
		return []string{x.Name}, nil
	case types.Instance:
		return []string{x.ID}, nil
	case types.Version:
		return itoa(x.Number), nil
	case types.Operation:
		return []string{x.ID}, nil
	case types.TokenInfo:
		return []string{strconv.FormatInt(x.ID, 10)}, nil
	case types.Token:
		return []string{strconv.FormatInt(x.ID, 10)}, nil
	case types.Node:
		return []string{x.Name}, nil
	case types.Image:
		return []string{x.Name}, nil
	case types.Volume:
		return []string{x.Name}, nil
	case types.VolumeArchive:
		return []string{x.Name}, nil
	case versionInfo:
		return []string{x.Client}, nil
	case types.Usage:
		return []string{x.Tenant}, nil
	case saveOutput:
		if x.State != string(types.OpSucceeded) {
			return []string{x.ID}, nil // no version: the operation names what happened
		}
		return itoa(x.Version), nil
	case types.BuildResult:
		return itoa(x.Version), nil
	case types.MigrateResult:
		return itoa(x.Version), nil
	case types.Rollout:
		return []string{x.ID}, nil
	case types.GCResult:
		out := make([]string, 0, len(x.Versions))
		for _, gv := range x.Versions {
			out = append(out, fmt.Sprintf("%s/%s/%d", gv.Tenant, gv.Project, gv.Version))
		}
		return out, nil
	case map[string]any: // project rm's {"name": ..., "deleted": true}
		if name, ok := x["name"].(string); ok {
			return []string{name}, nil
		}
	case types.SSHKey:
		return []string{strconv.FormatInt(x.ID, 10)}, nil
	case types.Checkpoint:
		return itoa(x.ID), nil
	case types.CheckpointResult:
		return itoa(x.Checkpoint.ID), nil
	}
	return nil, usageError{fmt.Errorf("-o name: %T has no identifier to print (use -o json or yaml)", v)}
}
