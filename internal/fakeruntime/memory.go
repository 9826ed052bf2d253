package fakeruntime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/envd-dev/envd/runtime"
)

// MemoryFile is the file of an instance's upper dir that Memory treats as
// its processes' memory.
const MemoryFile = "memory"

// Memory is a Runtime with a memory checkpoint engine, as a node of runtime
// class gvisor has: CheckpointMemory writes the instance's MemoryFile as
// the image's pages.img (beside a small checkpoint.img naming the
// instance), and Create with RestoreFrom writes the image's pages.img back
// as the new instance's MemoryFile, so a resume shows the memory of the
// checkpoint. For tests of what envd does with memory images (store,
// count, move); the engine itself is tested on runsc.
type Memory struct{ *Runtime }

// InstanceClass is gvisor for every instance.
func (m Memory) InstanceClass(ctx context.Context, id string) (runtime.Class, error) {
	if _, ok := m.Spec(id); !ok {
		return "", fmt.Errorf("instance %q: %w", id, fs.ErrNotExist)
	}
	return runtime.ClassGVisor, nil
}

// ExternalConnections is none.
func (m Memory) ExternalConnections(ctx context.Context, id string) ([]string, error) {
	return nil, nil
}

// CheckpointMemory writes the image of id into dir (made here).
func (m Memory) CheckpointMemory(ctx context.Context, id, dir string) error {
	upper := m.UpperDir(id)
	if upper == "" {
		return fmt.Errorf("instance %q: %w", id, fs.ErrNotExist)
	}
	pages, err := os.ReadFile(filepath.Join(upper, MemoryFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "checkpoint.img"), []byte("checkpoint of "+id), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "pages.img"), pages, 0o600)
}

// Create is Runtime.Create; with spec.RestoreFrom the image's pages come
// back as the instance's MemoryFile.
func (m Memory) Create(ctx context.Context, spec runtime.InstanceSpec) error {
	if err := m.Runtime.Create(ctx, spec); err != nil {
		return err
	}
	if spec.RestoreFrom == "" {
		return nil
	}
	pages, err := os.ReadFile(filepath.Join(spec.RestoreFrom, "pages.img"))
	if err != nil {
		return fmt.Errorf("restore %q: %w", spec.ID, err)
	}
	return os.WriteFile(filepath.Join(m.upper(spec.ID), MemoryFile), pages, 0o644)
}
