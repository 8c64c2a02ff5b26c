package commands

import (
	"math"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/cluster"
	"github.com/cellserver/cellserver/gcra"
	"github.com/cellserver/cellserver/limit"
	"github.com/cellserver/cellserver/store"
)

// harnessNow is the harness clock (newHarness), in ns and ms.
const (
	harnessNow   = int64(1_700_000_000_000_000_000)
	harnessNowMs = harnessNow / 1e6
)

func TestCheckImport(t *testing.T) {
	const maxExp = harnessNowMs + gcra.MaxTTLMillis + 60_000
	cases := []struct {
		name string
		tat  uint64
		exp  int64
		ok   bool
	}{
		{"a minute's limit", uint64(harnessNow + 60e9), harnessNowMs + 60_000, true},
		{"TAT just under expiry+2ms", uint64(harnessNow + 60e9 + 2e6 - 1), harnessNowMs + 60_000, true},
		{"TAT at expiry+2ms", uint64(harnessNow + 60e9 + 2e6), harnessNowMs + 60_000, false},
		{"TAT far past its expiry", math.MaxUint64, harnessNowMs + 60_000, false},
		{"the farthest expiry", uint64(maxExp) * 1e6, maxExp, true},
		{"one ms beyond it", uint64(maxExp) * 1e6, maxExp + 1, false},
		// Issue 15's blocking state: TAT 2^64-1, expiry 2^62 ms.
		{"issue 15", math.MaxUint64, 1 << 62, false},
		{"expired state", 5, harnessNowMs - 10, true},
		{"expiry before 1970", 0, -5, false},
		{"no expiry, past TAT", uint64(harnessNow - 1e6), store.NoExpiry, true},
		{"no expiry, TAT within the clock skew", uint64(harnessNow + 59e9), store.NoExpiry, true},
		{"no expiry, TAT in the future", uint64(harnessNow + 61e9), store.NoExpiry, false},
		{"no expiry, wrapped TAT", math.MaxUint64, store.NoExpiry, false},
		{"no expiry, 2^63", 1 << 63, store.NoExpiry, false},
	}
	for _, c := range cases {
		e := checkImport(c.tat, c.exp, harnessNow)
		if c.ok {
			assert.Empty(t, e, c.name)
		} else {
			assert.NotEmpty(t, e, c.name)
		}
	}
}

// TestCheckImportAcceptsThrottleStates: every state CL.THROTTLE writes (the
// store's rule: expiry now_ms + TTLMillis, or none) passes checkImport, so a
// slot move never loses a key's state, except the wrapped locks without
// expiry, which are refused on purpose.
func TestCheckImportAcceptsThrottleStates(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 4))
	pick := func() int64 {
		switch rng.IntN(5) {
		case 0:
			return rng.Int64()
		case 1:
			return -rng.Int64()
		case 2:
			return []int64{math.MaxInt64, math.MinInt64, 0, 1, -1, 9_223_372_036}[rng.IntN(6)]
		default:
			return rng.Int64N(1_000_000) + 1
		}
	}
	checked, wrapped := 0, 0
	for range 200_000 {
		p := gcra.Params{MaxBurst: pick(), Count: pick(), Period: pick(), Quantity: pick()}
		if rng.IntN(3) == 0 {
			p.Quantity = 1
		}
		// A few calls in a row, so stored TATs feed the next call.
		var tat uint64
		exists := false
		now := harnessNow
		for range 3 {
			r, err := gcra.Throttle(p, tat, exists, now)
			if err != nil || !r.Write {
				break
			}
			exp := int64(store.NoExpiry)
			if r.Expiry == gcra.ExpireAfter {
				exp = now/1e6 + r.TTLMillis
			}
			e := checkImport(r.NewTAT, exp, now)
			if exp == store.NoExpiry && r.NewTAT >= 1<<63 {
				require.NotEmpty(t, e, "a wrapped lock %+v must be refused", p)
				wrapped++
			} else {
				require.Empty(t, e, "params %+v tat %d exp %d", p, r.NewTAT, exp)
			}
			checked++
			tat, exists = r.NewTAT, true
			now += rng.Int64N(2e9)
		}
	}
	t.Logf("%d written states checked, %d wrapped locks refused", checked, wrapped)
	require.Greater(t, checked, 10_000)
	require.Greater(t, wrapped, 0)
}

func TestImportStateRefusesAbsurdState(t *testing.T) {
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "127.0.0.1", Port: 7001}})
	got := h.cmd("CLUSTER", "IMPORTSTATE", "victim", "18446744073709551615", "4611686018427387904")
	assert.True(t, strings.HasPrefix(got, "-"+ErrImportPrefix+"victim': expiry 4611686018427387904 ms is later than "), got)
	assert.Equal(t, ":0\r\n", h.cmd("EXISTS", "victim"))
	assert.Equal(t, "*5\r\n:0\r\n:11\r\n:10\r\n:-1\r\n:6\r\n", h.cmd("CL.THROTTLE", "victim", "10", "10", "60"), "victim is not blocked")

	// One bad state in a batch: nothing is merged, not even the good one.
	good := strconv.FormatInt(harnessNow+5e9, 10)
	goodExp := strconv.FormatInt(harnessNowMs+5000, 10)
	got = h.cmd("CLUSTER", "IMPORTSTATE", "ok", good, goodExp, "bad", "18446744073709551615", strconv.Itoa(math.MaxInt64))
	assert.Equal(t, "-"+ErrImportPrefix+"bad': TAT 18446744073709551615 of a key without expiry is in the future (now 1700000000000000000)\r\n", got)
	assert.Equal(t, ":0\r\n", h.cmd("EXISTS", "ok"))
	assert.Equal(t, ":0\r\n", h.cmd("EXISTS", "bad"))

	assert.Equal(t, ":1\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "ok", good, goodExp))
	assert.Equal(t, "$19\r\n"+good+"\r\n", h.cmd("GET", "ok"))
	assert.Equal(t, ":5000\r\n", h.cmd("PTTL", "ok"))
}

// TestImportStateCarriesEveryKind: the STATES 1 form moves encoded states
// of any kind; TYPE, GET and CL.THROTTLE then see a cl-limit key, and a
// second import of the same window adds its count (limit.Merge). GCRA TATs
// merge by adding their debts, in either form.
func TestImportStateCarriesEveryKind(t *testing.T) {
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "127.0.0.1", Port: 7001}})
	start := harnessNowMs / 60_000 * 60_000
	fw, err := limit.Encode(limit.FWState{WindowMS: 60_000, StartMS: start, Count: 3})
	require.NoError(t, err)
	exp := strconv.FormatInt(start+60_000, 10)
	assert.Equal(t, ":1\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "STATES", "1", "fw", string(fw), exp))
	assert.Equal(t, ":1\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "STATES", "1", "fw", string(fw), exp))
	assert.Equal(t, "+cl-limit\r\n", h.cmd("TYPE", "fw"))
	assert.Equal(t, "-"+ErrWrongType+"\r\n", h.cmd("GET", "fw"))
	assert.Equal(t, "-"+ErrWrongType+"\r\n", h.cmd("CL.THROTTLE", "fw", "1", "1", "1"))
	assert.Equal(t, ":"+strconv.FormatInt(start+60_000-harnessNowMs, 10)+"\r\n", h.cmd("PTTL", "fw"))

	assert.True(t, strings.HasPrefix(h.cmd("CLUSTER", "IMPORTSTATE", "STATES", "1", "bad", "\x02\x09junk", exp), "-"+ErrImportPrefix+"bad': the state does not decode"))
	assert.Equal(t, "-ERR unsupported IMPORTSTATE version '2'\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "STATES", "2", "fw", string(fw), exp))

	// Two nodes each charged 5 s of debt on g: the merge holds 10 s.
	tat := strconv.FormatInt(harnessNow+5e9, 10)
	gexp := strconv.FormatInt(harnessNowMs+5000, 10)
	assert.Equal(t, ":1\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "g", tat, gexp))
	assert.Equal(t, ":1\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "g", tat, gexp))
	assert.Equal(t, "$19\r\n"+strconv.FormatInt(harnessNow+10e9, 10)+"\r\n", h.cmd("GET", "g"))
	assert.Equal(t, "+string\r\n", h.cmd("TYPE", "g"))
}

// TestEmulatedUnspecifiedAddress: a node listening on 0.0.0.0 with no
// --cluster-announce tells each client the address it reached the node at
// (CLUSTER SLOTS, SHARDS and NODES), not 0.0.0.0, which a client elsewhere
// cannot reach; its node id is still that of its announced address.
func TestEmulatedUnspecifiedAddress(t *testing.T) {
	h := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "0.0.0.0", Port: 7001}})
	id := cluster.NodeID("0.0.0.0", 7001)
	a := &net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 5555}
	h.c = h.srv.NewClient(a, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 7001})
	assert.Equal(t, "*1\r\n*3\r\n:0\r\n:16383\r\n*4\r\n$8\r\n10.0.0.9\r\n:7001\r\n$40\r\n"+id+"\r\n*0\r\n", h.cmd("CLUSTER", "SLOTS"))
	assert.Contains(t, h.cmd("CLUSTER", "NODES"), id+" 10.0.0.9:7001@17001 myself,master - 0 0 1 connected 0-16383\n")
	assert.Contains(t, h.cmd("CLUSTER", "SHARDS"), "$2\r\nip\r\n$8\r\n10.0.0.9\r\n$8\r\nendpoint\r\n$8\r\n10.0.0.9\r\n")

	// Through the loopback: 127.0.0.1.
	h.c = h.srv.NewClient(a, &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7001})
	assert.Contains(t, h.cmd("CLUSTER", "SLOTS"), "$9\r\n127.0.0.1\r\n:7001\r\n")
	// An announced address is told as it is.
	h2 := newHarness(t, Config{Cluster: ClusterConfig{Mode: ClusterEmulated, Host: "192.0.2.1", Port: 7001}})
	h2.c = h2.srv.NewClient(a, &net.TCPAddr{IP: net.IPv4(10, 0, 0, 9), Port: 7001})
	assert.Contains(t, h2.cmd("CLUSTER", "SLOTS"), "$9\r\n192.0.2.1\r\n:7001\r\n")
}
