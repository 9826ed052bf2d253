package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/spf13/cobra"

	"github.com/envd-dev/envd/client"
)

func (a *app) adminCommand() *cobra.Command {
	token := a.adminTokenCommand() // tokens.go

	var (
		q      types.Quota
		stored string
		ql     quotaLimitFlags
	)
	quota := &cobra.Command{
		Use:   "quota TENANT [--max-instances N] [--max-versions N] [--max-stored SIZE] [--max-ttl D]",
		Short: "Set a tenant's quota (flags not given are no limit)",
		Long: `Set a tenant's quota. Each flag not given is no limit:
  --max-instances  live instances at once (Pending to Stopping)
  --max-versions   versions of any one project
  --max-stored     bytes of the layers its versions added plus its volumes' sizes (e.g. 20G)
  --max-ttl        the longest instance TTL (a Go duration); with it, --ttl none is refused
  --max-idle-after the longest idle stop of its projects (a Go duration): longer
                   settings (and "never") are refused (invalid_argument, 400); it
                   also applies to projects and nodes that set none
  --max-memory, --max-pids, --max-cpus, --max-disk
                   the largest limits of one instance: a project asking more is
                   refused, node defaults above them are cut to them
  --runtime-classes the runtime classes its projects and instances may use
                   (runc, gvisor; comma-separated): a project setting another,
                   or an instance whose class (the project's, else the node's
                   default) is another, is refused with permission_denied (403)
What would exceed a quota is refused before anything is made, with code
quota_exceeded (HTTP 507) and the numbers.`,
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (got types.Quota, err error) {
				if stored != "" {
					if q.MaxStoredBytes, err = types.ParseSize(stored); err != nil {
						return got, usageError{fmt.Errorf("--max-stored: %w", err)}
					}
				}
				if err := ql.apply(&q); err != nil {
					return got, err
				}
				return c.SetQuota(ctx, args[0], q)
			}, quotaRows)
		},
	}
	f := quota.Flags()
	f.IntVar(&q.MaxInstances, "max-instances", 0, "live instances at once")
	f.IntVar(&q.MaxVersions, "max-versions", 0, "versions of any one project")
	f.StringVar(&stored, "max-stored", "", "stored bytes (version layers + volumes), e.g. 20G")
	f.StringVar(&q.MaxTTL, "max-ttl", "", "longest instance TTL")
	ql.add(f, &q)
	f.StringVar(&q.MaxIdleAfter, "max-idle-after", "", "longest idle setting of its projects (a Go duration); also applies to projects that set none")
	f.StringSliceVar(&q.RuntimeClasses, "runtime-classes", nil, "runtime classes its projects may use: runc, gvisor (comma-separated; default any)")
	return group("admin", "Tenants, tokens, quotas and rollouts (admin token)", token, quota, a.rolloutCommand())
}

func (a *app) usageCommand() *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "usage [--tenant T]",
		Short: "Show what a tenant uses of its quota (default: your own)",
		Args:  exactArgs(0),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return call(a, cmd, func(ctx context.Context, c *client.Client) (types.Usage, error) {
				return c.Usage(ctx, tenant)
			}, usageRows)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "another tenant (admin token)")
	return cmd
}

func limit(n int64, format func(int64) string) string {
	if n == 0 {
		return "no limit"
	}
	return format(n)
}

func count(n int64) string { return fmt.Sprint(n) }

func quotaRows(w io.Writer, q types.Quota) {
	row(w, "MAX INSTANCES:", limit(int64(q.MaxInstances), count))
	row(w, "MAX VERSIONS:", limit(int64(q.MaxVersions), count))
	row(w, "MAX STORED:", limit(q.MaxStoredBytes, formatBytes))
	row(w, "MAX TTL:", orDash(q.MaxTTL))
	quotaLimitRows(w, q)
	row(w, "MAX IDLE AFTER:", orDash(q.MaxIdleAfter))
	row(w, "RUNTIME CLASSES:", classesText(q.RuntimeClasses))
}

func classesText(cs []string) string {
	if len(cs) == 0 {
		return "any"
	}
	return strings.Join(cs, ", ")
}

func usageRows(w io.Writer, u types.Usage) {
	row(w, "TENANT:", u.Tenant)
	row(w, "INSTANCES:", fmt.Sprintf("%d of %s", u.Instances, limit(int64(u.Quota.MaxInstances), count)))
	row(w, "STORED:", fmt.Sprintf("%s of %s (versions %s, volumes %s, writable layers %s)", formatBytes(u.StoredBytes),
		limit(u.Quota.MaxStoredBytes, formatBytes), formatBytes(u.VersionBytes), formatBytes(u.VolumeBytes), formatBytes(u.DiskBytes)))
	names := make([]string, 0, len(u.Versions))
	for n := range u.Versions {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		row(w, "VERSIONS "+n+":", fmt.Sprintf("%d of %s", u.Versions[n], limit(int64(u.Quota.MaxVersions), count)))
	}
	row(w, "MAX TTL:", orDash(u.Quota.MaxTTL))
	quotaLimitRows(w, u.Quota)
	row(w, "MAX IDLE AFTER:", orDash(u.Quota.MaxIdleAfter))
	row(w, "RUNTIME CLASSES:", classesText(u.Quota.RuntimeClasses))
}
