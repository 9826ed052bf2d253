// Package versions is envd's metadata store in PostgreSQL: tenants and
// tokens, projects, their numbered versions and current pointer, instances
// and their generations, operations and their event logs.
//
// Terms:
//
//   - version: an immutable, numbered (1, 2, 3 ... per project) environment,
//     an OCI image recorded as repo@digest. Numbers come from the project's
//     next_version counter under the project's row lock: unique, increasing,
//     never reused. Kind is base, build, snapshot or migration; state is
//     creating, ready, failed or deleting. Only ready versions can be current.
//   - current: the version new instances start from (0 = none). It is changed
//     only by compare-and-swap, never by a blind write: CommitVersion and
//     SetCurrent take the expected current and change nothing about the
//     pointer if it moved meanwhile.
//   - expected current: the current the caller based its work on; for a save,
//     the version the instance started from. If current is no longer the
//     expected one, somebody else switched first: a committed save stays a
//     ready version (it can be switched to later) but does not become current.
//   - generation: a per-instance fencing token, 1 at creation, incremented by
//     BumpGeneration on every start or ownership move. CommitVersion refuses
//     (ErrStaleGeneration, nothing written) a save made under an older one.
//   - instance states: Pending, Running, Pausing, Paused, Resuming, Stopping,
//     Stopped, Terminated, Failed. The store treats them as opaque strings:
//     Instances.Transition changes state only from the states the caller names.
//   - operation: a long-running job; state pending -> running -> succeeded,
//     failed or canceled (terminal). Its events are numbered 1..N without gaps.
//
// Aggregates: Store keeps only opening, closing and InTx; the data lives in
// its aggregates (Aggregates), one per group of tables that change
// together: Projects (a project and its settings), Versions (versions and
// the current pointer, builds, checkpoints, squashes), Instances,
// Operations, Volumes, Access (tokens, SSH keys), Tenants (quotas, maxima),
// Nodes (membership), Rollouts, Content (images, upload leases, sweeps).
// Each runs on an executor (DB) that both the pool and a transaction
// satisfy: Store's aggregates commit each call on its own; InTx gives a Tx
// whose aggregates all write in one transaction, committed together.
//
// Errors carry the kinds of errdefs (ErrNotFound, ErrAlreadyExists,
// ErrConflict, ErrStaleGeneration, ErrFailedPrecondition, ErrUnavailable...);
// pgx and PostgreSQL errors are translated here and go no further (their text
// is kept in the message, never in the chain).
//
// The store does not validate names or images: the core does. Ids of
// instances and operations are chosen by the caller.
package versions
