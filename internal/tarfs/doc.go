// Package tarfs is envd's one way between directories and tar: the save
// path's upper dir into a layer (snapshotter), a rootfs directory into an
// image layer (registry), a volume into its archive and back (workspace), a
// layer's entries for migrations (builder), an uploaded rootfs tar into
// a layer (CopyRootfs), and the one replay of image layers into a flattened
// tree (Replay: migrations' conflicts, spec export, version changes). One place for a tar bug in the code that decides
// whether a save is faithful.
//
// Terms:
//   - tree: the directory being read (Walk, Write) or written (Extract).
//     Its own path is the caller's and is resolved as usual; everything
//     below it may be hostile (a running instance's upper dir, a tenant's
//     volume, an uploaded archive).
//   - name: a tar entry's name. Clean is the one sanitiser: relative, clean,
//     no ".." element, no NUL. Walk writes directories as "dir/", the root
//     (when written) as "./".
//   - confinement: reading, no symlink below the tree is ever followed
//     (every entry is reached through its directory's fd, see Dir); writing,
//     a symlink an earlier entry made may lead within the tree but never out
//     of it (openat2 RESOLVE_BENEATH), and the entry itself is never
//     followed. Leaving the tree is errdefs.ErrInvalidArgument.
//
// What every walk records: type, mode (setuid, setgid, sticky included),
// uid/gid, mtime, symlink targets, device numbers, xattrs as PAX
// "SCHILY.xattr.NAME" records (security.capability and ACLs included,
// overlayfs's own trusted.overlay.* never), hard links (a regular file's
// second name is a tar.TypeLink to its first). Sockets are never written.
//
// The hooks, each off by default:
//   - Options.Overlay: overlay whiteouts and opaque directories become OCI
//     markers (the save path); ReadLayer decodes them (migrations).
//   - Options.MapIDs and ExtractOptions.MapOwner: ownership mapping (the id
//     shift of a user namespace instance's save; a mapped restore).
//   - Options.Skip, Options.NoDevices, ExtractOptions.Skip,
//     ExtractOptions.Devices: what is left out.
//   - Options.Root, Options.Times: the root entry and mtime precision, as
//     each format has them.
package tarfs
