package node

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
)

// The join command names the database, the registry (or its S3 bucket)
// and the S3 of volume archives, with the keys as variables, says which
// words are secrets, and quotes what a shell would split.
func TestJoinCommand(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		reg        registryPart
		want       []string // words of the command, in order
		secrets    []string
		noteAbout  string
		notInclude string
	}{
		{name: "external registry and S3",
			cfg: Config{S3: &objstore.S3Config{Endpoint: "s3:9000", Bucket: "envd", AccessKey: "AK", SecretKey: "S K"}},
			reg: registryPart{addr: "10.0.0.5:5000", files: registryFiles{Node: "/etc/envd/registry-node.credential"}},
			want: []string{"ENVD_S3_ACCESS_KEY=AK", "'ENVD_S3_SECRET_KEY=S K'", "envd", "serve", "--database", "'postgres://envd:pw@db:5432/envd?sslmode=disable&x=1'",
				"--registry", "10.0.0.5:5000", "--registry-credential-file", "/etc/envd/registry-node.credential", "--s3-endpoint", "s3:9000", "--s3-bucket", "envd"},
			secrets: []string{"--database", "ENVD_S3_ACCESS_KEY", "ENVD_S3_SECRET_KEY"}, noteAbout: "copy /etc/envd/registry-node.credential"},
		{name: "registry on S3, no archives",
			cfg:     Config{RegistryS3: &registry.S3Storage{Endpoint: "s3:9000", Bucket: "reg", AccessKey: "RA", SecretKey: "RS", Secure: true}},
			reg:     registryPart{addr: "127.0.0.1:5000"},
			want:    []string{"ENVD_REGISTRY_S3_ACCESS_KEY=RA", "ENVD_REGISTRY_S3_SECRET_KEY=RS", "--registry-s3-endpoint", "s3:9000", "--registry-s3-bucket", "reg", "--registry-s3-tls"},
			secrets: []string{"--database", "ENVD_REGISTRY_S3_ACCESS_KEY", "ENVD_REGISTRY_S3_SECRET_KEY"}, noteAbout: "volumes cannot follow",
			notInclude: "--registry 127.0.0.1:5000"},
		{name: "loopback registry", reg: registryPart{addr: "127.0.0.1:5000"},
			want: []string{"--registry", "127.0.0.1:5000"}, secrets: []string{"--database"}, noteAbout: "registry listens on loopback"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{cfg: tt.cfg}
			j := n.joinCommand(database{dsn: "postgres://envd:pw@db:5432/envd?sslmode=disable&x=1"}, tt.reg)
			rest := " " + j.Command + " "
			for _, w := range tt.want {
				i := strings.Index(rest, " "+w+" ")
				if assert.GreaterOrEqualf(t, i, 0, "%q, in order, in %s", w, j.Command) {
					rest = rest[i+len(w)+1:]
				}
			}
			assert.Equal(t, tt.secrets, j.Secrets)
			assert.Contains(t, strings.Join(j.Notes, "\n"), tt.noteAbout)
			assert.Contains(t, strings.Join(j.Notes, "\n"), "may create API tokens", "the line says it holds the admin's database role")
			if tt.notInclude != "" {
				assert.NotContains(t, j.Command, tt.notInclude)
			}
		})
	}
}
