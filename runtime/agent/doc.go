// Package agent runs commands inside a container without runc: a small
// agent process, started once in the container by runc exec, forks and execs
// later commands itself. It already has everything runc exec would set up
// (namespaces, cgroup, seccomp filter, capabilities, rlimits, user,
// no_new_privs), so its children inherit them, and a command starts in a few
// milliseconds instead of about 85.
//
// Terms:
//
//   - host: envd's side. It listens on a unix socket; NewConn wraps one
//     accepted connection in a Conn, and Conn.Exec runs commands through it.
//   - agent: the process in the container (cmd/envd-agent). It dials the
//     socket (Run) and serves one connection at a time (Serve). The host never
//     connects to a path the container chose.
//   - exec: one command run through a connection, named by an exec id the
//     host chooses, unique per connection (never 0, never reused). The agent
//     ignores frames for ids it does not know, and refuses a Start for an id
//     that is live.
//   - live: an exec the agent has accepted a Start for and not yet answered
//     with StartFailed or Exit.
//   - drain: after the process exits, the agent keeps forwarding output while
//     something else (a background child) still holds the output pipes open,
//     until both pipes reach EOF or no output came for DrainGrace, or a Kill
//     arrives. Then it closes its read ends and sends Exit.
//   - untrusted: everything the host reads from the agent. A tenant can kill
//     the agent and connect a program of its own, so the host bounds every
//     length, never allocates by a size the peer gives beyond MaxFrame, and
//     ends the connection (Exec returns ErrLost) on a malformed frame.
//
// Wire protocol, version 1. A connection is a stream of frames:
//
//	type byte | exec id uint32 big-endian | payload length uint32 big-endian | payload
//
// The payload is at most MaxFrame bytes; a reader that sees a longer one
// fails and the connection is dropped. JSON payloads are UTF-8 objects.
//
//	type  name         direction     id    payload
//	1     Hello        agent → host  0     {"version":1,"pid":N}, the first frame, sent on connect
//	2     Start        host → agent  exec  {"args":[...],"env":[...],"cwd":"/x","stdin":true|false}
//	3     Stdin        host → agent  exec  data for the process's stdin
//	4     StdinEOF     host → agent  exec  none: close the process's stdin
//	5     Kill         host → agent  exec  1 byte, a signal number
//	6     Started      agent → host  exec  none: the process was forked
//	7     StartFailed  agent → host  exec  {"code":127,"message":"...","process":false}
//	8     Stdout       agent → host  exec  data
//	9     Stderr       agent → host  exec  data
//	10    Exit         agent → host  exec  {"code":N}, the last frame for the exec
//	11    StdinAck     agent → host  exec  uint32 big-endian, a count of stdin bytes written to the process
//
// Rules:
//
//   - The host rejects a Hello of another version (NewConn fails).
//   - Start with "stdin":false gives the process /dev/null; with true, Stdin
//     frames (each at most 32 KiB) follow, then StdinEOF. Frames for an exec
//     may follow its Start before Started arrives.
//   - Stdin flow control: the host keeps at most 128 KiB of stdin sent and
//     not yet acknowledged by StdinAck, so a process that does not read its
//     stdin costs the agent at most that much memory and never blocks the
//     agent's reading of other frames. When writing to the process's stdin
//     fails (it closed it), the agent discards further stdin and stops
//     acknowledging; the host stops sending at Exit.
//   - StartFailed: "process":false with code 127 (not found) or 126 (found,
//     not executable) is the command's failure, as a shell reports it, and
//     "message" is a shell's message (`nosuch: executable file not found in
//     $PATH`). "process":true is a failure to set up the process (working
//     directory, duplicate exec id, fork) and "message" says why.
//   - Stdout and Stderr frames come in the order the process wrote each
//     stream, each at most 32 KiB, all of them before the exec's Exit.
//   - Exit's code is the exit status, or 128+signal for a process killed by a
//     signal.
//   - Kill signals the process only (not its children). During the drain it
//     ends the drain at once.
//   - When the connection ends, the agent SIGKILLs the processes still running
//     from it: nobody can receive their output any more.
//   - Unknown frame types are ignored by both sides.
package agent
