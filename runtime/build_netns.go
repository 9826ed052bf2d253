package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	goruntime "runtime"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/envd-dev/envd/errdefs"
)

// AttachNetNS attaches a network namespace made by someone else (BuildKit
// makes one per RUN step) to the instances' bridge exactly as an instance's
// is attached: an isolated bridge port, an address from the same IPAM, no
// IPv6, and the firewall rules of pol under id (egress policy, the deny
// list, the node's addresses, other groups). It answers the bridge plugin's
// CNI result (JSON, CNI 1.0.0), which a CNI plugin can hand back as its own.
// DetachNetNS(id, path) undoes it; the namespace itself stays its maker's.
func (r *Runtime) AttachNetNS(ctx context.Context, id, path string, pol NetworkPolicy) (_ []byte, retErr error) {
	if r.net == nil || r.net.rulesOff {
		return nil, fmt.Errorf("attach network namespace %q: this runtime has no instance firewall: %w", id, errdefs.ErrUnavailable)
	}
	if err := pol.validate(); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(path, "/") || strings.Contains(id, "/") || id == "" {
		return nil, fmt.Errorf("attach network namespace %q at %q: %w", id, path, errdefs.ErrInvalidArgument)
	}
	if err := inNetNS(path, instanceSysctls); err != nil {
		return nil, fmt.Errorf("network namespace of %q: %w", id, err)
	}
	res, err := r.net.cni.Setup(ctx, id, path)
	if err != nil {
		return nil, fmt.Errorf("attach %q to network %s: %w", id, r.net.name, err)
	}
	defer func() {
		if retErr != nil {
			_ = r.DetachNetNS(context.WithoutCancel(ctx), id, path)
		}
	}()
	var ip []byte
	for name, cfg := range res.Interfaces {
		if cfg.Sandbox == "" && name != r.net.cfg.Bridge {
			if err := isolatePort(name); err != nil {
				return nil, fmt.Errorf("isolate bridge port of %q: %w", id, err)
			}
		}
		for _, ipc := range cfg.IPConfigs {
			if ip4 := ipc.IP.To4(); ip4 != nil && ip == nil {
				ip = ip4
			}
		}
	}
	if ip == nil {
		return nil, fmt.Errorf("network %s gave %q no IPv4 address", r.net.name, id)
	}
	if err := r.net.routeBetweenPorts(); err != nil {
		return nil, err
	}
	_, nameservers, err := r.instanceResolv(pol)
	if err != nil {
		return nil, err
	}
	if err := r.net.fw.apply(ctx, id, ip, pol, nameservers); err != nil {
		return nil, err
	}
	raw := res.Raw()
	if len(raw) == 0 {
		return nil, fmt.Errorf("network %s: no CNI result for %q", r.net.name, id)
	}
	return json.Marshal(raw[len(raw)-1])
}

// DetachNetNS removes what AttachNetNS(id, path) installed: the firewall
// rules and the bridge attachment (its address goes back to the IPAM).
// Idempotent.
func (r *Runtime) DetachNetNS(ctx context.Context, id, path string) error {
	if r.net == nil {
		return nil
	}
	var errs []error
	if err := r.net.fw.remove(id); err != nil {
		errs = append(errs, err)
	}
	if err := r.net.cni.Remove(ctx, id, path); err != nil {
		errs = append(errs, fmt.Errorf("detach %q from network %s: %w", id, r.net.name, err))
	}
	return errors.Join(errs...)
}

// DetachStaleNetNS removes every attachment whose id begins with prefix:
// those AttachNetNS made for a maker that died without detaching them (a
// node killed during a Dockerfile build leaves its RUN steps' rules and
// addresses). The caller knows none of them is in use: a node calls it
// for its BuildKit's prefix once that BuildKit's earlier process is gone.
func (r *Runtime) DetachStaleNetNS(ctx context.Context, prefix string) error {
	if r.net == nil || prefix == "" {
		return nil
	}
	ents, err := os.ReadDir(r.net.fw.stateDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("firewall state: %w", err)
	}
	var errs []error
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if ok && strings.HasPrefix(id, prefix) {
			errs = append(errs, r.DetachNetNS(ctx, id, ""))
		}
	}
	return errors.Join(errs...)
}

// inNetNS runs fn on a thread inside the network namespace at path. The
// thread is never given back (it changed namespace): Go discards it.
func inNetNS(path string, fn func() error) error {
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() {
		defer wg.Done()
		goruntime.LockOSThread()
		fd, oerr := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if oerr != nil {
			err = oerr
			return
		}
		defer unix.Close(fd)
		if err = unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			return
		}
		err = fn()
	}()
	wg.Wait()
	return err
}

// AgentBinary is the path of the installed static envd-agent ("" when
// agents are off).
func (r *Runtime) AgentBinary() string { return r.agents.bin }
