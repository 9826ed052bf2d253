package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"syscall"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/envd-dev/envd/errdefs"
)

// S3Config locates an S3 bucket.
type S3Config struct {
	Endpoint  string // host:port, no scheme
	AccessKey string
	SecretKey string
	Bucket    string
	Secure    bool   // https
	Region    string // default "us-east-1"
	// MaxRetries is how often a failed request is tried; default 3. minio-go's
	// own default (10, with backoff) makes an unreachable server take
	// tens of seconds to report.
	MaxRetries int
}

// s3PartSize is the part size of uploads of unknown length. minio-go
// otherwise picks the part size for the largest possible object (5 TiB /
// 10000 parts = 512 MiB) and buffers a whole part in memory. 16 MiB parts
// bound memory to 16 MiB per upload and objects to 160 GB.
const s3PartSize = 16 << 20

// S3 is a Store in one S3 bucket, through minio-go (path-style requests,
// which S3-compatible servers such as versitygw expect).
type S3 struct {
	client *minio.Client
	bucket string
}

var _ Store = (*S3)(nil)

// NewS3 connects to the bucket, creating it when missing. An unreachable
// server gives errdefs.ErrUnavailable.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("s3: endpoint and bucket are required: %w", errdefs.ErrInvalidArgument)
	}
	if err := s3utils.CheckValidBucketNameStrict(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("s3 bucket %q: %w: %v", cfg.Bucket, errdefs.ErrInvalidArgument, err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.MaxRetries <= 0 {
		cfg.MaxRetries = 3
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:        credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure:       cfg.Secure,
		Region:       cfg.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   cfg.MaxRetries,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 %s: %w: %w", cfg.Endpoint, errdefs.ErrInvalidArgument, err)
	}
	s := &S3{client: client, bucket: cfg.Bucket}
	ok, err := client.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, s.wrap(ctx, "bucket "+cfg.Bucket, err)
	}
	if !ok {
		err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region})
		if err != nil {
			code := minio.ToErrorResponse(err).Code
			if code != "BucketAlreadyOwnedByYou" && code != "BucketAlreadyExists" {
				return nil, s.wrap(ctx, "create bucket "+cfg.Bucket, err)
			}
		}
	}
	return s, nil
}

// Put implements Store. Unknown sizes are uploaded in parts of s3PartSize;
// minio-go aborts the multipart upload when r fails, so no partial object
// becomes visible.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	opts := minio.PutObjectOptions{ContentType: "application/octet-stream"}
	if size < 0 {
		size = -1
		opts.PartSize = s3PartSize
	}
	body := r
	var exact *exactReader
	if size >= 0 {
		exact = &exactReader{r: r, remaining: size}
		body = exact
	}
	_, err := s.client.PutObject(ctx, s.bucket, key, body, size, opts)
	if err != nil {
		if exact != nil && exact.err != nil {
			return fmt.Errorf("put %q: %w", key, exact.err)
		}
		return s.wrap(ctx, "put "+key, err)
	}
	return nil
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.wrap(ctx, "get "+key, err)
	}
	// GetObject is lazy: Stat sends the request, so a missing key is
	// reported here rather than at the first Read.
	if _, err := obj.Stat(); err != nil {
		_ = obj.Close()
		return nil, s.wrap(ctx, "get "+key, err)
	}
	return obj, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	err := s.client.RemoveObject(ctx, s.bucket, key, minio.RemoveObjectOptions{})
	if err != nil && !errors.Is(s.wrap(ctx, "", err), errdefs.ErrNotFound) {
		return s.wrap(ctx, "delete "+key, err)
	}
	return nil
}

// List implements Store.
func (s *S3) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the listing goroutine on an early return
	var out []ObjectInfo
	for o := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			return nil, s.wrap(ctx, "list "+prefix, o.Err)
		}
		out = append(out, ObjectInfo{Key: o.Key, Size: o.Size, Modified: o.LastModified})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// wrap translates minio-go and transport errors into errdefs kinds.
func (s *S3) wrap(ctx context.Context, what string, err error) error {
	if what == "" {
		what = "s3"
	} else {
		what = "s3 " + what
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %w", what, ctx.Err())
	}
	resp := minio.ToErrorResponse(err)
	switch {
	case resp.Code == "NoSuchKey" || resp.Code == "NoSuchBucket":
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	case resp.Code == "InvalidBucketName" || resp.Code == "XMinioInvalidObjectName" || resp.Code == "InvalidArgument":
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInvalidArgument, err)
	case resp.Code == "AccessDenied" || resp.Code == "InvalidAccessKeyId" || resp.Code == "SignatureDoesNotMatch":
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrPermissionDenied, err)
	case resp.StatusCode >= 500:
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrUnavailable, err)
	}
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrUnavailable, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}
