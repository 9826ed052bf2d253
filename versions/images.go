package versions

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Image is a base image imported under a name.
type Image struct {
	Name      string
	Repo      string
	Digest    string
	SizeBytes int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

const imageCols = `name, repo, digest, size_bytes, created_at, updated_at`

// PutImage records (or re-points) the name of an imported image.
func (s Content) PutImage(ctx context.Context, img Image) (Image, error) {
	return putImage(ctx, s.db, img)
}

func putImage(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, img Image) (Image, error) {
	var out Image
	err := db.QueryRow(ctx, `INSERT INTO images (name, repo, digest, size_bytes) VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET repo = EXCLUDED.repo, digest = EXCLUDED.digest,
			size_bytes = EXCLUDED.size_bytes, updated_at = now()
		RETURNING `+imageCols, img.Name, img.Repo, img.Digest, img.SizeBytes).
		Scan(&out.Name, &out.Repo, &out.Digest, &out.SizeBytes, &out.CreatedAt, &out.UpdatedAt)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", img.Name))
	}
	return out, nil
}

// GetImage returns the image named name.
func (s Content) GetImage(ctx context.Context, name string) (Image, error) {
	var out Image
	err := s.db.QueryRow(ctx, `SELECT `+imageCols+` FROM images WHERE name = $1`, name).
		Scan(&out.Name, &out.Repo, &out.Digest, &out.SizeBytes, &out.CreatedAt, &out.UpdatedAt)
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", name))
	}
	return out, nil
}

// ListImages lists imported images by name.
func (s Content) ListImages(ctx context.Context) ([]Image, error) {
	rows, err := s.db.Query(ctx, `SELECT `+imageCols+` FROM images ORDER BY name`)
	if err != nil {
		return nil, translate(err, "images")
	}
	defer rows.Close()
	var out []Image
	for rows.Next() {
		var img Image
		if err := rows.Scan(&img.Name, &img.Repo, &img.Digest, &img.SizeBytes, &img.CreatedAt, &img.UpdatedAt); err != nil {
			return nil, translate(err, "images")
		}
		out = append(out, img)
	}
	return out, translate(rows.Err(), "images")
}
