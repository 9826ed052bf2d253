// Package memimage stores memory images (an engine's checkpoint of a
// sandbox's processes) in an OCI registry as content-addressed, deduplicated
// artifacts, and reads them back whole or lazily by range.
//
// Terms:
//
//   - image directory: what the engine writes and restores from, a flat
//     directory of regular files. gVisor's runsc writes checkpoint.img
//     (kernel state, ~170 KB), pages.img (resident memory as is) and
//     pages_meta.img (docs/gvisor.md). The package does not read them: any
//     flat directory round-trips byte for byte.
//   - extent, chunk, hole: a file is cut into extents at page (4 KiB)
//     boundaries (chunk.go). A run of zero pages (64 KiB or more) is a hole:
//     it is stored as nothing. The bytes between holes are cut into chunks
//     after each page whose hash says so (content-defined: the decision
//     depends on that page's bytes only), 256 KiB to 4 MiB long, 1 MiB on
//     average (DefaultChunkSize). Pages inserted or removed anywhere then
//     change only the chunks around them. Every chunk is a blob of its raw
//     bytes, named by their sha256, so a chunk already in the repository
//     (from an earlier checkpoint, or elsewhere in this one) is never
//     uploaded again.
//   - index: the artifact's config blob, listing each file's name, size,
//     mode and extents (digest, "" for a hole, and length; an extent's
//     offset is the sum of the lengths before it) with the chunking
//     parameters. It is what turns the blobs back into files, and what maps
//     a file offset to a blob and an offset in it for a lazy read (a binary
//     search). Indexes of fixed-size chunks, which earlier pushes wrote
//     (IndexV1MediaType), are still read.
//   - artifact: an OCI image manifest (artifactType ArtifactType) whose
//     config is the index and whose layers are the distinct chunk blobs, in
//     the order of their first use. Its subject, when set, is the manifest
//     of the version (the rootfs image) the memory belongs to, in the same
//     repository: runsc restores only onto the rootfs it checkpointed.
//
// Media types (documented in docs/api.md, "Memory images"):
//
//	artifactType       application/vnd.envd.memory.v1
//	config (the index) application/vnd.envd.memory.index.v2+json
//	                   (v1+json: fixed-size chunks, read only)
//	layers (chunks)    application/vnd.envd.memory.chunk.v1
//
// Chunks are stored raw, not compressed: a blob's byte range is then the
// file's byte range, so a lazy reader can fetch exactly the pages it needs,
// and the registry's ranged reads (registry/blobrange.go) serve them from the
// blob file.
//
// Order of a push, as for layers (DESIGN.md, the save path): chunk blobs,
// then the index, then the manifest by digest, then a HEAD of each. A crash
// leaves at most blobs no manifest names, which the registry's GC removes.
package memimage
