package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/envd-dev/envd/api/types"
	envdclient "github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// casResult is one side of one round of the cas scenario.
type casResult struct {
	switches, conflicts int
	lat                 []time.Duration // every compare-and-swap, won or lost
	took                time.Duration
}

func (r casResult) perSecond(n int) string {
	return fmt.Sprintf("%.0f", float64(n)/r.took.Seconds())
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// runCAS is the cas scenario (issue 15, item 4): n clients switch one
// project's current version back and forth, each reading the current one
// and asking for the other with it as expected_current, through the API
// (POST /v1/projects/{p}/current) and as a bare SQL compare-and-swap on the
// same PostgreSQL (UPDATE projects SET current_version = $new WHERE id = $id
// AND current_version = $expected). Latency is the compare-and-swap alone
// (the read before it is not timed), for wins and conflicts alike.
func runCAS(ctx context.Context, cfg config, out io.Writer) (rErr error) {
	started := time.Now()
	b, err := busyboxBed(ctx, cfg, "cas")
	defer b.closeInto(&rErr)
	if err != nil {
		return err
	}
	const project = "cas"
	if err := b.project(ctx, project, "estargz"); err != nil {
		return err
	}
	if _, _, _, err := b.makeVersion(ctx, project, "echo 2 > /home/v2", "version 2"); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, b.primary.DSN()+" pool_max_conns=80")
	if err != nil {
		return err
	}
	defer pool.Close()
	var pid int64
	if err := pool.QueryRow(ctx, "SELECT id FROM projects WHERE name = $1", project).Scan(&pid); err != nil {
		return err
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
	api, err := envdclient.New(b.primary.URL, b.primary.Token, envdclient.WithHTTPClient(hc))
	if err != nil {
		return err
	}

	sides := map[string]func(ctx context.Context) (bool, time.Duration, error){
		"API": func(ctx context.Context) (bool, time.Duration, error) {
			p, err := api.GetProject(ctx, project)
			if err != nil {
				return false, 0, err
			}
			start := time.Now()
			_, err = api.SetCurrent(ctx, project, types.SetCurrentRequest{Version: 3 - p.Current, ExpectedCurrent: &p.Current})
			d := time.Since(start)
			if errors.Is(err, errdefs.ErrConflict) {
				return false, d, nil
			}
			return err == nil, d, err
		},
		"bare SQL": func(ctx context.Context) (bool, time.Duration, error) {
			var cur int
			if err := pool.QueryRow(ctx, "SELECT current_version FROM projects WHERE id = $1", pid).Scan(&cur); err != nil {
				return false, 0, err
			}
			start := time.Now()
			tag, err := pool.Exec(ctx, "UPDATE projects SET current_version = $2 WHERE id = $1 AND current_version = $3", pid, 3-cur, cur)
			return err == nil && tag.RowsAffected() == 1, time.Since(start), err
		},
	}
	const window = 5 * time.Second
	round := func(n int, fn func(ctx context.Context) (bool, time.Duration, error)) (casResult, error) {
		var (
			mu  sync.Mutex
			res casResult
			wg  sync.WaitGroup
			fst error
		)
		rctx, cancel := context.WithTimeout(ctx, window)
		defer cancel()
		start := time.Now()
		for range n {
			wg.Go(func() {
				for rctx.Err() == nil {
					won, d, err := fn(rctx)
					if rctx.Err() != nil {
						return
					}
					mu.Lock()
					if err != nil && fst == nil {
						fst = err
					}
					if err == nil {
						res.lat = append(res.lat, d)
						if won {
							res.switches++
						} else {
							res.conflicts++
						}
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		res.took = time.Since(start)
		return res, fst
	}

	var w bytes.Buffer
	header(&w)
	fmt.Fprintf(&w, "One project with versions 1 and 2 on one node (its embedded PostgreSQL). N clients each loop: read the current version, then compare-and-swap it to the other one, "+
		"through the API (`POST /v1/projects/{p}/current` with `expected_current`, the Go client, keep-alive connections) or as a bare SQL statement on the same database (a pgx pool of up to 80 connections: the embedded PostgreSQL allows 100; the node's own pool has pgx's default, 4). "+
		"Latency is the compare-and-swap alone, wins and conflicts alike. %s windows, %d rounds per side alternating; medians of the rounds.\n\n", window, cfg.runs)
	var cells [][]string
	for _, n := range []int{10, 100} {
		got := map[string][]casResult{}
		order := []string{"API", "bare SQL"}
		for r := 0; r < cfg.runs; r++ {
			if r%2 == 1 {
				order = []string{"bare SQL", "API"}
			}
			for _, side := range order {
				res, err := round(n, sides[side])
				if err != nil {
					return fmt.Errorf("%s with %d clients: %w", side, n, err)
				}
				got[side] = append(got[side], res)
				logf("cas: %d clients, %s: %d switches, %d conflicts, p99 %s", n, side, res.switches, res.conflicts, percentile(res.lat, 0.99))
			}
		}
		p99 := map[string]time.Duration{}
		for _, side := range []string{"API", "bare SQL"} {
			var sw, cf, p50s, p99s []time.Duration
			for _, r := range got[side] {
				sw = append(sw, time.Duration(float64(r.switches)/r.took.Seconds()))
				cf = append(cf, time.Duration(float64(r.conflicts)/r.took.Seconds()))
				p50s = append(p50s, percentile(r.lat, 0.5))
				p99s = append(p99s, percentile(r.lat, 0.99))
			}
			p99[side] = median(p99s)
			cells = append(cells, []string{fmt.Sprint(n), side, fmt.Sprint(int64(median(sw))), fmt.Sprint(int64(median(cf))),
				fmt.Sprintf("%.2f ms", float64(median(p50s))/1e6), fmt.Sprintf("%.2f ms", float64(median(p99s))/1e6), ""})
		}
		cells[len(cells)-2][6] = fmt.Sprintf("%.2f×", float64(p99["API"])/float64(p99["bare SQL"]))
	}
	mdTable(&w, []string{"clients", "side", "switches/s", "conflicts/s", "p50", "p99", "API p99 / SQL p99"}, 2, cells)
	fmt.Fprintf(&w, "\n- Scenario wall time: %s.\n", seconds(time.Since(started)))
	_, err = out.Write(w.Bytes())
	return err
}
