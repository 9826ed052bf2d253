// Command envd-node-image assembles container images from root filesystem
// directories without a container engine (package nodeimage):
//
//	envd-node-image layer DIR OUT.tar.gz
//	envd-node-image image --ref NAME:TAG --layer L1.tar.gz [--layer L2.tar.gz]... \
//	    [--entrypoint '["/usr/bin/tini","--"]'] [--cmd '["envd","serve"]'] [--env K=V]... --out IMAGE.tar
//
// scripts/build-node-image.sh uses it to build the envd node image; the
// tar it writes is what `ctr -n k8s.io images import` takes.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/envd-dev/envd/internal/nodeimage"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "envd-node-image:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  envd-node-image layer DIR OUT.tar.gz
  envd-node-image image --ref NAME:TAG --layer FILE... [--entrypoint JSON] [--cmd JSON] [--env K=V]... [--workdir DIR] [--label K=V]... --out FILE`

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("%s", usage)
	}
	switch args[0] {
	case "layer":
		if len(args) != 3 {
			return fmt.Errorf("%s", usage)
		}
		return nodeimage.WriteLayer(args[1], args[2])
	case "image":
		fs := flag.NewFlagSet("image", flag.ContinueOnError)
		var layers, env, labels listFlag
		ref := fs.String("ref", "", "name:tag of the image")
		out := fs.String("out", "", "image tar to write")
		entry := fs.String("entrypoint", "", "entrypoint as a JSON array of strings")
		cmd := fs.String("cmd", "", "command as a JSON array of strings")
		workdir := fs.String("workdir", "", "working directory")
		fs.Var(&layers, "layer", "gzip layer tar, lowest first (repeatable)")
		fs.Var(&env, "env", "KEY=VALUE (repeatable; default a PATH)")
		fs.Var(&labels, "label", "KEY=VALUE (repeatable)")
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		if *ref == "" || *out == "" || fs.NArg() > 0 {
			return fmt.Errorf("%s", usage)
		}
		cfg := nodeimage.Config{Ref: *ref, Layers: layers, Env: env, WorkingDir: *workdir}
		for _, a := range []struct {
			flag, val string
			to        *[]string
		}{{"--entrypoint", *entry, &cfg.Entrypoint}, {"--cmd", *cmd, &cfg.Cmd}} {
			if a.val == "" {
				continue
			}
			if err := json.Unmarshal([]byte(a.val), a.to); err != nil {
				return fmt.Errorf("%s %q: want a JSON array of strings: %w", a.flag, a.val, err)
			}
		}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("--label %q: want KEY=VALUE", l)
			}
			if cfg.Labels == nil {
				cfg.Labels = map[string]string{}
			}
			cfg.Labels[k] = v
		}
		return nodeimage.Write(cfg, *out)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
