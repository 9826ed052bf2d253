package envd

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/envd-dev/envd/registry/memimage/lazyfs"
)

// scratchPrefixes name what saves, hibernations and image imports write in
// Config.WorkDir while they run: a save's spool dir is its operation id
// ("op-..."), a hibernation's "hibernate-<instance>", an import's
// "import-..." (the received tar and the encode dir), a checkpoint's
// memory image "op-...-memory", a resume's pulled memory image
// "resume-<instance>-...". Nothing else there is touched.
var scratchPrefixes = []string{"op-", "hibernate-", "import-", "resume-"}

// removeScratch removes the scratch left in the work dir by a process that
// died during a save, hibernation or import, except that of operations
// running in this process. It runs at start, before any operation is
// launched or resumed (a resumed save starts its spool afresh), so at
// start everything it finds is left over. Failures are logged: leftovers
// take disk space, not correctness.
func (s *Service) removeScratch() {
	// A resume's lazy memory image (registry/memimage/lazyfs) served by
	// the dead process is a mount whose every access fails: out of the
	// mount table first, or its directory cannot be removed.
	if err := lazyfs.CleanMounts(s.cfg.WorkDir); err != nil {
		s.log.Warn("unmount leftover memory image mounts", "dir", s.cfg.WorkDir, "err", err)
	}
	entries, err := os.ReadDir(s.cfg.WorkDir)
	if err != nil {
		s.log.Warn("list work dir", "dir", s.cfg.WorkDir, "err", err)
		return
	}
	for _, e := range entries {
		name := e.Name()
		if s.ops.Running(name) || !hasAnyPrefix(name, scratchPrefixes) {
			continue
		}
		p := filepath.Join(s.cfg.WorkDir, name)
		if err := os.RemoveAll(p); err != nil {
			s.log.Warn("remove leftover scratch", "path", p, "err", err)
			continue
		}
		s.log.Info("removed scratch left by an earlier process", "path", p)
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
