package memimage

// Usage is what an artifact holds, in bytes.
type Usage struct {
	// Logical is the sum of its files' sizes: what a full pull writes.
	Logical int64
	// Zero is the bytes of its holes (runs of zero pages), stored as
	// nothing.
	Zero int64
	// Stored is the manifest, the index and each distinct chunk once: what
	// the artifact alone takes in a registry (and in a tenant's quota when
	// nothing else shares its blobs).
	Stored int64
}

// Usage says what a holds.
func (a Artifact) Usage() Usage {
	u := Usage{Stored: a.ManifestSize}
	for _, b := range a.Blobs {
		u.Stored += b.Size
	}
	for fi := range a.Index.Files {
		f := &a.Index.Files[fi]
		u.Logical += f.Size
		offs := a.Index.offsets(f)
		for i, d := range f.Chunks {
			if d == "" {
				u.Zero += offs[i+1] - offs[i]
			}
		}
	}
	return u
}

// NewBytes is the bytes a stores that none of prev hold: its manifest, and
// every blob of its own not among prev's blobs. With prev the kept artifacts
// (and layers, as blobs) of a tenant, it is what storing a adds to the
// tenant's stored bytes, which is what a quota counts: a blob shared by two
// artifacts is stored, and counted, once.
func NewBytes(a Artifact, prev ...[]Blob) int64 {
	have := map[string]bool{}
	for _, bs := range prev {
		for _, b := range bs {
			have[b.Digest] = true
		}
	}
	n := a.ManifestSize
	for _, b := range a.Blobs {
		if !have[b.Digest] {
			n += b.Size
			have[b.Digest] = true
		}
	}
	return n
}
