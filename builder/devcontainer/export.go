package devcontainer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/shellwords"
)

// Export writes the devcontainer.json (and a Dockerfile when the version
// was built from one) that makes version vs again: image is the name of
// the imported image it sits on (FROM), as envd resolves it.
//
//   - A version built from a Dockerfile (or a devcontainer.json) answers
//     that Dockerfile, its args and target, under "build"; its uploaded
//     context is not exported (noted in the file).
//   - Any other version answers its envd build spec (the packages it
//     added, with versions, sources, /etc files, run steps). Its packages
//     become a RUN line of a Dockerfile FROM image, which every tool
//     rebuilds (RUN steps reach package mirrors under the project's
//     egress policy on envd too), unless the spec has sources or env (the
//     install depends on them: then everything stays in the envd spec).
//     What is left (files, run steps, validation; all of it in that case)
//     goes under customizations.envd.spec, which envctl builds on the
//     image in a build container after it; other tools ignore that key.
//     Without packages in a RUN line, the file names "image" alone.
//
// The files are keyed by name ("devcontainer.json", "Dockerfile").
func Export(vs types.VersionSpec, image string) (map[string][]byte, error) {
	var head bytes.Buffer
	fmt.Fprintf(&head, "// version %d of %s (%s) on %s\n", vs.Version, vs.Project, vs.Kind, vs.Base)
	fmt.Fprintf(&head, "// rebuild it: envctl build PROJECT --devcontainer DIR (or -f devcontainer.json)\n")
	for _, o := range vs.Omitted {
		fmt.Fprintf(&head, "// not in it: %s: %s\n", o.Path, strings.ReplaceAll(o.Reason, "\n", " "))
	}
	doc := map[string]any{}
	files := map[string][]byte{}
	spec := vs.Spec
	if spec.Dockerfile != nil {
		b := map[string]any{"dockerfile": "Dockerfile"}
		if len(spec.Dockerfile.Args) > 0 {
			b["args"] = spec.Dockerfile.Args
		}
		if spec.Dockerfile.Target != "" {
			b["target"] = spec.Dockerfile.Target
		}
		doc["build"] = b
		files["Dockerfile"] = []byte(spec.Dockerfile.Content)
		if spec.Context != "" {
			fmt.Fprintf(&head, "// not in it: the build context %s (put the files the Dockerfile copies beside devcontainer.json)\n", spec.Context)
		}
	} else {
		doc["image"] = image
		spec.From, spec.Switch, spec.Context = 0, false, ""
		if run := installLine(spec); run != "" {
			delete(doc, "image")
			doc["build"] = map[string]any{"dockerfile": "Dockerfile"}
			files["Dockerfile"] = []byte("FROM " + image + "\n" + run)
			spec.Manager, spec.Packages = "", nil
		}
		for _, f := range spec.Files {
			if f.Source != "" {
				fmt.Fprintf(&head, "// not in it: %s comes from an uploaded context (source %s): give it as content\n", f.Path, f.Source)
			}
		}
		s, err := json.Marshal(spec)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := json.Unmarshal(s, &m); err != nil {
			return nil, err
		}
		if len(m) > 0 {
			doc["customizations"] = map[string]any{"envd": map[string]any{"spec": m}}
		}
	}
	body, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	files["devcontainer.json"] = append(append(head.Bytes(), body...), '\n')
	return files, nil
}

// installLine is the Dockerfile RUN line that installs spec's packages as
// envd's build does (builder.Steps: the same commands, in one step), or ""
// when they must stay in the envd spec: none, or the spec has sources
// (the install reads them) or env (the install's environment).
func installLine(spec types.BuildRequest) string {
	if len(spec.Packages) == 0 || spec.Sources != nil || len(spec.Env) > 0 {
		return ""
	}
	pkgs := slices.Clone(spec.Packages)
	slices.Sort(pkgs)
	pkgs = slices.Compact(pkgs)
	for i, p := range pkgs {
		pkgs[i] = shellwords.Quote(p)
	}
	list := " \\\n      " + strings.Join(pkgs, " \\\n      ")
	switch spec.Manager {
	case "apk":
		return "RUN apk add --no-cache" + list + "\n"
	case "apt":
		return "RUN apt-get -o Acquire::Retries=3 update \\\n" +
			" && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y --no-install-recommends --" + list + " \\\n" +
			" && apt-get clean && rm -rf /var/lib/apt/lists/*\n"
	}
	return ""
}
