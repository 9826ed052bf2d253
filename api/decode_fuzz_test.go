package api

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
)

// bodyTypes are the JSON request bodies of the API, by route.
var bodyTypes = []func() any{
	func() any { return new(types.CreateProjectRequest) },  // POST /projects
	func() any { return new(types.CreateInstanceRequest) }, // POST /projects/:p/instances
	func() any { return new(types.ExecRequest) },           // POST /instances/:i/exec
	func() any { return new(types.SaveRequest) },           // POST /instances/:i/save
	func() any { return new(types.BuildRequest) },          // POST /projects/:p/builds
	func() any { return new(types.MigrateRequest) },        // POST /projects/:p/migrations
	func() any { return new(types.Quota) },                 // PUT /admin/tenants/:t/quota
	func() any { return new(types.Retention) },             // PUT /projects/:p/retention
	func() any { return new(types.SetCurrentRequest) },     // POST /projects/:p/current
	func() any { return new(types.RenewRequest) },          // POST /instances/:i/renew
	func() any { return new(types.AddVolumeRequest) },      // POST /projects/:p/volumes
	func() any { return new(types.VolumeArchiveRequest) },  // POST .../archive, .../restore
	func() any { return new(types.CreateTokenRequest) },    // POST /admin/tenants/:t/tokens
	func() any { return new(types.GCRequest) },             // POST /admin/gc
}

func decodeBytes(body []byte, dst any) error {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = httptest.NewRequest("POST", "/", bytes.NewReader(body))
	return decodeJSON(c, dst)
}

// FuzzDecodeJSON: every body decodeJSON accepts round-trips (encoding the
// decoded request, decoding that and encoding again gives the same JSON); every
// body it refuses is errdefs.ErrInvalidArgument, never an internal error.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{}`, ``, `null`, `[]`, `{"name":"p","base":"fixture","excludes":["/tmp"],"volumes":["w:/w"]}`,
		`{"version":1,"ttl":"1h","retain":true}`, `{"args":["sh","-c","echo"],"env":["A=B"],"timeout":"1s","generation":3}`,
		`{"message":"m","expected_current":2}`, `{"manager":"apt","packages":["x1"],"validate":[["true"]],"from":1}`,
		`{"max_instances":1,"max_stored_bytes":9223372036854775807,"max_ttl":"1h"}`, `{"keep_last":-1}`,
		`{"version":99999999999999999999}`, `{"version":1.5}`, `{"version":"1"}`, `{"name":1}`, `{"colour":1}`,
		`{"name":"a"} {}`, `{"name":"a"} x`, `{"name":"\u0000"}`, "{\"name\":\"\xff\"}", `{"args":[null]}`,
		`{"expected_current":null}`, `{"validate":[[]]}`, `{"dry_run":"yes"}`, `{`, `"str"`, `1e999`,
	} {
		for i := range bodyTypes {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		newBody := bodyTypes[int(which)%len(bodyTypes)]
		v := newBody()
		err := decodeBytes(body, v)
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrInvalidArgument)
			require.Equal(t, "invalid_argument", errdefs.Code(err))
			return
		}
		encoded, err := json.Marshal(v)
		require.NoError(t, err)
		again := newBody()
		require.NoError(t, decodeBytes(encoded, again), "re-decoding %s", encoded)
		// Compared as encoded: omitempty makes an empty and a nil list the
		// same request.
		encodedAgain, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(encoded), string(encodedAgain))
	})
}
