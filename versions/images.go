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

var imageColumns = columns[Image]{
	{"name", func(i *Image) any { return &i.Name }},
	{"repo", func(i *Image) any { return &i.Repo }},
	{"digest", func(i *Image) any { return &i.Digest }},
	{"size_bytes", func(i *Image) any { return &i.SizeBytes }},
	{"created_at", func(i *Image) any { return &i.CreatedAt }},
	{"updated_at", func(i *Image) any { return &i.UpdatedAt }},
}

var imageCols = imageColumns.list()

// PutImage records (or re-points) the name of an imported image.
func (s Content) PutImage(ctx context.Context, img Image) (Image, error) {
	return putImage(ctx, s.db, img)
}

func putImage(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, img Image) (Image, error) {
	out, err := imageColumns.scan(db.QueryRow(ctx, `INSERT INTO images (name, repo, digest, size_bytes) VALUES ($1, $2, $3, $4)
		ON CONFLICT (name) DO UPDATE SET repo = EXCLUDED.repo, digest = EXCLUDED.digest,
			size_bytes = EXCLUDED.size_bytes, updated_at = now()
		RETURNING `+imageCols, img.Name, img.Repo, img.Digest, img.SizeBytes))
	if err != nil {
		return Image{}, translate(err, fmt.Sprintf("image %q", img.Name))
	}
	return out, nil
}

// GetImage returns the image named name.
func (s Content) GetImage(ctx context.Context, name string) (Image, error) {
	out, err := imageColumns.scan(s.db.QueryRow(ctx, `SELECT `+imageCols+` FROM images WHERE name = $1`, name))
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
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Image, error) { return imageColumns.scan(r) })
	return out, translate(err, "images")
}
