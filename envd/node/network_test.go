package node

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
)

func TestClusterEndpoints(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		dsn     string
		regAddr string
		want    []string
	}{
		{"embedded parts are on loopback or sockets", Config{}, "host=/data/pg/run user=envd dbname=envd", "127.0.0.1:5000", nil},
		{"external parts", Config{
			S3:           &objstore.S3Config{Endpoint: "192.0.2.20:9000"},
			RegistryS3:   &registry.S3Storage{Endpoint: "s3.example.internal:9000"},
			InstanceDeny: []string{"198.51.100.0/24"},
		}, "postgres://envd@192.0.2.10:5433/envd", "192.0.2.11:5000",
			[]string{"192.0.2.10:5433", "192.0.2.11:5000", "192.0.2.20:9000", "s3.example.internal:9000", "198.51.100.0/24"}},
		{"localhost names", Config{}, "postgres://envd@localhost:5432/envd", "localhost:5000", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, clusterEndpoints(tt.cfg, tt.dsn, tt.regAddr))
		})
	}
}
