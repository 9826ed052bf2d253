package versions

import (
	"context"
	"fmt"
)

// ImageInUse reports whether a version of any project that is not being
// deleted has image: its manifest must then stay when another version with
// the same image is collected.
func (s Content) ImageInUse(ctx context.Context, image string) (bool, error) {
	var used bool
	err := s.db.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM versions WHERE image = $1 AND state <> 'deleting')", image).Scan(&used)
	if err != nil {
		return false, translate(err, fmt.Sprintf("image %q", image))
	}
	return used, nil
}
