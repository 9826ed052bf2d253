package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/envd-dev/envd/api/types"
)

// Output formats of -o.
const (
	outTable = "table"
	outJSON  = "json"
	outYAML  = "yaml"
	outName  = "name"
)

// structured says whether the output is a data format (json or yaml) that
// prints whole objects.
func (a *app) structured() bool { return a.output == outJSON || a.output == outYAML }

// emit prints v as JSON with -o json, as YAML with -o yaml, its
// identifiers with -o name (names.go), else calls table with a tab writer.
func (a *app) emit(v any, table func(w io.Writer)) error {
	switch a.output {
	case outJSON:
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outYAML:
		return writeYAML(a.stdout, v)
	case outName:
		ids, err := names(v)
		if err != nil {
			return err
		}
		for _, id := range ids {
			fmt.Fprintln(a.stdout, id)
		}
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

func row(w io.Writer, cols ...any) {
	s := make([]string, len(cols))
	for i, c := range cols {
		s[i] = fmt.Sprint(c)
	}
	fmt.Fprintln(w, strings.Join(s, "\t"))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

func formatTimePtr(t *time.Time) string {
	if t == nil {
		return "never"
	}
	return formatTime(*t)
}

// formatExpiry shows an absolute expiry with the time left.
func formatExpiry(t *time.Time) string {
	if t == nil {
		return "never"
	}
	left := time.Until(*t).Round(time.Second)
	if left <= 0 {
		return formatTime(*t) + " (expired)"
	}
	return fmt.Sprintf("%s (in %s)", formatTime(*t), left)
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func formatMS(ms int64) string {
	return (time.Duration(ms) * time.Millisecond).String()
}

func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	if !ok {
		return false
	}
	st, err := file.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// Tables of the envd types.

func imageTable(w io.Writer, imgs ...types.Image) {
	row(w, "NAME", "REF", "SIZE")
	for _, i := range imgs {
		row(w, i.Name, i.Ref, formatBytes(i.Size))
	}
}

func projectTable(w io.Writer, ps ...types.Project) {
	row(w, "NAME", "BASE", "CURRENT", "COMPRESSION", "CREATED", "CLASS")
	for _, p := range ps {
		row(w, p.Name, p.BaseImage, p.Current, p.Compression, formatTime(p.CreatedAt), classText(p.RuntimeClass))
	}
}

// classText is a project's runtime class as shown; "" is each node's
// default.
func classText(c string) string {
	if c == "" {
		return "node default"
	}
	return c
}

func projectDetail(w io.Writer, p types.Project) {
	row(w, "NAME:", p.Name)
	row(w, "BASE:", p.BaseImage)
	row(w, "CURRENT:", p.Current)
	row(w, "COMPRESSION:", p.Compression)
	row(w, "EXCLUDES:", orDash(strings.Join(p.Excludes, ", ")))
	vols := make([]string, 0, len(p.Volumes))
	for _, v := range p.Volumes {
		vols = append(vols, v.Name+":"+v.Path)
	}
	row(w, "VOLUMES:", orDash(strings.Join(vols, ", ")))
	keep := "every version"
	if r := p.Retention; r != nil {
		var parts []string
		if r.KeepLast > 0 {
			parts = append(parts, fmt.Sprintf("the newest %d", r.KeepLast))
		}
		if r.KeepNewerThan != "" {
			parts = append(parts, "those newer than "+r.KeepNewerThan)
		}
		keep = strings.Join(parts, " and ")
	}
	row(w, "KEEPS:", keep)
	row(w, "LIMITS:", limitsText(p.Limits))
	row(w, "EGRESS:", orDash(p.Egress))
	row(w, "ISOLATE INSTANCES:", p.IsolateInstances)
	row(w, "RUNTIME CLASS:", classText(p.RuntimeClass))
	row(w, "DOCKER:", p.Docker)
	row(w, "CREATED:", formatTime(p.CreatedAt))
	row(w, "IDLE:", idleText(p.Idle))
	if p.Pool != nil {
		row(w, "WARM POOL:", fmt.Sprintf("%d started instances of the current version kept ready for up", p.Pool.Size))
	}
	projectRolloutRows(w, p)
}

func volumeTable(w io.Writer, vs ...types.Volume) {
	row(w, "NAME", "PATH", "OWNER", "USED", "SIZE", "PATH ADDITIONS")
	for _, v := range vs {
		used := "-"
		if v.UsedBytes >= 0 {
			used = formatBytes(v.UsedBytes)
		}
		row(w, v.Name, v.Path, fmt.Sprintf("%d:%d", v.UID, v.GID), used, formatBytes(v.SizeBytes), orDash(strings.Join(v.PathAdd, ":")))
	}
}

func instanceTable(w io.Writer, is ...types.Instance) {
	row(w, "ID", "STATE", "VERSION", "PROJECT", "REASON", "EXPIRES")
	for _, i := range is {
		row(w, i.ID, i.State, i.Version, i.Project, orDash(i.Reason), formatTimePtr(i.ExpiresAt))
	}
}

func instanceDetail(w io.Writer, i types.Instance) {
	row(w, "ID:", i.ID)
	row(w, "PROJECT:", i.Project)
	row(w, "STATE:", i.State)
	row(w, "REASON:", orDash(i.Reason))
	if i.Message != "" {
		row(w, "MESSAGE:", i.Message)
	}
	row(w, "VERSION:", i.Version)
	if i.LastSavedVersion != 0 {
		row(w, "LAST SAVED:", i.LastSavedVersion)
	}
	row(w, "NODE:", orDash(i.Node))
	if i.Placement != "" {
		row(w, "PLACEMENT:", i.Placement)
	}
	row(w, "ADDRESS:", orDash(i.Address))
	row(w, "GENERATION:", i.Generation)
	row(w, "RETAIN:", yesNo(i.Retain))
	if i.HibernatedVersion != 0 {
		if i.HibernatedCheckpoint != 0 {
			row(w, "HIBERNATED AS:", fmt.Sprintf("version %d with its processes in checkpoint %d (any access resumes them, on any node)", i.HibernatedVersion, i.HibernatedCheckpoint))
		} else {
			row(w, "HIBERNATED AS:", fmt.Sprintf("version %d (start brings it back, on any node)", i.HibernatedVersion))
		}
	}
	if i.MemoryNotKept != "" {
		row(w, "MEMORY NOT KEPT:", i.MemoryNotKept+" (the idle action kept the files only; the processes start anew)")
	}
	row(w, "VOLUMES:", orDash(strings.Join(i.Protection.Volumes, ", ")))
	row(w, "LIMITS:", limitsText(i.Limits))
	row(w, "LOST ON STOP:", orDash(i.Protection.LostOnStop))
	row(w, "LOST ON RM:", orDash(i.Protection.LostOnRemove))
	row(w, "EXPIRES:", formatExpiry(i.ExpiresAt))
	row(w, "CREATED:", formatTime(i.CreatedAt))
	row(w, "LAST TRANSITION:", formatTime(i.LastTransitionAt))
	instanceIdleRows(w, i)
	if i.NewerCurrent != 0 {
		row(w, "NEWER CURRENT:", fmt.Sprintf("version %d (a newer base) is current; this instance keeps version %d until started anew", i.NewerCurrent, i.Version))
	}
}

func versionTable(w io.Writer, vs ...types.Version) {
	row(w, "VERSION", "KIND", "STATE", "CURRENT", "PINNED", "SIZE", "CREATED", "MESSAGE")
	for _, v := range vs {
		row(w, v.Number, v.Kind, v.State, yesNo(v.Current), yesNo(v.Pinned), formatBytes(v.SizeBytes),
			formatTime(v.CreatedAt), strings.ReplaceAll(v.Message, "\n", " "))
	}
}

func versionDetail(w io.Writer, v types.Version) {
	row(w, "PROJECT:", v.Project)
	row(w, "VERSION:", v.Number)
	row(w, "KIND:", v.Kind)
	row(w, "STATE:", v.State)
	row(w, "CURRENT:", yesNo(v.Current))
	row(w, "PINNED:", yesNo(v.Pinned))
	row(w, "PARENT:", orDash(intOrEmpty(v.Parent)))
	row(w, "IMAGE:", orDash(v.Image))
	row(w, "SIZE:", formatBytes(v.SizeBytes))
	row(w, "LAYERS:", v.Layers)
	row(w, "INSTANCE:", orDash(v.InstanceID))
	row(w, "CREATED:", formatTime(v.CreatedAt))
	row(w, "MESSAGE:", orDash(v.Message))
}

func intOrEmpty(n int) string {
	if n == 0 {
		return ""
	}
	return strconv.Itoa(n)
}

func operationDetail(w io.Writer, op types.Operation) {
	row(w, "ID:", op.ID)
	row(w, "KIND:", op.Kind)
	row(w, "TARGET:", op.Target)
	row(w, "STATE:", op.State)
	if op.Error != nil {
		row(w, "ERROR:", fmt.Sprintf("%s (%s)", op.Error.Message, op.Error.Code))
	}
	if len(op.Result) > 0 {
		row(w, "RESULT:", string(op.Result))
	}
	row(w, "CREATED:", formatTime(op.CreatedAt))
	row(w, "UPDATED:", formatTime(op.UpdatedAt))
}
