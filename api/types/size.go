package types

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// ParseSize parses a byte count with an optional binary suffix: "1073741824",
// "512M", "2G", "2Gi", "2GiB", "1T".
func ParseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "KMGTiBkmgtb")
	suffix := strings.ToUpper(s[len(num):])
	suffix = strings.TrimSuffix(suffix, "B")
	suffix = strings.TrimSuffix(suffix, "I")
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[suffix]
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n < 0 || (sh > 0 && n > (1<<62)>>sh) {
		return 0, fmt.Errorf("size %q: want bytes or a number with K, M, G or T: %w", s, errdefs.ErrInvalidArgument)
	}
	return n << sh, nil
}
