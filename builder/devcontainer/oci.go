package devcontainer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/envd-dev/envd/errdefs"
)

// A feature is pulled with the distribution API by hand (a manifest, then
// its one blob, both checked against their digests) rather than with a
// registry library: envctl stays light (client/deps_test.go), and a
// feature needs no more than this. Registries that want a token get an
// anonymous one from their Bearer challenge; private features are not
// supported.

// ociRef is a parsed OCI reference.
type ociRef struct {
	Host, Repo, Ref string // Ref: a tag or a digest
}

var (
	ociHost = regexp.MustCompile(`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$|^\[[0-9a-fA-F:]+\](:[0-9]{1,5})?$`)
	ociRepo = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*(/[a-z0-9]+([._-][a-z0-9]+)*)*$`)
	ociTag  = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)
	digestR = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)
)

// parseOCI reads host/repo[:tag|@digest]; no tag is "latest".
func parseOCI(s string) (ociRef, bool) {
	host, rest, ok := strings.Cut(s, "/")
	if !ok || !ociHost.MatchString(host) || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return ociRef{}, false
	}
	r := ociRef{Host: host, Ref: "latest"}
	if repo, d, ok := strings.Cut(rest, "@"); ok {
		r.Repo, r.Ref = repo, d
		if !digestR.MatchString(d) {
			return ociRef{}, false
		}
	} else if i := strings.LastIndex(rest, ":"); i >= 0 {
		r.Repo, r.Ref = rest[:i], rest[i+1:]
		if !ociTag.MatchString(r.Ref) {
			return ociRef{}, false
		}
	} else {
		r.Repo = rest
	}
	return r, ociRepo.MatchString(r.Repo)
}

// ID is the reference without tag or digest.
func (r ociRef) ID() string { return r.Host + "/" + r.Repo }

// scheme is http for loopback hosts (a registry a test runs), https
// otherwise.
func (r ociRef) scheme() string {
	h := r.Host
	if hh, _, err := net.SplitHostPort(h); err == nil {
		h = hh
	}
	h = strings.Trim(h, "[]")
	if h == "localhost" {
		return "http"
	}
	if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
		return "http"
	}
	return "https"
}

// registryClient pulls from one registry.
type registryClient struct {
	hc    *http.Client
	token string
}

const maxManifestBytes = 4 << 20

// get does a GET, answering a Bearer challenge once with an anonymous
// token.
func (c *registryClient) get(ctx context.Context, u, accept string) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			return nil, err
		}
		if resp.StatusCode == http.StatusUnauthorized && attempt == 0 {
			ch := resp.Header.Get("WWW-Authenticate")
			resp.Body.Close()
			if err := c.anonymousToken(ctx, ch); err != nil {
				return nil, err
			}
			continue
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			if resp.StatusCode == http.StatusNotFound {
				return nil, fmt.Errorf("GET %s: %s: %w", u, resp.Status, errdefs.ErrNotFound)
			}
			return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
		}
		return resp, nil
	}
}

var challengeParam = regexp.MustCompile(`(\w+)="([^"]*)"`)

func (c *registryClient) anonymousToken(ctx context.Context, challenge string) error {
	if !strings.HasPrefix(strings.ToLower(challenge), "bearer ") {
		return fmt.Errorf("the registry wants credentials (%q); only public features are supported", challenge)
	}
	params := map[string]string{}
	for _, m := range challengeParam.FindAllStringSubmatch(challenge, -1) {
		params[strings.ToLower(m[1])] = m[2]
	}
	realm, err := url.Parse(params["realm"])
	if err != nil || (realm.Scheme != "https" && realm.Scheme != "http") {
		return fmt.Errorf("the registry's token realm %q is not a URL", params["realm"])
	}
	q := realm.Query()
	for _, k := range []string{"service", "scope"} {
		if params[k] != "" {
			q.Set(k, params[k])
		}
	}
	realm.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("token from %s: %s", realm.Host, resp.Status)
	}
	var tok struct {
		Token       string `json:"token"`
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&tok); err != nil {
		return fmt.Errorf("token from %s: %v", realm.Host, err)
	}
	c.token = tok.Token
	if c.token == "" {
		c.token = tok.AccessToken
	}
	return nil
}

// pullFeatureLayer answers the one layer of a feature artifact, checked
// against its digest, at most MaxFeatureBytes.
func pullFeatureLayer(ctx context.Context, hc *http.Client, r ociRef, prop string) ([]byte, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &registryClient{hc: hc}
	base := r.scheme() + "://" + r.Host + "/v2/" + r.Repo
	unavailable := func(err error) error {
		if errors.Is(err, errdefs.ErrNotFound) {
			return errdefs.WithDetails(fmt.Errorf("%s: no such feature in its registry: %w", prop, err), map[string]any{"property": prop})
		}
		return fmt.Errorf("%s: %v: %w", prop, err, errdefs.ErrUnavailable)
	}
	resp, err := c.get(ctx, base+"/manifests/"+r.Ref, "application/vnd.oci.image.manifest.v1+json")
	if err != nil {
		return nil, unavailable(err)
	}
	mb, err := io.ReadAll(io.LimitReader(resp.Body, maxManifestBytes+1))
	resp.Body.Close()
	if err != nil {
		return nil, unavailable(err)
	}
	if len(mb) > maxManifestBytes {
		return nil, invalid(prop, "its manifest is larger than %d bytes", maxManifestBytes)
	}
	if digestR.MatchString(r.Ref) && digestOf(mb) != r.Ref {
		return nil, invalid(prop, "the manifest does not match its digest")
	}
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Size      int64  `json:"size"`
		} `json:"layers"`
	}
	if err := json.Unmarshal(mb, &m); err != nil {
		return nil, invalid(prop, "not an OCI manifest: %v", err)
	}
	if len(m.Layers) != 1 {
		return nil, invalid(prop, "a feature has one layer, this artifact has %d", len(m.Layers))
	}
	l := m.Layers[0]
	switch {
	case l.MediaType != FeatureLayerType:
		return nil, invalid(prop, "layer of media type %q, not %s", l.MediaType, FeatureLayerType)
	case !digestR.MatchString(l.Digest):
		return nil, invalid(prop, "layer digest %q", l.Digest)
	case l.Size > MaxFeatureBytes:
		return nil, invalid(prop, "its layer is %d bytes, more than %d", l.Size, MaxFeatureBytes)
	}
	resp, err = c.get(ctx, base+"/blobs/"+l.Digest, "")
	if err != nil {
		return nil, unavailable(err)
	}
	defer resp.Body.Close()
	blob, err := io.ReadAll(io.LimitReader(resp.Body, MaxFeatureBytes+1))
	if err != nil {
		return nil, unavailable(err)
	}
	if len(blob) > MaxFeatureBytes {
		return nil, invalid(prop, "its layer is larger than %d bytes", MaxFeatureBytes)
	}
	if digestOf(blob) != l.Digest {
		return nil, invalid(prop, "the layer does not match its digest %s", l.Digest)
	}
	return blob, nil
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}
