package main

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"
)

// A config file (--config envd.yaml, or ENVD_CONFIG) gives flags their
// values: its keys are the flags' names without "--", its values what the
// flag would take (a list for a flag that takes several):
//
//	listen: 0.0.0.0:7443
//	default-ttl: 4h
//	instance-deny: [10.0.0.0/8, other-node:7443]
//
// Precedence: a flag on the command line, then its ENVD_* variable, then
// the file, then the default (node.DefaultConfig). A key that names no
// flag of the command is an error naming it, so a typo is never ignored.

// registerConfig adds --config; config and down apply the file.
func (f *flags) registerConfig(fl *pflag.FlagSet) {
	f.fs = fl
	fl.StringVar(&f.configFile, "config", env("ENVD_CONFIG", ""), "YAML file of flag values, keys the flag names without --; flags and ENVD_* variables take precedence over it (ENVD_CONFIG)")
}

// envVarOf finds a flag's variable in its usage text, "(ENVD_NAME)" or
// "(ENVD_NAME=1)".
var envVarOf = regexp.MustCompile(`\((ENVD_[A-Z0-9_]+)`)

// envName is the ENVD_* variable of flag fl.
func envName(fl *pflag.Flag) string {
	if m := envVarOf.FindStringSubmatch(fl.Usage); m != nil {
		return m[1]
	}
	return "ENVD_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
}

// applyConfigFile sets the flags the config file names, except those given
// on the command line or by their variable.
func (f *flags) applyConfigFile() error {
	if f.configFile == "" || f.fs == nil {
		return nil
	}
	b, err := os.ReadFile(f.configFile)
	if err != nil {
		return fmt.Errorf("config file: %w", err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fmt.Errorf("config file %s: %w", f.configFile, err)
	}
	for _, key := range slices.Sorted(maps.Keys(doc)) {
		fl := f.fs.Lookup(key)
		if fl == nil || key == "config" || key == "help" {
			return fmt.Errorf("config file %s: unknown key %q (keys are this command's flag names without --)", f.configFile, key)
		}
		if fl.Changed || os.Getenv(envName(fl)) != "" {
			continue
		}
		v, err := flagValue(doc[key])
		if err != nil {
			return fmt.Errorf("config file %s: key %q: %w", f.configFile, key, err)
		}
		if err := f.fs.Set(key, v); err != nil {
			return fmt.Errorf("config file %s: key %q: %w", f.configFile, key, err)
		}
	}
	return nil
}

// flagValue is v, a YAML scalar or list of scalars, as a flag's text.
func flagValue(v any) (string, error) {
	switch v := v.(type) {
	case nil:
		return "", nil
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int, int64, uint64:
		return fmt.Sprint(v), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			s, err := flagValue(e)
			if err != nil {
				return "", err
			}
			if _, nested := e.([]any); nested {
				return "", fmt.Errorf("a list of lists")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("%T: must be a string, number, boolean or list of them", v)
	}
}
