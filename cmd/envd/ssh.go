package main

import "os"

// envKept is the environment variable name when it is set, even empty
// (ENVD_SSH_LISTEN= turns SSH off), else def.
func envKept(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
