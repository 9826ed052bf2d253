package devcontainer_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder/devcontainer"
	"github.com/envd-dev/envd/builder/devcontainer/devcontainertest"
	"github.com/envd-dev/envd/errdefs"
)

func TestParseCommentsAndTrailingCommas(t *testing.T) {
	t.Parallel()
	c, err := devcontainer.Parse([]byte(`// a comment first
{
	/* block
	   comment */ "image": "debian", // the base
	"containerEnv": {"URL": "http://x//y", "A": "/* not a comment */",},
	"forwardPorts": [3000, 8080,],
}
`))
	require.NoError(t, err)
	assert.Equal(t, "debian", c.Image)
	assert.Equal(t, map[string]string{"URL": "http://x//y", "A": "/* not a comment */"}, c.ContainerEnv)
	assert.Equal(t, []int{3000, 8080}, c.ForwardPorts)
}

func TestParseSupportedProperties(t *testing.T) {
	t.Parallel()
	c, err := devcontainer.Parse([]byte(`{
		"$schema": "x", "name": "dev",
		"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}, "target": "dev"},
		"features": {"example.com/f/a:1": {"greeting": "hi", "loud": true}, "example.com/f/b:2": "2.1", "./local": {}},
		"containerEnv": {"A": "1"}, "remoteEnv": {"P": "${containerEnv:PATH}:/x"},
		"remoteUser": "dev", "containerUser": "dev",
		"onCreateCommand": "echo one", "updateContentCommand": ["touch", "/a b"],
		"postCreateCommand": {"x": "echo x", "y": ["echo", "y"]},
		"postStartCommand": "date", "postAttachCommand": ["true"],
		"forwardPorts": [8080, 3000, 3000], "portsAttributes": {"3000": {"label": "web", "protocol": "https"}},
		"mounts": ["source=cache,target=/cache,type=volume", {"source": "data", "target": "/data"}]
	}`))
	require.NoError(t, err)
	assert.Equal(t, &devcontainer.Build{Dockerfile: "Dockerfile", Context: "..", Args: map[string]string{"V": "1"}, Target: "dev"}, c.Build)
	assert.Equal(t, map[string]map[string]string{"example.com/f/a:1": {"greeting": "hi", "loud": "true"},
		"example.com/f/b:2": {"version": "2.1"}, "./local": {}}, c.Features)
	assert.Equal(t, &devcontainer.Command{Shell: "echo one"}, c.OnCreate)
	assert.Equal(t, &devcontainer.Command{Args: []string{"touch", "/a b"}}, c.UpdateContent)
	assert.Equal(t, map[string]devcontainer.Command{"x": {Shell: "echo x"}, "y": {Args: []string{"echo", "y"}}}, c.PostCreate.Parallel)
	assert.Equal(t, []int{3000, 8080}, c.ForwardPorts)
	assert.Equal(t, devcontainer.PortAttributes{Label: "web", Protocol: "https"}, c.PortsAttributes[3000])
	assert.Equal(t, []devcontainer.Mount{{Source: "cache", Target: "/cache"}, {Source: "data", Target: "/data"}}, c.Mounts)
	assert.Equal(t, "dev", c.RemoteUser)
}

// Every property envd does not do is refused by name, with the stable
// code invalid_argument and the property in the details.
func TestParseRefusesByName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ doc, prop string }{
		{`{"image": "d", "runArgs": ["--privileged", "--cap-add=SYS_ADMIN"]}`, "runArgs"},
		{`{"image": "d", "runArgs": "--privileged"}`, "runArgs"},
		{`{"image": "d", "customizations": {"vscode": {}}}`, "customizations.vscode"},
		{`{"image": "d", "customizations": {"envd": {"spec": {"from": 2}}}}`, "customizations.envd.spec.from"},
		{`{"image": "d", "customizations": {"envd": {"other": 1}}}`, "customizations.envd.other"},
		{`{"image": "d", "workspaceFolder": "/w"}`, "workspaceFolder"},
		{`{"image": "d", "initializeCommand": "rm -rf ~"}`, "initializeCommand"},
		{`{"image": "d", "dockerComposeFile": "c.yml"}`, "dockerComposeFile"},
		{`{"image": "d", "privileged": "yes"}`, "privileged"},
		{`{"image": "d", "someFutureProperty": 1}`, "someFutureProperty"},
		{`{"dockerFile": "Dockerfile"}`, "dockerFile"},
		{`{"build": {"dockerfile": "D", "cacheFrom": "x"}}`, "build.cacheFrom"},
		{`{"build": {"context": "."}}`, "build.dockerfile"},
		{`{}`, "image"},
		{`{"image": "d", "build": {"dockerfile": "D"}}`, "image"},
		{`{"image": "d", "portsAttributes": {"3000": {"onAutoForward": "notify"}}}`, "portsAttributes.3000.onAutoForward"},
		{`{"image": "d", "portsAttributes": {"3000-3010": {"label": "x"}}}`, "portsAttributes.3000-3010"},
		{`{"image": "d", "forwardPorts": ["db:5432"]}`, "forwardPorts"},
		{`{"image": "d", "forwardPorts": [70000]}`, "forwardPorts"},
		{`{"image": "d", "mounts": ["source=/etc,target=/host,type=bind"]}`, "mounts[0].type"},
		{`{"image": "d", "mounts": [{"source": "v", "target": "/v", "consistency": "cached"}]}`, "mounts[0].consistency"},
		{`{"image": "d", "mounts": [{"source": "../x", "target": "/v"}]}`, "mounts[0].source"},
		{`{"image": "d", "features": {"https://example.com/f.tgz": {}}}`, "features.https://example.com/f.tgz"},
		{`{"image": "d", "features": {"./../outside": {}}}`, "features../../outside"},
		{`{"image": "d", "features": {"example.com/f:1": {"n": 3}}}`, "features.example.com/f:1.n"},
		{`{"image": "d", "containerEnv": {"A": "${localEnv:HOME}"}}`, "containerEnv.A"},
		{`{"image": "d", "containerEnv": {"A;rm": "x"}}`, "containerEnv"},
		{`{"image": "d", "remoteUser": "a b"}`, "remoteUser"},
		{`{"image": "d", "remoteUser": "a", "containerUser": "b"}`, "remoteUser"},
		{`{"image": "d", "postStartCommand": 5}`, "postStartCommand"},
		{`{"image": "d", "postCreateCommand": {"a": {"b": "c"}}}`, "postCreateCommand.a"},
	} {
		t.Run(tc.prop, func(t *testing.T) {
			_, err := devcontainer.Parse([]byte(tc.doc))
			require.Error(t, err)
			assert.Equal(t, "invalid_argument", errdefs.Code(err), err.Error())
			assert.Equal(t, tc.prop, errdefs.Details(err)["property"], err.Error())
			assert.Contains(t, err.Error(), tc.prop)
		})
	}
}

func TestParseHostileInput(t *testing.T) {
	t.Parallel()
	huge := []byte(`{"image": "d", "name": "` + strings.Repeat("x", devcontainer.MaxConfigBytes) + `"}`)
	_, err := devcontainer.Parse(huge)
	assert.Equal(t, "invalid_argument", errdefs.Code(err))
	for _, doc := range []string{`{"image": "d"`, `{"image": "d"} {}`, `[1]`, `/* open`, `{"image": "d`, ``, `null`} {
		_, err := devcontainer.Parse([]byte(doc))
		assert.Equal(t, "invalid_argument", errdefs.Code(err), "%q: %v", doc, err)
	}
}

// workspace writes files under a temp dir (paths relative to it) and
// answers it.
func workspace(t *testing.T, files map[string]string) string {
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
	return dir
}

func TestTranslateDockerfileBuild(t *testing.T) {
	t.Parallel()
	ws := workspace(t, map[string]string{
		".devcontainer/devcontainer.json": `{
			"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "1"}},
			"containerEnv": {"GREETING": "a \"quoted\" $HOME", "P": "${containerEnv:PATH}:/x"},
			"postCreateCommand": "echo made > /made",
			"postStartCommand": ["touch", "/started"],
			"forwardPorts": [8080], "portsAttributes": {"3000": {"label": "web"}},
			"mounts": ["source=data,target=/data,type=volume"],
		}`,
		".devcontainer/Dockerfile": "ARG V\nFROM base AS one\nRUN true\nFROM --platform=linux/amd64 one\nCOPY app /app\n",
		"app":                      "x",
	})
	file, err := devcontainer.Load(ws)
	require.NoError(t, err)
	p, err := devcontainer.Translate(context.Background(), file, devcontainer.Options{Work: t.TempDir()})
	require.NoError(t, err)
	assert.Equal(t, ws, p.ContextDir)
	assert.Contains(t, p.Dockerfile, "FROM --platform=linux/amd64 one AS envd_devcontainer_build\n")
	assert.Contains(t, p.Dockerfile, "\nFROM envd_devcontainer_build\n")
	assert.Contains(t, p.Dockerfile, `ENV GREETING="a \"quoted\" \$HOME"`)
	assert.Contains(t, p.Dockerfile, `ENV P="${PATH}:/x"`)
	assert.Contains(t, p.Dockerfile, `COPY --chmod=0755 [".envd-devcontainer/post-start.sh", "/etc/envd/post-start"]`)
	assert.Contains(t, p.Dockerfile, `RUN --mount=type=bind,source=.envd-devcontainer,target=/tmp/envd-devcontainer,rw ["/bin/sh", "/tmp/envd-devcontainer/postCreateCommand.sh"]`)
	assert.Equal(t, map[string]string{"V": "1"}, p.Args)
	assert.Equal(t, []devcontainer.Port{{Port: 3000, Label: "web"}, {Port: 8080}}, p.Ports)
	assert.Equal(t, []devcontainer.Mount{{Source: "data", Target: "/data"}}, p.Volumes)
	start, err := os.ReadFile(filepath.Join(p.Extra, devcontainer.ExtraDir, "post-start.sh"))
	require.NoError(t, err)
	assert.Contains(t, string(start), "touch /started")
}

func TestTranslateRefusesPathsOutsideTheWorkspace(t *testing.T) {
	t.Parallel()
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "Dockerfile"), []byte("FROM x\n"), 0o644))
	for name, tc := range map[string]struct {
		json, prop string
		link       bool
	}{
		"dockerfile above":   {json: `{"build": {"dockerfile": "../../Dockerfile"}}`, prop: "build.dockerfile"},
		"context above":      {json: `{"build": {"dockerfile": "Dockerfile", "context": "../.."}}`, prop: "build.context"},
		"dockerfile by link": {json: `{"build": {"dockerfile": "link/Dockerfile"}}`, prop: "build.dockerfile", link: true},
		"absolute":           {json: `{"build": {"dockerfile": "` + filepath.Join(outside, "Dockerfile") + `"}}`, prop: "build.dockerfile"},
	} {
		t.Run(name, func(t *testing.T) {
			ws := workspace(t, map[string]string{".devcontainer/devcontainer.json": tc.json, ".devcontainer/Dockerfile": "FROM x\n"})
			if tc.link {
				require.NoError(t, os.Symlink(outside, filepath.Join(ws, ".devcontainer", "link")))
			}
			_, err := devcontainer.Translate(context.Background(), filepath.Join(ws, ".devcontainer/devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
			require.Error(t, err)
			assert.Equal(t, "invalid_argument", errdefs.Code(err), err.Error())
			assert.Equal(t, tc.prop, errdefs.Details(err)["property"], err.Error())
		})
	}
}

const featureJSON = `{"id": "greet", "version": "1.0.0", "name": "Greet",
	"options": {"greeting": {"type": "string", "default": "hello"}, "with-date": {"type": "boolean", "default": false}},
	"containerEnv": {"GREET_HOME": "/opt/greet", "PATH": "/opt/greet/bin:${PATH}"},
	"installsAfter": ["REG/features/base"]}`

// installSh records its environment where the test can read it.
const installSh = "#!/bin/sh\nprintf '%s\\n' \"$GREETING\" > \"$OUT/greeting\"\nprintf '%s\\n' \"$WITH_DATE $_REMOTE_USER $_REMOTE_USER_HOME\" > \"$OUT/rest\"\n"

func TestFeaturesFromARegistry(t *testing.T) {
	t.Parallel()
	reg := devcontainertest.Registry(t)
	devcontainertest.PushFeature(t, reg+"/features/greet:1", devcontainertest.Tar(t, map[string]string{
		"devcontainer-feature.json": strings.ReplaceAll(featureJSON, "REG", reg), "install.sh": installSh}))
	devcontainertest.PushFeature(t, reg+"/features/base:1", devcontainertest.Tar(t, map[string]string{
		"devcontainer-feature.json": `{"id": "base", "version": "1.0.0"}`, "install.sh": "#!/bin/sh\ntrue\n"}))
	hostile := `it's $(touch /tmp/pwned) "x" ` + "`id`; \\ \n next"
	ws := workspace(t, map[string]string{".devcontainer/devcontainer.json": `{"image": "debian",
		"features": {"` + reg + `/features/greet:1": {"greeting": ` + jsonString(hostile) + `}, "` + reg + `/features/base:1": {}}}`})
	p, err := devcontainer.Translate(context.Background(), filepath.Join(ws, ".devcontainer/devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, p.Features, 2)
	// greet sorts first by reference but installs after base.
	assert.Equal(t, "base", p.Features[0].Metadata.ID)
	assert.Equal(t, "greet", p.Features[1].Metadata.ID)
	assert.Contains(t, p.Dockerfile, "FROM debian\nUSER root\n")
	assert.Contains(t, p.Dockerfile, `ENV PATH="/opt/greet/bin:${PATH}"`)
	assert.Regexp(t, `(?s)feature-0\.sh.*ENV GREET_HOME.*feature-1\.sh`, p.Dockerfile)

	// Run the generated install script with a shell, as the build does:
	// the option arrives as the feature's variable, byte for byte.
	extra := filepath.Join(p.Extra, devcontainer.ExtraDir)
	script, err := os.ReadFile(filepath.Join(extra, "feature-1.sh"))
	require.NoError(t, err)
	out := t.TempDir()
	fixed := strings.ReplaceAll(string(script), "/tmp/envd-devcontainer", extra)
	cmd := exec.Command("/bin/sh", "-c", fixed)
	cmd.Env = append(os.Environ(), "OUT="+out)
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, string(b))
	got, err := os.ReadFile(filepath.Join(out, "greeting"))
	require.NoError(t, err)
	assert.Equal(t, hostile+"\n", string(got))
	rest, err := os.ReadFile(filepath.Join(out, "rest"))
	require.NoError(t, err)
	assert.Equal(t, "false root /root\n", string(rest))
	_, err = os.Stat("/tmp/pwned")
	assert.True(t, os.IsNotExist(err), "an option's text ran as a command")
}

func jsonString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func TestFeatureRefusals(t *testing.T) {
	t.Parallel()
	reg := devcontainertest.Registry(t)
	push := func(repo string, files map[string]string) string {
		ref := reg + "/features/" + repo + ":1"
		devcontainertest.PushFeature(t, ref, devcontainertest.Tar(t, files))
		return ref
	}
	ok := map[string]string{"devcontainer-feature.json": `{"id": "ok", "options": {"v": {"type": "string", "enum": ["a", "b"]}}}`, "install.sh": "true"}
	for name, tc := range map[string]struct {
		ref, opts, prop string
	}{
		"mounts in the feature":   {push("mounts", map[string]string{"devcontainer-feature.json": `{"id": "m", "mounts": [{"source": "/", "target": "/h"}]}`, "install.sh": "true"}), `{}`, "features.REF.mounts"},
		"privileged feature":      {push("priv", map[string]string{"devcontainer-feature.json": `{"id": "p", "privileged": true}`, "install.sh": "true"}), `{}`, "features.REF.privileged"},
		"no install.sh":           {push("noinstall", map[string]string{"devcontainer-feature.json": `{"id": "n"}`}), `{}`, "features.REF"},
		"escaping entry":          {push("escape", map[string]string{"../../evil": "x", "devcontainer-feature.json": `{"id": "e"}`, "install.sh": "true"}), `{}`, "features.REF"},
		"unknown option":          {push("opt", ok), `{"nope": "x"}`, "features.REF.nope"},
		"option outside its enum": {push("enum", ok), `{"v": "c"}`, "features.REF.v"},
		"cycle": {push("cyc", map[string]string{"devcontainer-feature.json": `{"id": "cyc", "installsAfter": ["` + reg + `/features/cyc2"]}`, "install.sh": "true"}) + `": {}, "` +
			push("cyc2", map[string]string{"devcontainer-feature.json": `{"id": "cyc2", "installsAfter": ["` + reg + `/features/cyc"]}`, "install.sh": "true"}), `{}`, "features"},
	} {
		t.Run(name, func(t *testing.T) {
			ws := workspace(t, map[string]string{"devcontainer.json": `{"image": "d", "features": {"` + tc.ref + `": ` + tc.opts + `}}`})
			_, err := devcontainer.Translate(context.Background(), filepath.Join(ws, "devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
			require.Error(t, err)
			assert.Equal(t, "invalid_argument", errdefs.Code(err), err.Error())
			assert.Equal(t, strings.ReplaceAll(tc.prop, "REF", tc.ref), errdefs.Details(err)["property"], err.Error())
		})
	}
	t.Run("a huge layer", func(t *testing.T) {
		big := make([]byte, devcontainer.MaxFeatureBytes+1)
		ref := push("huge", map[string]string{"devcontainer-feature.json": `{"id": "h"}`, "install.sh": "true", "blob": string(big)})
		ws := workspace(t, map[string]string{"devcontainer.json": `{"image": "d", "features": {"` + ref + `": {}}}`})
		_, err := devcontainer.Translate(context.Background(), filepath.Join(ws, "devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
		assert.Equal(t, "invalid_argument", errdefs.Code(err))
	})
	t.Run("no such feature", func(t *testing.T) {
		ws := workspace(t, map[string]string{"devcontainer.json": `{"image": "d", "features": {"` + reg + `/features/none:1": {}}}`})
		_, err := devcontainer.Translate(context.Background(), filepath.Join(ws, "devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "features/none:1")
		assert.Equal(t, "not_found", errdefs.Code(err))
	})
}

// A local feature is read from beside devcontainer.json.
func TestLocalFeature(t *testing.T) {
	t.Parallel()
	ws := workspace(t, map[string]string{
		".devcontainer/devcontainer.json":               `{"image": "d", "features": {"./tools": {}}}`,
		".devcontainer/tools/devcontainer-feature.json": `{"id": "tools"}`,
		".devcontainer/tools/install.sh":                "#!/bin/sh\ntrue\n",
	})
	p, err := devcontainer.Translate(context.Background(), filepath.Join(ws, ".devcontainer/devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
	require.NoError(t, err)
	require.Len(t, p.Features, 1)
	assert.Equal(t, "tools", p.Features[0].Metadata.ID)
}

// The object form runs its entries at the same time and fails if one does.
func TestLifecycleObjectForm(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		cmd    string
		failed bool
	}{
		"all succeed": {`{"a": "echo a > \"$OUT/a\"", "b": ["sh", "-c", "echo b > \"$OUT/b\""]}`, false},
		"one fails":   {`{"a": "echo a > \"$OUT/a\"", "b": "exit 3"}`, true},
	} {
		t.Run(name, func(t *testing.T) {
			ws := workspace(t, map[string]string{"devcontainer.json": `{"image": "d", "postCreateCommand": ` + tc.cmd + `}`})
			p, err := devcontainer.Translate(context.Background(), filepath.Join(ws, "devcontainer.json"), devcontainer.Options{Work: t.TempDir()})
			require.NoError(t, err)
			out := t.TempDir()
			cmd := exec.Command("/bin/sh", filepath.Join(p.Extra, devcontainer.ExtraDir, "postCreateCommand.sh"))
			cmd.Env = append(os.Environ(), "OUT="+out)
			b, err := cmd.CombinedOutput()
			if tc.failed {
				require.Error(t, err)
				assert.Contains(t, string(b), "postCreateCommand: b failed")
			} else {
				require.NoError(t, err, string(b))
				got, _ := os.ReadFile(filepath.Join(out, "b"))
				assert.Equal(t, "b\n", string(got))
			}
			got, _ := os.ReadFile(filepath.Join(out, "a"))
			assert.Equal(t, "a\n", string(got))
		})
	}
}

// An exported version reads back as a devcontainer.json with the same
// spec; a Dockerfile version exports its Dockerfile.
func TestExportRoundTrips(t *testing.T) {
	t.Parallel()
	vs := types.VersionSpec{Project: "p", Version: 2, Kind: "snapshot", Base: "images/debian@sha256:ab", BaseVersion: 1,
		Spec: types.BuildRequest{Manager: "apt", Packages: []string{"tree=2.1.0-1"}, From: 1,
			Files: []types.BuildFile{{Path: "/etc/x.conf", Content: "a=1\n"}}},
		Omitted: []types.SpecOmit{{Path: "/var/lib/x", Reason: "outside /etc"}}}
	files, err := devcontainer.Export(vs, "debian")
	require.NoError(t, err)
	assert.Contains(t, string(files["devcontainer.json"]), "// not in it: /var/lib/x: outside /etc")
	c, err := devcontainer.Parse(files["devcontainer.json"])
	require.NoError(t, err)
	assert.Empty(t, c.Image, "the packages are installed by a Dockerfile FROM the image")
	assert.Equal(t, &devcontainer.Build{Dockerfile: "Dockerfile"}, c.Build)
	assert.Equal(t, "FROM debian\nRUN apt-get -o Acquire::Retries=3 update \\\n"+
		" && DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Retries=3 install -y --no-install-recommends -- \\\n      tree=2.1.0-1 \\\n"+
		" && apt-get clean && rm -rf /var/lib/apt/lists/*\n", string(files["Dockerfile"]))
	var got types.BuildRequest
	require.NoError(t, json.Unmarshal(c.EnvdSpec, &got))
	assert.Equal(t, types.BuildRequest{Files: vs.Spec.Files}, got, "what the Dockerfile does not do stays in the envd spec")

	// A hostile package name stays one word; the generated line runs it
	// as an argument of apt-get, never as a command.
	vs.Spec = types.BuildRequest{Manager: "apk", Packages: []string{"b", "a;touch /tmp/x", "b"}}
	files, err = devcontainer.Export(vs, "alpine")
	require.NoError(t, err)
	assert.Equal(t, "FROM alpine\nRUN apk add --no-cache \\\n      'a;touch /tmp/x' \\\n      b\n", string(files["Dockerfile"]))
	assert.NotContains(t, string(files["devcontainer.json"]), "customizations", "nothing left for envd's spec")

	// With sources the install depends on, everything stays in the spec.
	vs.Spec = types.BuildRequest{Manager: "apt", Packages: []string{"tree"}, Sources: &types.BuildSources{}}
	files, err = devcontainer.Export(vs, "debian")
	require.NoError(t, err)
	assert.NotContains(t, files, "Dockerfile")
	c, err = devcontainer.Parse(files["devcontainer.json"])
	require.NoError(t, err)
	assert.Equal(t, "debian", c.Image)
	require.NoError(t, json.Unmarshal(c.EnvdSpec, &got))
	assert.Equal(t, []string{"tree"}, got.Packages)

	vs.Spec = types.BuildRequest{Dockerfile: &types.DockerfileBuild{Content: "FROM debian\nRUN true\n", Args: map[string]string{"A": "1"}}}
	files, err = devcontainer.Export(vs, "debian")
	require.NoError(t, err)
	assert.Equal(t, "FROM debian\nRUN true\n", string(files["Dockerfile"]))
	c, err = devcontainer.Parse(files["devcontainer.json"])
	require.NoError(t, err)
	assert.Equal(t, &devcontainer.Build{Dockerfile: "Dockerfile", Args: map[string]string{"A": "1"}}, c.Build)
}

// "privileged": true and runArgs ["--privileged"] ask for Docker inside
// (Config.Docker); false or neither do not.
func TestParseDocker(t *testing.T) {
	t.Parallel()
	for doc, want := range map[string]bool{
		`{"image": "d", "privileged": true}`:                               true,
		`{"image": "d", "runArgs": ["--privileged"]}`:                      true,
		`{"image": "d", "privileged": false}`:                              false,
		`{"image": "d", "runArgs": []}`:                                    false,
		`{"image": "d"}`:                                                   false,
		`{"image": "d", "privileged": false, "runArgs": ["--privileged"]}`: true,
	} {
		c, err := devcontainer.Parse([]byte(doc))
		require.NoError(t, err, doc)
		assert.Equal(t, want, c.Docker, doc)
	}
}
