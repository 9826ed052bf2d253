package tarfs

import (
	"fmt"
	"path"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// Clean is the one sanitiser of tar entry names (and hard link targets):
// it returns name as a clean path relative to the root, "." for the root
// itself ("", "./", "/"). A leading "/" is dropped: tar and containerd
// read absolute names relative to the root (callers that refuse them say
// so). A name with a ".." element anywhere ("../x", "a/../../x", even
// "a/../b") or a NUL byte is refused with errdefs.ErrInvalidArgument: it is
// either an attempt to leave the root or not a name any archiver writes.
func Clean(name string) (string, error) {
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("entry %q has a NUL byte: %w", name, errdefs.ErrInvalidArgument)
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("entry %q leaves the root: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	c := strings.TrimPrefix(path.Clean("/"+name), "/")
	if c == "" {
		return ".", nil
	}
	return c, nil
}
