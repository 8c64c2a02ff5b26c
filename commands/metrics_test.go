package commands

import (
	"strconv"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/metrics"
	"github.com/cellserver/cellserver/store"
)

// gathered returns the server registry's metric of family name with
// exactly labels (nil if none).
func (h *harness) gathered(name string, labels map[string]string) *dto.Metric {
	h.t.Helper()
	mfs, err := h.srv.Metrics().Gatherer().Gather()
	require.NoError(h.t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

// value is a gathered counter's or gauge's value as INFO writes it.
func (h *harness) value(name string, labels map[string]string) string {
	h.t.Helper()
	m := h.gathered(name, labels)
	require.NotNil(h.t, m, "%s%v not gathered", name, labels)
	v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
	return strconv.FormatInt(int64(v), 10)
}

// info returns field of INFO section.
func (h *harness) info(section, field string) string {
	h.t.Helper()
	for _, line := range strings.Split(h.cmd("INFO", section), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v
		}
	}
	h.t.Fatalf("INFO %s has no %s", section, field)
	return ""
}

func respDecision(limit, outcome string) map[string]string {
	return map[string]string{"frontend": "resp", "domain": "", "limit": limit, "outcome": outcome}
}

// TestRESPDecisionsCounted: CL.THROTTLE's and CL.LIMIT's answered
// decisions count by outcome, in pipelines too; CL.PEEK decides nothing,
// CL.LIMIT's PEEK does; a refused call is no decision. INFO ratelimit
// shows the same counts as a scrape.
func TestRESPDecisionsCounted(t *testing.T) {
	h := newHarness(t, Config{})
	// A burst of 2: 3 allowed, then limited.
	for i := 0; i < 5; i++ {
		h.cmd("CL.THROTTLE", "t", "2", "1", "60")
	}
	h.cmd("CL.PEEK", "t", "2", "1", "60")
	h.cmd("MULTI")
	h.cmd("CL.THROTTLE", "m", "2", "1", "60")
	require.Equal(t, "*1\r\n*5\r\n:0\r\n:3\r\n:2\r\n:-1\r\n:60\r\n", h.cmd("EXEC"), "a transaction's decision counts too")
	h.cmd("CL.THROTTLE", "t", "bad", "1", "60")
	h.do([]string{"CL.LIMIT", "l", "FW", "2", "60"}, []string{"CL.LIMIT", "l", "FW", "2", "60"},
		[]string{"CL.LIMIT", "l", "FW", "2", "60"}, []string{"CL.LIMIT", "l", "FW", "2", "60", "PEEK"})

	for _, c := range []struct {
		limit, outcome, want string
	}{
		{"cl.throttle", metrics.Allowed, "4"},
		{"cl.throttle", metrics.Limited, "2"},
		{"cl.limit", metrics.Allowed, "2"},
		{"cl.limit", metrics.Limited, "2"},
	} {
		assert.Equal(t, c.want, h.value("cellserver_ratelimit_decisions_total", respDecision(c.limit, c.outcome)), "%s %s", c.limit, c.outcome)
		line := `cellserver_ratelimit_decisions_total{domain="",frontend="resp",limit="` + c.limit + `",outcome="` + c.outcome + `"}`
		assert.Equal(t, c.want, h.info("ratelimit", line), "INFO ratelimit %s", line)
	}
	// The latency histogram is LATENCY HISTOGRAM's: every CL.THROTTLE and
	// CL.LIMIT that ran (the failed parse did not reach the store).
	hist := h.gathered("cellserver_decision_duration_seconds", map[string]string{"frontend": "resp"}).GetHistogram()
	assert.Equal(t, uint64(10), hist.GetSampleCount())
	assert.Equal(t, "10", h.info("ratelimit", `cellserver_decision_duration_seconds_count{frontend="resp"}`))
}

// TestInfoAndMetricsAgree: after traffic, each INFO field and the metric
// read from its counter show the same value.
func TestInfoAndMetricsAgree(t *testing.T) {
	h := newHarness(t, Config{})
	h.srv.NewClient(nil, nil)
	h.srv.RejectConnection()
	h.srv.CountIdleTimeout()
	for i := 0; i < 20; i++ {
		h.cmd("CL.THROTTLE", "k"+strconv.Itoa(i), "1", "1", "60")
	}
	h.cmd("CL.LIMIT", "x", "FW", "1", "1")
	h.srv.clock.Set(h.srv.clock.Now() + 2e9)
	h.cmd("GET", "x") // expires x
	h.cmd("NOSUCHCOMMAND")
	h.cmd("GET")

	// Read the metric first: INFO counts itself once it has run.
	commands := h.value("cellserver_commands_processed_total", nil)
	assert.Equal(t, commands, h.info("stats", "total_commands_processed"))
	for _, c := range []struct{ metric, section, field string }{
		{"cellserver_connections_accepted_total", "stats", "total_connections_received"},
		{"cellserver_connections_rejected_total", "stats", "rejected_connections"},
		{"cellserver_connections", "clients", "connected_clients"},
		{"cellserver_keyspace_hits_total", "stats", "keyspace_hits"},
		{"cellserver_keyspace_misses_total", "stats", "keyspace_misses"},
	} {
		assert.Equal(t, h.info(c.section, c.field), h.value(c.metric, nil), "%s vs INFO %s", c.metric, c.field)
	}
	assert.Equal(t, "1", h.value("cellserver_client_disconnections_total", map[string]string{"reason": "idle_timeout"}))
	assert.Equal(t, "count=2", h.info("errorstats", "errorstat_ERR"))
	assert.Equal(t, "2", h.value("cellserver_error_replies_total", map[string]string{"code": "ERR"}))

	// Per shard figures sum to INFO's totals.
	var keys, expired int64
	for i := 0; i < h.srv.st.NumShards(); i++ {
		k, _ := strconv.ParseInt(h.value("cellserver_keys", map[string]string{"shard": strconv.Itoa(i)}), 10, 64)
		e, _ := strconv.ParseInt(h.value("cellserver_expired_keys_total", map[string]string{"shard": strconv.Itoa(i)}), 10, 64)
		keys, expired = keys+k, expired+e
	}
	assert.True(t, strings.HasPrefix(h.info("keyspace", "db0"), "keys="+strconv.FormatInt(keys, 10)+","), h.info("keyspace", "db0"))
	assert.Equal(t, int64(20), keys)
	assert.Equal(t, strconv.FormatInt(expired, 10), h.info("stats", "expired_keys"))
	assert.Equal(t, int64(1), expired)
	assert.Equal(t, "0", h.value("cellserver_persistence_enabled", nil))
	assert.Nil(t, h.gathered("cellserver_persistence_changes_pending", nil), "no persistence, no persistence figures")
}

// TestPersistenceMetrics: with a data dir, the persistence figures are
// INFO persistence's.
func TestPersistenceMetrics(t *testing.T) {
	st, err := store.New(store.Config{Shards: 2, DataDir: t.TempDir()})
	require.NoError(t, err)
	srv, err := New(Config{}, st)
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close(); st.Close() })
	h := &harness{t: t, srv: srv, c: srv.NewClient(nil, nil)}
	h.cmd("CL.THROTTLE", "k", "1", "1", "60")
	assert.Equal(t, "1", h.value("cellserver_persistence_enabled", nil))
	assert.Equal(t, "1", h.value("cellserver_persistence_last_write_ok", nil))
	assert.Equal(t, "ok", h.info("persistence", "last_write_status"))
	assert.Equal(t, h.info("persistence", "write_errors"), h.value("cellserver_persistence_write_errors_total", nil))
	require.NotNil(t, h.gathered("cellserver_persistence_changes_pending", nil))
	require.NotNil(t, h.gathered("cellserver_persistence_commits_total", nil))
}

// TestOneServerPerRegistry: the registry is a server's own; a second
// server on it is refused rather than exporting two sets of figures.
func TestOneServerPerRegistry(t *testing.T) {
	reg := metrics.New()
	h := newHarness(t, Config{Metrics: reg})
	assert.Same(t, reg, h.srv.Metrics())
	st, err := store.New(store.Config{Shards: 1})
	require.NoError(t, err)
	defer st.Close()
	_, err = New(Config{Metrics: reg}, st)
	require.ErrorContains(t, err, "commands: registering the server's metrics")
}

// TestHistogramLayoutIsMetrics: commands' latency buckets are the ones
// package metrics reads them as.
func TestHistogramLayoutIsMetrics(t *testing.T) {
	for _, ns := range []int64{0, 1, 1024, 1025, 2048, 2049, 1 << 20, 1024 << 19, 1024<<19 + 1, 1 << 40} {
		var h cmdHist
		h.add(ns)
		assert.Equal(t, int64(1), h.b[metrics.BucketOf(ns)].Load(), "%d ns", ns)
	}
}

// TestInfoRatelimitInAll: INFO all and everything carry cellserver's own
// section (as Redis's carry its modules'); plain INFO does not.
func TestInfoRatelimitInAll(t *testing.T) {
	h := newHarness(t, Config{})
	h.cmd("CL.THROTTLE", "k", "1", "1", "60")
	assert.NotContains(t, h.cmd("INFO"), "# Ratelimit")
	assert.Contains(t, h.cmd("INFO", "all"), "# Ratelimit")
	assert.Contains(t, h.cmd("INFO", "everything"), "# Ratelimit")
	assert.Contains(t, h.cmd("INFO", "ratelimit"), "# Ratelimit\r\ncellserver_decision_duration_seconds_count{frontend=\"resp\"}:1\r\n")
}
