package runtime

import (
	"context"
	"testing"
)

// BenchmarkRootStatus: one Status of a running instance (what each view of
// the file API, ports, SSH and each reconcile pass pays per instance).
func BenchmarkRootStatus(b *testing.B) {
	env := newTestEnv(b, freeSubnet(b))
	ctx := context.Background()
	if err := env.rt.Create(ctx, InstanceSpec{ID: "st1", Image: env.ref}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if st, err := env.rt.Status(ctx, "st1"); err != nil || st.Task != "running" {
			b.Fatalf("status: %+v, %v", st, err)
		}
	}
}
