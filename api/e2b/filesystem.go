package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// The filesystem.Filesystem service and /files, on envd's file API.
// Relative paths are taken from the instance's root ("/").

// entryInfo is filesystem.EntryInfo in proto3 JSON.
type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          int64   `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner"`
	Group         string  `json:"group"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
}

type pathRequest struct {
	Path  string `json:"path"`
	Depth uint32 `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

// absPath is p made absolute (from "/") and clean; "" is refused.
func absPath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("path: required: %w", errdefs.ErrInvalidArgument)
	}
	return path.Join("/", p), nil
}

// toEntry is f (in directory dir, when f.Path is empty) as EntryInfo.
func toEntry(f types.FileInfo) entryInfo {
	mode, _ := strconv.ParseUint(strings.TrimPrefix(f.Mode, "0o"), 8, 32)
	e := entryInfo{Name: f.Name, Path: f.Path, Size: f.Size, Mode: uint32(mode),
		Owner: strconv.Itoa(f.UID), Group: strconv.Itoa(f.GID)}
	fm := fs.FileMode(mode).Perm()
	switch f.Type {
	case types.FileTypeDir:
		e.Type, fm = "FILE_TYPE_DIRECTORY", fm|fs.ModeDir
	case types.FileTypeSymlink:
		e.Type, fm = "FILE_TYPE_SYMLINK", fm|fs.ModeSymlink
		t := f.LinkTarget
		e.SymlinkTarget = &t
	case types.FileTypeFile:
		e.Type = "FILE_TYPE_FILE"
	default:
		e.Type = "FILE_TYPE_UNSPECIFIED"
	}
	e.Permissions = fm.String()
	if !f.ModTime.IsZero() {
		e.ModifiedTime = f.ModTime.UTC().Format(time.RFC3339Nano)
	}
	return e
}

// listDir lists dir, every page.
func listDir(ctx context.Context, sb sandboxCall, dir string) ([]types.FileInfo, error) {
	var out []types.FileInfo
	page := types.Page{}
	for {
		l, err := sb.c.ListFilesPage(ctx, sb.id, dir, page)
		if err != nil {
			return nil, err
		}
		for _, f := range l.Entries {
			if f.Path == "" {
				f.Path = path.Join(dir, f.Name)
			}
			out = append(out, f)
		}
		if l.NextPageToken == "" {
			return out, nil
		}
		page = types.Page{Token: l.NextPageToken}
	}
}

// stat is p's entry, from its directory's listing.
func stat(ctx context.Context, sb sandboxCall, p string) (types.FileInfo, error) {
	if p == "/" {
		return types.FileInfo{Name: "/", Path: "/", Type: types.FileTypeDir, Mode: "0755"}, nil
	}
	entries, err := listDir(ctx, sb, path.Dir(p))
	if err != nil {
		if isCode(err, "not_found") {
			return types.FileInfo{}, fmt.Errorf("%s: no such file or directory: %w", p, errdefs.ErrNotFound)
		}
		return types.FileInfo{}, err
	}
	for _, f := range entries {
		if f.Name == path.Base(p) {
			return f, nil
		}
	}
	return types.FileInfo{}, fmt.Errorf("%s: no such file or directory: %w", p, errdefs.ErrNotFound)
}

// isCode: err is the API's error with code.
func isCode(err error, code string) bool {
	var e *types.Error
	return errors.As(err, &e) && e.Code == code
}

func (s *Server) filesystemRoutes() {
	const svc = "/filesystem.Filesystem/"
	s.mux.Handle("POST "+svc+"Stat", unary(s, func(ctx context.Context, sb sandboxCall, req *pathRequest) (any, error) {
		p, err := absPath(req.Path)
		if err != nil {
			return nil, err
		}
		f, err := stat(ctx, sb, p)
		if err != nil {
			return nil, err
		}
		return map[string]any{"entry": toEntry(f)}, nil
	}))
	s.mux.Handle("POST "+svc+"ListDir", unary(s, func(ctx context.Context, sb sandboxCall, req *pathRequest) (any, error) {
		p, err := absPath(req.Path)
		if err != nil {
			return nil, err
		}
		depth := int(req.Depth)
		if depth == 0 {
			depth = 1
		}
		out := []entryInfo{}
		var walk func(dir string, level int) error
		walk = func(dir string, level int) error {
			entries, err := listDir(ctx, sb, dir)
			if err != nil {
				return err
			}
			for _, f := range entries {
				out = append(out, toEntry(f))
				if f.Type == types.FileTypeDir && level < depth {
					if err := walk(f.Path, level+1); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if err := walk(p, 1); err != nil {
			return nil, err
		}
		return map[string]any{"entries": out}, nil
	}))
	s.mux.Handle("POST "+svc+"MakeDir", unary(s, func(ctx context.Context, sb sandboxCall, req *pathRequest) (any, error) {
		p, err := absPath(req.Path)
		if err != nil {
			return nil, err
		}
		// E2B answers already_exists for a directory that is there (the
		// SDK's makeDir then returns false); envd's mkdir -p would not.
		if _, err := stat(ctx, sb, p); err == nil {
			return nil, fmt.Errorf("%s: exists already: %w", p, errdefs.ErrAlreadyExists)
		}
		f, err := sb.c.MakeDir(ctx, sb.id, types.FileMkdirRequest{Path: p, Parents: true})
		if err != nil {
			return nil, err
		}
		if f.Path == "" {
			f.Path = p
		}
		return map[string]any{"entry": toEntry(f)}, nil
	}))
	s.mux.Handle("POST "+svc+"Move", unary(s, func(ctx context.Context, sb sandboxCall, req *moveRequest) (any, error) {
		from, err := absPath(req.Source)
		if err != nil {
			return nil, err
		}
		to, err := absPath(req.Destination)
		if err != nil {
			return nil, err
		}
		f, err := sb.c.MoveFile(ctx, sb.id, types.FileMoveRequest{From: from, To: to, Overwrite: true})
		if err != nil {
			return nil, err
		}
		if f.Path == "" {
			f.Path = to
		}
		return map[string]any{"entry": toEntry(f)}, nil
	}))
	s.mux.Handle("POST "+svc+"Remove", unary(s, func(ctx context.Context, sb sandboxCall, req *pathRequest) (any, error) {
		p, err := absPath(req.Path)
		if err != nil {
			return nil, err
		}
		if err := sb.c.DeleteFile(ctx, sb.id, p, client.Recursive()); err != nil {
			return nil, err
		}
		return struct{}{}, nil
	}))
	s.mux.Handle("POST "+svc+"WatchDir", serverStream(s, watchDir))
	for _, m := range []string{"CreateWatcher", "GetWatcherEvents", "RemoveWatcher"} {
		s.mux.HandleFunc("POST "+svc+m, func(w http.ResponseWriter, r *http.Request) {
			err := unimplemented("filesystem.Filesystem/%s (polled watchers) is not mapped: use WatchDir", m)
			if mediaType(r) == contentStreamJSON {
				w.Header().Set("Content-Type", contentStreamJSON)
				w.WriteHeader(http.StatusOK)
				_ = streamSender{w: w, rc: http.NewResponseController(w)}.envelope(flagEndStream, map[string]any{"error": toRPCError(err)})
				return
			}
			writeRPCError(w, err)
		})
	}
}

type watchRequest struct {
	Path         string `json:"path"`
	Recursive    bool   `json:"recursive"`
	IncludeEntry bool   `json:"includeEntry"`
}

// fsEvent is filesystem.FilesystemEvent: name relative to the watched
// directory.
type fsEvent struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// watchEvents are envd's file events as E2B's (inotify's, as fsnotify
// reports them): a move is the old name's RENAME and the new name's
// CREATE.
func watchEvents(dir string, ev types.FileEvent) []fsEvent {
	rel := func(p string) string {
		if r, ok := strings.CutPrefix(p, strings.TrimSuffix(dir, "/")+"/"); ok {
			return r
		}
		return path.Base(p)
	}
	switch ev.Type {
	case types.FileEventCreate:
		return []fsEvent{{rel(ev.Path), "EVENT_TYPE_CREATE"}}
	case types.FileEventModify:
		return []fsEvent{{rel(ev.Path), "EVENT_TYPE_WRITE"}}
	case types.FileEventDelete:
		return []fsEvent{{rel(ev.Path), "EVENT_TYPE_REMOVE"}}
	case types.FileEventMove:
		out := []fsEvent{}
		if ev.From != "" {
			out = append(out, fsEvent{rel(ev.From), "EVENT_TYPE_RENAME"})
		}
		return append(out, fsEvent{rel(ev.Path), "EVENT_TYPE_CREATE"})
	}
	return nil
}

// watchDir: filesystem.Filesystem/WatchDir on envd's files/watch. The
// start event is sent once envd has set the watch up, so the SDK's
// watchDir returns only when changes after it are seen. Events that
// overflowed envd's queue end the stream with resource_exhausted.
func watchDir(ctx context.Context, sb sandboxCall, req *watchRequest, keepAlive time.Duration, send func(any) error) error {
	if req.IncludeEntry {
		return unimplemented("includeEntry: watch events carry names only")
	}
	p, err := absPath(req.Path)
	if err != nil {
		return err
	}
	var opts []client.FileOption
	if req.Recursive {
		opts = append(opts, client.Recursive())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One goroutine sends: the watch's callbacks and the keep-alives meet
	// here.
	msgs := make(chan any)
	done := make(chan error, 1)
	go func() {
		done <- sb.c.WatchFilesStarted(ctx, sb.id, p, func() {
			select {
			case msgs <- map[string]any{"start": struct{}{}}:
			case <-ctx.Done():
			}
		}, func(ev types.FileEvent) error {
			if ev.Type == types.FileEventOverflow {
				return fmt.Errorf("watch %s: more changes than the node's queue holds; some were lost: %w", p, errdefs.ErrResourceExhausted)
			}
			for _, e := range watchEvents(p, ev) {
				select {
				case msgs <- map[string]any{"filesystem": e}:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		}, opts...)
	}()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case m := <-msgs:
			if err := send(m); err != nil {
				return err
			}
		case <-tick.C:
			if err := send(map[string]any{"keepalive": struct{}{}}); err != nil {
				return err
			}
		case err := <-done:
			if err == nil && ctx.Err() == nil {
				err = fmt.Errorf("watch %s: the directory went away or the sandbox stopped: %w", p, errdefs.ErrNotFound)
			}
			if errors.Is(ctx.Err(), context.Canceled) {
				return nil
			}
			return err
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil // the SDK's timeoutMs: the watch ends cleanly
			}
			return ctx.Err()
		}
	}
}

// fileError is the daemon's HTTP error body, {code, message}.
func writeFileError(w http.ResponseWriter, err error) { writeRESTError(w, err) }

// writtenEntry is the daemon's answer for a written file.
type writtenEntry struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) daemonRoutes() {
	s.processRoutes()
	s.filesystemRoutes()
	s.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	s.mux.HandleFunc("GET /files", func(w http.ResponseWriter, r *http.Request) {
		sb, ok := s.sandboxFor(w, r, writeFileError)
		if !ok {
			return
		}
		p, err := absPath(r.URL.Query().Get("path"))
		if err != nil {
			writeFileError(w, err)
			return
		}
		f, err := sb.c.ReadFile(r.Context(), sb.id, p, 0, 0)
		if err != nil {
			writeFileError(w, err)
			return
		}
		defer f.Close()
		if f.Dir {
			writeFileError(w, fmt.Errorf("%s is a directory: %w", p, errdefs.ErrInvalidArgument))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
		if f.Size >= 0 {
			w.Header().Set("Content-Length", strconv.FormatInt(f.Size, 10))
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.Copy(w, f)
	})
	s.mux.HandleFunc("POST /files", func(w http.ResponseWriter, r *http.Request) {
		sb, ok := s.sandboxFor(w, r, writeFileError)
		if !ok {
			return
		}
		if r.Header.Get("Content-Encoding") != "" {
			writeFileError(w, unimplemented("Content-Encoding %q: uploads are not compressed here", r.Header.Get("Content-Encoding")))
			return
		}
		qpath := r.URL.Query().Get("path")
		write := func(name string, body io.Reader) (writtenEntry, error) {
			p, err := absPath(name)
			if err != nil {
				return writtenEntry{}, err
			}
			if _, err := sb.c.WriteFile(r.Context(), sb.id, p, body, client.WithMkdir()); err != nil {
				return writtenEntry{}, err
			}
			return writtenEntry{Name: path.Base(p), Type: "file", Path: p}, nil
		}
		out := []writtenEntry{}
		if mt := mediaType(r); mt == "multipart/form-data" {
			_, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			mr := multipart.NewReader(r.Body, params["boundary"])
			for {
				part, err := mr.NextPart()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					writeFileError(w, fmt.Errorf("multipart body: %v: %w", err, errdefs.ErrInvalidArgument))
					return
				}
				if part.FormName() != "file" {
					continue
				}
				name := qpath
				if name == "" {
					// The raw name: Part.FileName keeps only its base.
					_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
					name = dp["filename"]
				}
				e, err := write(name, part)
				if err != nil {
					writeFileError(w, err)
					return
				}
				out = append(out, e)
			}
		} else {
			e, err := write(qpath, r.Body)
			if err != nil {
				writeFileError(w, err)
				return
			}
			out = append(out, e)
		}
		if len(out) == 0 {
			writeFileError(w, fmt.Errorf("no file in the body (a multipart part named file, or an octet-stream body with ?path=): %w", errdefs.ErrInvalidArgument))
			return
		}
		writeJSON(w, http.StatusOK, out)
	})
}
