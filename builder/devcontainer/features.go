package devcontainer

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/envd-dev/envd/internal/tarfs"
)

// Limits on what a feature brings.
const (
	// MaxFeatureBytes bounds a feature's layer (its tar) and the files in it.
	MaxFeatureBytes = 64 << 20
	// MaxFeatures bounds the features of one devcontainer.json.
	MaxFeatures = 32
	// FeatureLayerType is the media type of a feature's one layer.
	FeatureLayerType = "application/vnd.devcontainers.layer.v1+tar"
)

// FeatureRef is a parsed feature reference.
type FeatureRef struct {
	Ref   string // as written in devcontainer.json
	Local string // "./name": a directory beside devcontainer.json
	OCI   string // host/path[:tag|@digest]
	// ID is the reference without its tag or digest: what installsAfter
	// names.
	ID string
}

var localFeature = regexp.MustCompile(`^\./[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)

func parseFeatureRef(ref string) (FeatureRef, error) {
	prop := "features." + ref
	switch {
	case strings.HasPrefix(ref, "./"):
		if !localFeature.MatchString(ref) || slices.Contains(strings.Split(ref, "/"), "..") {
			return FeatureRef{}, invalid(prop, "a local feature is a directory under .devcontainer (./NAME)")
		}
		return FeatureRef{Ref: ref, Local: ref, ID: ref}, nil
	case strings.HasPrefix(ref, "https://"), strings.HasPrefix(ref, "http://"):
		return FeatureRef{}, refused(prop, "features as tarball URLs are not supported (OCI references and ./local ones are)")
	}
	r, ok := parseOCI(ref)
	if !ok {
		return FeatureRef{}, invalid(prop, "not an OCI reference (host/path:tag)")
	}
	return FeatureRef{Ref: ref, OCI: ref, ID: r.ID()}, nil
}

// Feature is a fetched feature: its metadata and the directory it is in.
type Feature struct {
	FeatureRef
	Dir      string // holds devcontainer-feature.json and install.sh
	Metadata FeatureMetadata
	Options  map[string]string // as asked in devcontainer.json
}

// FeatureMetadata is what envd reads of devcontainer-feature.json.
type FeatureMetadata struct {
	ID            string
	Version       string
	Options       map[string]FeatureOption
	ContainerEnv  map[string]string
	InstallsAfter []string
}

// FeatureOption is an option a feature declares.
type FeatureOption struct {
	Type    string   `json:"type"` // "string" or "boolean"
	Default any      `json:"default"`
	Enum    []string `json:"enum"`
}

// featureFields are the properties of devcontainer-feature.json envd
// reads or that describe it only; the others change how the container
// runs (mounts, privileged, entrypoint, lifecycle commands, dependsOn)
// and are refused.
var featureFields = []string{"id", "version", "name", "description", "documentationURL", "licenseURL",
	"keywords", "options", "containerEnv", "installsAfter", "legacyIds", "deprecated"}

func parseFeatureMetadata(ref string, data []byte) (FeatureMetadata, error) {
	prop := "features." + ref
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return FeatureMetadata{}, invalid(prop, "devcontainer-feature.json is not a JSON object")
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if !slices.Contains(featureFields, k) {
			return FeatureMetadata{}, refused(prop+"."+k, "the feature asks for what envd does not do (its devcontainer-feature.json)")
		}
	}
	var md struct {
		ID            string                   `json:"id"`
		Version       string                   `json:"version"`
		Options       map[string]FeatureOption `json:"options"`
		ContainerEnv  map[string]string        `json:"containerEnv"`
		InstallsAfter []string                 `json:"installsAfter"`
	}
	if err := json.Unmarshal(data, &md); err != nil {
		return FeatureMetadata{}, invalid(prop, "devcontainer-feature.json: %v", err)
	}
	if md.ID == "" {
		return FeatureMetadata{}, invalid(prop, "devcontainer-feature.json has no id")
	}
	for k, v := range md.ContainerEnv {
		if !envName.MatchString(k) || strings.ContainsAny(v, "\n\r\x00") {
			return FeatureMetadata{}, invalid(prop+".containerEnv", "%q: a variable name and a one-line value", k)
		}
	}
	return FeatureMetadata(md), nil
}

// Fetcher gets the features of a Config into directories.
type Fetcher struct {
	// ConfigDir is the directory of devcontainer.json (local features are
	// under it).
	ConfigDir string
	// Dir is where fetched features are written (one directory each).
	Dir string
	// HTTP is the client features are pulled with (nil: the default).
	HTTP *http.Client
}

// Fetch gets every feature of c, in install order (installsAfter, then
// by reference), with its options checked against its metadata.
func (f Fetcher) Fetch(ctx context.Context, c *Config) ([]Feature, error) {
	if len(c.Features) > MaxFeatures {
		return nil, invalid("features", "at most %d features", MaxFeatures)
	}
	var out []Feature
	for i, ref := range slices.Sorted(maps.Keys(c.Features)) {
		fr, err := parseFeatureRef(ref)
		if err != nil {
			return nil, err
		}
		dir := filepath.Join(f.Dir, fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if fr.Local != "" {
			err = copyLocalFeature(filepath.Join(f.ConfigDir, filepath.FromSlash(fr.Local)), dir, ref)
		} else {
			err = f.pull(ctx, fr, dir)
		}
		if err != nil {
			return nil, err
		}
		data, err := os.ReadFile(filepath.Join(dir, "devcontainer-feature.json"))
		if err != nil {
			return nil, invalid("features."+ref, "no devcontainer-feature.json in the feature")
		}
		md, err := parseFeatureMetadata(ref, data)
		if err != nil {
			return nil, err
		}
		if st, err := os.Stat(filepath.Join(dir, "install.sh")); err != nil || !st.Mode().IsRegular() {
			return nil, invalid("features."+ref, "no install.sh in the feature")
		}
		for id := range md.Options {
			if !envName.MatchString(optionEnv(id)) {
				return nil, invalid("features."+ref+".options", "option %q gives no variable name", id)
			}
		}
		opts := c.Features[ref]
		for k, v := range opts {
			o, ok := md.Options[k]
			if !ok {
				if k == "version" { // the string form names a version; the feature may not take it
					continue
				}
				return nil, invalid("features."+ref+"."+k, "the feature has no option %q", k)
			}
			if len(o.Enum) > 0 && !slices.Contains(o.Enum, v) {
				return nil, invalid("features."+ref+"."+k, "%q is not one of %v", v, o.Enum)
			}
			if o.Type == "boolean" && v != "true" && v != "false" {
				return nil, invalid("features."+ref+"."+k, "%q is not a boolean", v)
			}
		}
		out = append(out, Feature{FeatureRef: fr, Dir: dir, Metadata: md, Options: opts})
	}
	return orderFeatures(out)
}

// orderFeatures puts each feature after the ones its installsAfter names
// (among those present), otherwise keeping the given order.
func orderFeatures(fs []Feature) ([]Feature, error) {
	var out []Feature
	done := map[int]bool{}
	ids := func(f Feature) []string { return []string{f.ID, f.Metadata.ID} }
	for len(out) < len(fs) {
		progress := false
		for i, f := range fs {
			if done[i] {
				continue
			}
			ready := true
			for _, after := range f.Metadata.InstallsAfter {
				after = strings.TrimSuffix(after, "/")
				for j, g := range fs {
					if j != i && !done[j] && slices.Contains(ids(g), after) {
						ready = false
					}
				}
			}
			if ready {
				out = append(out, f)
				done[i] = true
				progress = true
				break
			}
		}
		if !progress {
			var left []string
			for i, f := range fs {
				if !done[i] {
					left = append(left, f.Ref)
				}
			}
			return nil, invalid("features", "installsAfter makes a cycle among %s", strings.Join(left, ", "))
		}
	}
	return out, nil
}

// pull fetches an OCI feature: a manifest with one layer, a tar.
func (f Fetcher) pull(ctx context.Context, fr FeatureRef, dir string) error {
	prop := "features." + fr.Ref
	r, ok := parseOCI(fr.OCI)
	if !ok {
		return invalid(prop, "not an OCI reference (host/path:tag)")
	}
	blob, err := pullFeatureLayer(ctx, f.HTTP, r, prop)
	if err != nil {
		return err
	}
	return extractFeature(bytes.NewReader(blob), dir, prop)
}

// extractFeature writes a feature's tar into dir: regular files and
// directories only, confined to dir, MaxFeatureBytes in all.
func extractFeature(r io.Reader, dir, prop string) error {
	tr := tar.NewReader(io.LimitReader(r, MaxFeatureBytes+1))
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return invalid(prop, "its layer is not a tar (or is larger than %d bytes): %v", MaxFeatureBytes, err)
		}
		clean, err := tarfs.Clean(hdr.Name)
		if err != nil {
			return invalid(prop, "%v", err)
		}
		if clean == "." {
			continue
		}
		dst := filepath.Join(dir, filepath.FromSlash(clean))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += hdr.Size
			if total > MaxFeatureBytes {
				return invalid(prop, "its files are larger than %d bytes", MaxFeatureBytes)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			mode := os.FileMode(0o644)
			if hdr.Mode&0o111 != 0 {
				mode = 0o755
			}
			out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return invalid(prop, "entry %s: %v", path.Clean(hdr.Name), err)
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return invalid(prop, "entry %s: only files and directories are taken from a feature (no links or devices)", hdr.Name)
		}
	}
}

// copyLocalFeature copies a local feature's regular files and directories
// (no links: a link could name a file outside the workspace).
func copyLocalFeature(src, dst, ref string) error {
	prop := "features." + ref
	st, err := os.Lstat(src)
	if err != nil || !st.IsDir() {
		return invalid(prop, "no directory %s", ref)
	}
	var total int64
	return filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if total += info.Size(); total > MaxFeatureBytes {
				return invalid(prop, "its files are larger than %d bytes", MaxFeatureBytes)
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(target, data, info.Mode().Perm()|0o644)
		default:
			return invalid(prop, "%s: only files and directories are taken from a feature (no links)", rel)
		}
	})
}
