// Command gatewaybench measures cellserver's gateway front ends against its
// RESP path in one run: the same one-limit fixed-window decision asked
// through CL.LIMIT over RESP (go-redis), the HTTP forward-auth check, and
// Envoy's RLS v3 gRPC service, each by the same number of concurrent
// keep-alive clients, in alternating rounds against one server process.
//
// It reports calls/s and the server's CPU per call (from /proc), so the
// ratios say what each front end costs beyond the decision itself. The
// clients run in this process, on the same machine: their cost is in the
// calls/s figure, not in the CPU-per-call one.
//
//	go run ./bench/cmd/gatewaybench --rounds 3 --duration 5s --out bench/results
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cellserver/cellserver/bench"
)

const policy = `domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 4000000000
`

func main() {
	rounds := flag.Int("rounds", 3, "measured rounds; the front ends alternate within each")
	dur := flag.Duration("duration", 5*time.Second, "length of each measured run")
	clients := flag.Int("clients", 50, "concurrent keep-alive clients")
	keys := flag.Int("keys", 100000, "distinct keys, picked at random per call")
	bin := flag.String("cellserver-bin", "", "benchmark this binary instead of building ./cmd/cellserver")
	out := flag.String("out", "", "also write the report to DIR/gateway-<time>.md")
	flag.Parse()
	if err := run(*rounds, *dur, *clients, *keys, *bin, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gatewaybench:", err)
		os.Exit(1)
	}
}

// frontEnd is one way of asking for the decision: call makes one call for
// key from client number i.
type frontEnd struct {
	name string
	call func(ctx context.Context, i int, key string) error
}

func run(rounds int, dur time.Duration, clients, nkeys int, bin, outDir string) error {
	tmp, err := os.MkdirTemp("", "gatewaybench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	repo, err := bench.FindRepo(".")
	if err != nil {
		return err
	}
	if bin == "" {
		if bin, err = bench.BuildCellserver(repo, tmp); err != nil {
			return err
		}
	}
	pol := filepath.Join(tmp, "policy.yaml")
	if err := os.WriteFile(pol, []byte(policy), 0o644); err != nil {
		return err
	}
	hp, err := bench.FreePort()
	if err != nil {
		return err
	}
	gp, err := bench.FreePort()
	if err != nil {
		return err
	}
	httpAddr, grpcAddr := "127.0.0.1:"+strconv.Itoa(hp), "127.0.0.1:"+strconv.Itoa(gp)
	srv, err := bench.StartCellserver(bench.CellserverOptions{Binary: bin, Dir: filepath.Join(tmp, "srv"),
		Args: []string{"--policy-file", pol, "--http-addr", httpAddr, "--grpc-addr", grpcAddr}})
	if err != nil {
		return err
	}
	defer srv.Stop()

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: clients, MinIdleConns: clients})
	defer rdb.Close()
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients,
		DialContext: (&net.Dialer{}).DialContext}}
	conns := make([]pb.RateLimitServiceClient, clients)
	for i := range conns {
		cc, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer cc.Close()
		conns[i] = pb.NewRateLimitServiceClient(cc)
	}
	fes := []frontEnd{
		{"resp CL.LIMIT", func(ctx context.Context, _ int, key string) error {
			return rdb.Do(ctx, "CL.LIMIT", "bench:user:"+key, "FW", 4000000000, 1).Err()
		}},
		{"http check", func(ctx context.Context, _ int, key string) error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/check/bench?d=user=header:X-User", nil)
			req.Header.Set("X-User", key)
			resp, err := hc.Do(req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("http check answered %s", resp.Status)
			}
			return nil
		}},
		{"grpc rls", func(ctx context.Context, i int, key string) error {
			r, err := conns[i].ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench",
				Descriptors: []*rlsv3.RateLimitDescriptor{{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "user", Value: key}}}}})
			if err != nil {
				return err
			}
			if r.OverallCode != pb.RateLimitResponse_OK {
				return fmt.Errorf("rls answered %v", r.OverallCode)
			}
			return nil
		}},
	}
	keyNames := make([]string, nkeys)
	for i := range keyNames {
		keyNames[i] = strconv.Itoa(i)
	}
	type res struct{ calls, cpuPerCall []float64 }
	results := make([]res, len(fes))
	for _, fe := range fes { // warm-up, and a check that each answers
		if _, _, err := measure(srv, fe, clients, keyNames, time.Second); err != nil {
			return fmt.Errorf("%s: %w", fe.name, err)
		}
	}
	for r := 0; r < rounds; r++ {
		for j, fe := range fes {
			cps, cpu, err := measure(srv, fe, clients, keyNames, dur)
			if err != nil {
				return fmt.Errorf("%s: %w", fe.name, err)
			}
			results[j].calls = append(results[j].calls, cps)
			results[j].cpuPerCall = append(results[j].cpuPerCall, cpu)
			fmt.Fprintf(os.Stderr, "round %d %-14s %10.0f calls/s %6.2f µs server CPU/call\n", r+1, fe.name, cps, cpu)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Gateway front ends against RESP CL.LIMIT (%s)\n\n", time.Now().UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "`go run ./bench/cmd/gatewaybench --rounds %d --duration %s --clients %d --keys %d`: one cellserver "+
		"(default flags, default persistence) with --policy-file, --http-addr, --grpc-addr; %d concurrent keep-alive "+
		"clients in this process (go-redis pool, net/http, one grpc.ClientConn each); one fixed-window limit per call "+
		"on a key picked at random among %d; rounds alternate the front ends. Load average at the end: %s.\n\n",
		rounds, dur, clients, nkeys, clients, nkeys, bench.LoadAvg())
	b.WriteString("| front end | calls/s (median) | vs RESP | server CPU µs/call (median) | vs RESP | rounds calls/s |\n|---|---:|---:|---:|---:|---|\n")
	base, baseCPU := median(results[0].calls), median(results[0].cpuPerCall)
	for j, fe := range fes {
		c, cpu := median(results[j].calls), median(results[j].cpuPerCall)
		var rs []string
		for _, v := range results[j].calls {
			rs = append(rs, fmt.Sprintf("%.0f", v))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %.2fx | %.2f | %.2fx | %s |\n", fe.name, c, c/base, cpu, cpu/baseCPU, strings.Join(rs, ", "))
	}
	fmt.Print(b.String())
	if outDir != "" {
		p := filepath.Join(outDir, "gateway-"+time.Now().UTC().Format("20060102-150405")+".md")
		if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
			return err
		}
		fmt.Fprintln(os.Stderr, "wrote", p)
	}
	return nil
}

// measure runs fe with clients workers for d; it returns calls/s and the
// server's CPU µs per call.
func measure(srv *bench.Proc, fe frontEnd, clients int, keys []string, d time.Duration) (float64, float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cpu0, err := srv.CPUSeconds()
	if err != nil {
		return 0, 0, err
	}
	var n atomic.Int64
	var errMu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 42))
			for ctx.Err() == nil {
				if err := fe.call(ctx, i, keys[rng.IntN(len(keys))]); err != nil {
					if ctx.Err() == nil {
						errMu.Lock()
						firstErr = cmp.Or(firstErr, err)
						errMu.Unlock()
					}
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	cpu1, err := srv.CPUSeconds()
	if err != nil {
		return 0, 0, err
	}
	if firstErr != nil {
		return 0, 0, firstErr
	}
	calls := float64(n.Load())
	if calls == 0 {
		return 0, 0, fmt.Errorf("no call completed")
	}
	return calls / el, (cpu1 - cpu0) * 1e6 / calls, nil
}

func median(v []float64) float64 {
	s := slices.Sorted(slices.Values(v))
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
