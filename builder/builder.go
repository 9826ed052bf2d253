// Package builder is the build feature: it makes versions by running work
// in isolated containers. Builds install a declared spec (packages,
// sources, files, run steps) on a version, save the change as a version of
// kind build and validate it in a trial instance; migrations rebase a
// version's own layers onto a new base image (conflicts found by replaying
// both bases' layers, Conflicts) and validate the same way. Both run as
// operations; an interrupted one is settled at the next start, not run
// again. A spec export (Derive) goes the other way, from what a version
// changed to the spec that rebuilds it.
//
// Nothing from a spec reaches a shell: every package name and version is
// checked against its package manager's grammar (Check, CheckSpec) and
// nothing can be read as an option.
//
// Builder needs the store's version records (Store), the registry's Get,
// Rebase and OpenLayer (Registry), the runtime's Exec, the save path's
// Capture and Commit (Capturer), isolated instances (Instances), the early
// quota check, the upload lease, and the resolution of base image names
// (Bases); envd wires them (Deps).
package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// Package managers.
const (
	Apt = "apt"
	Apk = "apk"
)

// Grammars. Debian: a name is lowercase alphanumerics and + - . (at least
// two characters, starting alphanumeric); a version is [epoch:]upstream
// [-revision] with upstream starting with a digit. Alpine: names also allow
// _ ; versions are like 1.2.3-r0.
var (
	debName    = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVersion = regexp.MustCompile(`^([0-9]+:)?[0-9][A-Za-z0-9.+~-]*$`)
	apkName    = regexp.MustCompile(`^[a-z0-9][a-z0-9_.+-]*$`)
	apkVersion = regexp.MustCompile(`^[0-9][A-Za-z0-9._-]*$`)
)

// MaxPackages bounds one build's package list.
const MaxPackages = 200

// Check validates a manager and its package list ("name" or
// "name=version"); an error is errdefs.ErrInvalidArgument naming the
// offending entry.
func Check(manager string, packages []string) error {
	if manager != Apt && manager != Apk {
		return fmt.Errorf("manager %q: must be apt or apk: %w", manager, errdefs.ErrInvalidArgument)
	}
	if len(packages) == 0 || len(packages) > MaxPackages {
		return fmt.Errorf("packages: between 1 and %d are needed, not %d: %w", MaxPackages, len(packages), errdefs.ErrInvalidArgument)
	}
	name, version := debName, debVersion
	if manager == Apk {
		name, version = apkName, apkVersion
	}
	for _, p := range packages {
		n, v, versioned := strings.Cut(p, "=")
		if !name.MatchString(n) || (versioned && !version.MatchString(v)) {
			return fmt.Errorf("package %q: not a valid %s package name[=version]: %w", p, manager, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// A Step is one command of a build, run without a shell.
type Step struct {
	Args []string
	Env  []string
	// Dir is the working directory ("" = the image's); Stdin the process's
	// standard input (nil = none).
	Dir   string
	Stdin []byte
	// What names the step in events instead of its command line, and
	// Quiet keeps its output out of the build log (a file's write).
	What  string
	Quiet bool
}

// Steps returns the commands that install packages with manager (checked
// by Check first) and then drop the package indexes, which the image does
// not need.
func Steps(manager string, packages []string) []Step {
	pkgs := Normalize(packages)
	if manager == Apk {
		return []Step{{Args: append([]string{"apk", "add", "--no-cache"}, pkgs...)}}
	}
	env := []string{"DEBIAN_FRONTEND=noninteractive"}
	return []Step{
		{Args: []string{"apt-get", "-o", "Acquire::Retries=3", "update"}, Env: env},
		{Args: append([]string{"apt-get", "-o", "Acquire::Retries=3", "install", "-y", "--no-install-recommends", "--"}, pkgs...), Env: env},
		{Args: []string{"apt-get", "clean"}, Env: env},
		// A fixed script: no spec value in it.
		{Args: []string{"sh", "-c", "rm -rf /var/lib/apt/lists/*"}},
	}
}

// Normalize returns packages sorted and without duplicates: the order in
// a spec does not change what is installed.
func Normalize(packages []string) []string {
	out := slices.Clone(packages)
	slices.Sort(out)
	return slices.Compact(out)
}

// Key identifies a build's result: the same base image and the same
// normalized spec give the same key, so a finished build can be reused.
func Key(baseImage, manager string, packages []string, validate [][]string) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", baseImage, manager)
	for _, p := range Normalize(packages) {
		fmt.Fprintf(h, "%s\x00", p)
	}
	for _, c := range validate {
		fmt.Fprintf(h, "%q\x00", c)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}
