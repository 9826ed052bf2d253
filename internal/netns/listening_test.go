package netns

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseListening(t *testing.T) {
	tcp := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 00000000:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
   2: 0100007F:1F90 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0 20 4 30 10 -1
`
	tcp6 := `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 4 1 0 100 0 0 10 0
   1: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0 100 0 0 10 0
`
	for _, tc := range []struct {
		name, table, proto string
		want               []Listener
	}{
		{"ipv4 loopback and any, established skipped", tcp, "tcp", []Listener{
			{Address: "127.0.0.1", Port: 8080, Protocol: "tcp"},
			{Address: "0.0.0.0", Port: 80, Protocol: "tcp"},
		}},
		{"ipv6 loopback and any", tcp6, "tcp6", []Listener{
			{Address: "::1", Port: 8081, Protocol: "tcp6"},
			{Address: "::", Port: 3000, Protocol: "tcp6"},
		}},
		{"header only", "  sl  local_address\n", "tcp", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseListening(strings.NewReader(tc.table), tc.proto)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	_, err := ParseListening(strings.NewReader("h\n 0: 0100007F:ZZZZ 00000000:0000 0A\n"), "tcp")
	assert.ErrorContains(t, err, "malformed port")
}
