package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"
)

// The file API: /v1/instances/{i}/files and its subroutes. Paths are
// absolute as the instance sees them.

// FileOption sets a query parameter of a file request.
type FileOption func(url.Values)

// AsUser acts as a user of the instance (a name of its /etc/passwd or a
// number). Default: the image's user.
func AsUser(user string) FileOption { return func(q url.Values) { q.Set("user", user) } }

// AsIDs acts as uid and gid.
func AsIDs(uid, gid int) FileOption {
	return func(q url.Values) { q.Set("uid", strconv.Itoa(uid)); q.Set("gid", strconv.Itoa(gid)) }
}

// WithMode sets the permission bits of a written file (octal).
func WithMode(mode uint32) FileOption {
	return func(q url.Values) { q.Set("mode", strconv.FormatUint(uint64(mode), 8)) }
}

// WithMkdir makes missing parents of a written file (or the target of an
// uploaded archive).
func WithMkdir() FileOption { return func(q url.Values) { q.Set("mkdir", "1") } }

// Recursive removes a non-empty directory, or watches a whole subtree.
func Recursive() FileOption { return func(q url.Values) { q.Set("recursive", "1") } }

// WithFormat sets the archive format of DownloadArchive ("tar", the
// default, or "tar.zst").
func WithFormat(format string) FileOption { return func(q url.Values) { q.Set("format", format) } }

func fileQuery(path string, opts []FileOption) url.Values {
	q := url.Values{}
	if path != "" {
		q.Set("path", path)
	}
	for _, o := range opts {
		o(q)
	}
	return q
}

func filesPath(id, sub string) string { return "/v1/instances/" + esc(id) + "/files" + sub }

// ListFiles lists a directory: GET /v1/instances/{i}/files?path=P, every
// page of it (the server answers at most 1000 entries a page). A path
// that is a file is errdefs.ErrFailedPrecondition.
func (c *Client) ListFiles(ctx context.Context, id, path string, opts ...FileOption) (types.FileList, error) {
	var all types.FileList
	page := types.Page{Limit: types.MaxPageLimit}
	for {
		l, err := c.ListFilesPage(ctx, id, path, page, opts...)
		if err != nil {
			return types.FileList{}, err
		}
		if all.Path == "" {
			all = l
		} else {
			all.Entries = append(all.Entries, l.Entries...)
		}
		if l.NextPageToken == "" {
			all.NextPageToken = ""
			return all, nil
		}
		page.Token = l.NextPageToken
	}
}

// ListFilesPage is one page of a directory's listing, by name: at most
// page.Limit entries (1 to 1000, 0 = 1000) after page.Token (the
// NextPageToken of the page before; "" = the first page). NextPageToken
// is "" on the last page.
func (c *Client) ListFilesPage(ctx context.Context, id, path string, page types.Page, opts ...FileOption) (types.FileList, error) {
	q := fileQuery(path, opts)
	if page.Limit > 0 {
		q.Set("limit", strconv.Itoa(page.Limit))
	}
	if page.Token != "" {
		q.Set("page_token", page.Token)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: filesPath(id, ""), query: q})
	if err != nil {
		return types.FileList{}, err
	}
	defer resp.Body.Close()
	if t := resp.Header.Get("X-Envd-File-Type"); t != types.FileTypeDir {
		return types.FileList{}, &types.Error{Status: http.StatusConflict, Code: "failed_precondition",
			Message: fmt.Sprintf("path %q is not a directory: failed precondition", path)}
	}
	var l types.FileList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		return types.FileList{}, fmt.Errorf("list %s: decode response: %w", path, err)
	}
	return l, nil
}

// FileReader is a file's content being read.
type FileReader struct {
	io.ReadCloser
	// Size is the content's length (of the range, for a range), -1 when
	// unknown.
	Size int64
	// Dir is set when path was a directory: the body is its FileList.
	Dir bool
	// ContentType is the server's (from the name, or sniffed).
	ContentType string
}

// ReadFile reads a file: GET /v1/instances/{i}/files?path=P. With length
// > 0 (or offset > 0) only that range is read (length <= 0: to the end).
// The reader is the caller's to close.
func (c *Client) ReadFile(ctx context.Context, id, path string, offset, length int64, opts ...FileOption) (*FileReader, error) {
	h := http.Header{"Accept": {"*/*"}}
	if offset > 0 || length > 0 {
		r := "bytes=" + strconv.FormatInt(offset, 10) + "-"
		if length > 0 {
			r += strconv.FormatInt(offset+length-1, 10)
		}
		h.Set("Range", r)
	}
	resp, err := c.send(ctx, request{method: http.MethodGet, path: filesPath(id, ""), query: fileQuery(path, opts), header: h})
	if err != nil {
		return nil, err
	}
	return &FileReader{ReadCloser: resp.Body, Size: resp.ContentLength, Dir: resp.Header.Get("X-Envd-File-Type") == types.FileTypeDir,
		ContentType: resp.Header.Get("Content-Type")}, nil
}

// WriteFile writes a file atomically from content: PUT
// /v1/instances/{i}/files?path=P (WithMode, WithMkdir).
func (c *Client) WriteFile(ctx context.Context, id, path string, content io.Reader, opts ...FileOption) (types.FileInfo, error) {
	return sendDecode[types.FileInfo](ctx, c, request{method: http.MethodPut, path: filesPath(id, ""), query: fileQuery(path, opts),
		body: content, contentType: "application/octet-stream"}, "write "+path)
}

// DeleteFile removes a file or directory (Recursive for a non-empty one).
func (c *Client) DeleteFile(ctx context.Context, id, path string, opts ...FileOption) error {
	resp, err := c.send(ctx, request{method: http.MethodDelete, path: filesPath(id, ""), query: fileQuery(path, opts)})
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

func (c *Client) fileCall(ctx context.Context, id, sub string, in any, opts []FileOption) (types.FileInfo, error) {
	b, err := json.Marshal(in)
	if err != nil {
		return types.FileInfo{}, err
	}
	return sendDecode[types.FileInfo](ctx, c, request{method: http.MethodPost, path: filesPath(id, sub), query: fileQuery("", opts),
		body: strings.NewReader(string(b)), contentType: "application/json"}, "files"+sub)
}

// MakeDir makes a directory: POST /v1/instances/{i}/files/mkdir.
func (c *Client) MakeDir(ctx context.Context, id string, req types.FileMkdirRequest, opts ...FileOption) (types.FileInfo, error) {
	return c.fileCall(ctx, id, "/mkdir", req, opts)
}

// MoveFile renames: POST /v1/instances/{i}/files/move.
func (c *Client) MoveFile(ctx context.Context, id string, req types.FileMoveRequest, opts ...FileOption) (types.FileInfo, error) {
	return c.fileCall(ctx, id, "/move", req, opts)
}

// CopyFile copies: POST /v1/instances/{i}/files/copy.
func (c *Client) CopyFile(ctx context.Context, id string, req types.FileMoveRequest, opts ...FileOption) (types.FileInfo, error) {
	return c.fileCall(ctx, id, "/copy", req, opts)
}

// DownloadArchive streams a tar (WithFormat("tar.zst"): zstd) of a
// directory: GET /v1/instances/{i}/files/archive?path=P. The stream is the
// caller's to close; a server error mid-stream shows as a truncated tar.
func (c *Client) DownloadArchive(ctx context.Context, id, path string, opts ...FileOption) (io.ReadCloser, error) {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: filesPath(id, "/archive"), query: fileQuery(path, opts),
		header: http.Header{"Accept": {"*/*"}}})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// UploadArchive extracts a tar stream (plain, gzip or zstd) into a
// directory: POST /v1/instances/{i}/files/archive?path=P (WithMkdir).
func (c *Client) UploadArchive(ctx context.Context, id, path string, tarball io.Reader, opts ...FileOption) (types.FileArchiveResult, error) {
	return sendDecode[types.FileArchiveResult](ctx, c, request{method: http.MethodPost, path: filesPath(id, "/archive"), query: fileQuery(path, opts),
		body: tarball, contentType: "application/x-tar"}, "upload archive to "+path)
}

// WatchFiles calls fn with each change below a directory (Recursive: its
// whole subtree) until ctx ends (nil), the server ends the stream (the
// instance stopped or the directory went away: nil), or fn fails (its
// error): GET /v1/instances/{i}/files/watch.
func (c *Client) WatchFiles(ctx context.Context, id, path string, fn func(types.FileEvent) error, opts ...FileOption) error {
	return c.WatchFilesStarted(ctx, id, path, nil, fn, opts...)
}

// WatchFilesStarted is WatchFiles that calls started (when not nil) once
// the server has accepted the watch: it is set up then, so a change made
// after started returns is reported.
func (c *Client) WatchFilesStarted(ctx context.Context, id, path string, started func(), fn func(types.FileEvent) error, opts ...FileOption) error {
	resp, err := c.send(ctx, request{method: http.MethodGet, path: filesPath(id, "/watch"), query: fileQuery(path, opts),
		header: http.Header{"Accept": {"text/event-stream"}}})
	if err != nil {
		return err
	}
	if started != nil {
		started()
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	var typ string
	var data strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, io.EOF) {
				return fmt.Errorf("watch %s: the stream ended without its end event", path)
			}
			return fmt.Errorf("watch %s: %w", path, err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "event":
				typ = value
			case "data":
				data.WriteString(value)
			}
			continue
		}
		switch typ {
		case "":
		case sseEnd:
			return nil
		case sseError:
			var body types.ErrorBody
			if err := json.Unmarshal([]byte(data.String()), &body); err != nil || body.Error.Code == "" {
				return fmt.Errorf("watch %s: stream error %q", path, data.String())
			}
			return &types.Error{Code: body.Error.Code, Message: body.Error.Message, Details: body.Error.Details, RequestID: body.Error.RequestID}
		default:
			var ev types.FileEvent
			if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
				return fmt.Errorf("watch %s: decode event: %w", path, err)
			}
			if err := fn(ev); err != nil {
				return err
			}
		}
		typ = ""
		data.Reset()
	}
}
