package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

func TestPlace(t *testing.T) {
	ready := func(name string) Candidate { return Candidate{Name: name, State: "ready"} }
	with := func(c Candidate, f func(*Candidate)) Candidate { f(&c); return c }
	tests := []struct {
		name    string
		req     Request
		cands   []Candidate
		want    string
		wantErr error
		reason  string // a part of the decision's reason
	}{
		{name: "a node whose real free disk is short is passed over", req: Request{Local: "a", LocalFirst: true, Limits: types.Limits{DiskBytes: 10 << 30}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.DiskRoom, c.DiskRoomKnown = 1<<30, true }), with(ready("b"), func(c *Candidate) { c.DiskRoom, c.DiskRoomKnown = 20<<30, true })},
			want:  "b", reason: "a (its real free disk takes new disk limits of 1073741824 bytes"},
		{name: "no node with real free disk: the choice stands, the node answers itself", req: Request{Limits: types.Limits{DiskBytes: 10 << 30}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.DiskRoom, c.DiskRoomKnown = 0, true }), with(ready("b"), func(c *Candidate) { c.DiskRoom, c.DiskRoomKnown, c.Instances = 1<<30, true, 1 })},
			want:  "a"},
		{name: "a node that reported no room takes instances without a disk limit",
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.DiskRoom, c.DiskRoomKnown = 0, true })}, want: "a"},
		{name: "a project's class goes to a node that runs it", req: Request{Local: "a", LocalFirst: true, Class: "gvisor"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.RuntimeClasses = []string{"runc"} }),
				with(ready("b"), func(c *Candidate) { c.RuntimeClasses, c.Instances = []string{"runc", "gvisor"}, 5 })},
			want: "b", reason: "a (cannot run runtime class gvisor (runs runc))"},
		{name: "a node that did not tell its classes is not passed over for one", req: Request{Class: "gvisor"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.RuntimeClasses = []string{"runc"} }), ready("b")}, want: "b"},
		{name: "no class named: any node", req: Request{Local: "a", LocalFirst: true},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.RuntimeClasses = []string{"runc"} })}, want: "a"},
		{name: "a class no member runs is failed_precondition", req: Request{Class: "gvisor"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.RuntimeClasses = []string{"runc"} }),
				with(ready("b"), func(c *Candidate) { c.RuntimeClasses, c.State = []string{"runc"}, "cordoned" })},
			wantErr: errdefs.ErrFailedPrecondition},
		{name: "a class only a cordoned node runs waits for it: resource_exhausted", req: Request{Class: "gvisor"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.RuntimeClasses = []string{"runc"} }),
				with(ready("b"), func(c *Candidate) { c.RuntimeClasses, c.State = []string{"runc", "gvisor"}, "cordoned" })},
			wantErr: errdefs.ErrResourceExhausted},
		{name: "ties go to the node asked", req: Request{Local: "b"},
			cands: []Candidate{ready("a"), ready("b"), ready("c")}, want: "b"},
		{name: "ties without the node asked go by name",
			cands: []Candidate{ready("c"), ready("a"), ready("b")}, want: "a"},
		{name: "a tenant's instances spread", req: Request{Local: "a"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.TenantInstances, c.Instances = 1, 1 }), ready("b")}, want: "b"},
		{name: "cache affinity beats an empty node",
			cands: []Candidate{ready("a"), with(ready("b"), func(c *Candidate) { c.HasImage = true })}, want: "b",
			reason: "cache affinity"},
		{name: "spread beats affinity once the tenant has an instance there",
			cands: []Candidate{ready("a"), with(ready("b"), func(c *Candidate) { c.HasImage, c.TenantInstances, c.Instances = true, 1, 1 })}, want: "a"},
		{name: "other tenants' load counts a little",
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.Instances = 3 }), with(ready("b"), func(c *Candidate) { c.Instances = 1 })}, want: "b"},
		{name: "volumes beat affinity and spread",
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.HoldsVolumes, c.TenantInstances = true, 2 }), with(ready("b"), func(c *Candidate) { c.HasImage = true })},
			want:  "a", reason: "volume data"},
		{name: "cordoned, draining, drained and lost nodes take nothing", req: Request{Local: "a"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.State = "cordoned" }), with(ready("b"), func(c *Candidate) { c.State = "draining" }),
				with(ready("c"), func(c *Candidate) { c.State = "lost" }), with(ready("d"), func(c *Candidate) { c.State = "drained" }), with(ready("e"), func(c *Candidate) { c.TenantInstances = 9 })},
			want: "e", reason: "a (cordoned)"},
		{name: "a lapsed lease takes nothing",
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.Lapsed = true }), with(ready("b"), func(c *Candidate) { c.Instances = 5 })}, want: "b"},
		{name: "node_selector", req: Request{Selector: map[string]string{"zone": "x", "gpu": "no"}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.Labels = map[string]string{"zone": "x"} }),
				with(ready("b"), func(c *Candidate) { c.Labels = map[string]string{"zone": "x", "gpu": "no"}; c.Instances = 4 })},
			want: "b", reason: "no label gpu=no"},
		{name: "memory must fit", req: Request{Limits: types.Limits{MemoryBytes: 3 << 30}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.MemoryBytes, c.UsedMemory = 4<<30, 2<<30 }),
				with(ready("b"), func(c *Candidate) { c.MemoryBytes, c.Instances = 8<<30, 3 })},
			want: "b"},
		{name: "CPUs beyond the node's do not fit", req: Request{Limits: types.Limits{CPUs: 4}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.CPUs = 2 }), with(ready("b"), func(c *Candidate) { c.CPUs = 0; c.Instances = 7 })},
			want:  "b"},
		{name: "CPUs are overcommitted", req: Request{Limits: types.Limits{CPUs: 2}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.CPUs, c.UsedCPUs = 2, 6 }), with(ready("b"), func(c *Candidate) { c.CPUs, c.Instances = 2, 3 })},
			want:  "a"},
		{name: "disk must fit", req: Request{Limits: types.Limits{DiskBytes: 10}},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.DiskBytes, c.UsedDisk = 15, 10 }), ready("b")}, want: "b"},
		{name: "slots", cands: []Candidate{with(ready("a"), func(c *Candidate) { c.Slots, c.Instances = 2, 2 }), with(ready("b"), func(c *Candidate) { c.Instances = 6 })}, want: "b"},
		{name: "no limit asked fits a full node's memory",
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.MemoryBytes, c.UsedMemory = 1, 1 })}, want: "a"},
		{name: "nothing fits", req: Request{Selector: map[string]string{"zone": "y"}},
			cands: []Candidate{ready("a"), with(ready("b"), func(c *Candidate) { c.State = "cordoned" })}, wantErr: errdefs.ErrResourceExhausted},
		{name: "no members", wantErr: errdefs.ErrResourceExhausted},
		{name: "placement local keeps it on the node asked", req: Request{Local: "a", LocalFirst: true},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.TenantInstances = 4 }), with(ready("b"), func(c *Candidate) { c.HasImage = true })}, want: "a", reason: "placement local"},
		{name: "placement local when the node asked cannot take it", req: Request{Local: "a", LocalFirst: true},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.State = "cordoned" }), ready("b")}, want: "b"},
		{name: "placement local yields to the volumes' node", req: Request{Local: "a", LocalFirst: true, VolumesOnlyOn: "b"},
			cands: []Candidate{ready("a"), ready("b")}, want: "b"},
		{name: "volumes only on one node go there", req: Request{VolumesOnlyOn: "b"},
			cands: []Candidate{with(ready("a"), func(c *Candidate) { c.HasImage = true }), with(ready("b"), func(c *Candidate) { c.TenantInstances = 3 })}, want: "b"},
		{name: "volumes only on a cordoned node: refused, never an empty volume", req: Request{VolumesOnlyOn: "b"},
			cands: []Candidate{ready("a"), with(ready("b"), func(c *Candidate) { c.State = "cordoned" })}, wantErr: errdefs.ErrVolumeElsewhere},
		{name: "volumes only on a node that left: refused", req: Request{VolumesOnlyOn: "gone"},
			cands: []Candidate{ready("a")}, wantErr: errdefs.ErrVolumeElsewhere},
		{name: "volumes only on a lost node: the refusal names the checkpoint that archived them",
			req:   Request{VolumesOnlyOn: "b", VolumesCheckpoint: 4, Project: "p"},
			cands: []Candidate{ready("a"), with(ready("b"), func(c *Candidate) { c.State = "lost" })}, wantErr: errdefs.ErrVolumeElsewhere,
			reason: "envctl up p --checkpoint 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := Place(tt.req, tt.cands)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				if tt.reason != "" {
					assert.ErrorContains(t, err, tt.reason)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, d.Node)
			assert.Contains(t, d.Reason, "placed on "+tt.want)
			if tt.reason != "" {
				assert.Contains(t, d.Reason, tt.reason)
			}
		})
	}
}
