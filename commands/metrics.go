package commands

import (
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cellserver/cellserver/metrics"
)

// The server's Prometheus families (package metrics holds the registry).
// Each reads, at scrape time, the very counter INFO reads for the field
// named in its help, so /metrics and INFO never disagree; CONFIG RESETSTAT
// resets those that INFO's reset (a Prometheus counter reset).

// The commands whose decisions RESP counts, and their outcomes: indexes of
// Server.decisions and Client.decided.
const (
	decThrottle = iota // CL.THROTTLE
	decLimit           // CL.LIMIT
	decCommands
)

const (
	decAllowed = iota
	decLimited
	decOutcomes
)

// decisionNames are the limit labels of RESP's decisions: the command.
var decisionNames = [decCommands]string{decThrottle: "cl.throttle", decLimit: "cl.limit"}

// The histograms are read as they are: their layouts must match (a
// compile-time check: the array lengths must be equal).
var _ [metrics.LatencyBuckets]struct{} = [histBuckets]struct{}{}

// countDecision counts one answered decision of command cmd on the client;
// finish adds the pipeline's counts to the server's once (flushDecisions),
// so that a pipeline of N decisions costs a few atomic adds, not N.
func (c *Client) countDecision(cmd int, limited bool) {
	if limited {
		c.decided[cmd][decLimited]++
	} else {
		c.decided[cmd][decAllowed]++
	}
}

// flushDecisions adds the client's pending decision counts to the server's.
func (c *Client) flushDecisions() {
	for i := range c.decided {
		for j, n := range c.decided[i] {
			if n != 0 {
				c.srv.decisions[i][j].Add(n)
				c.decided[i][j] = 0
			}
		}
	}
}

// respFigures are RESP's decision figures for the registry: the decision
// counts, and the CL.THROTTLE and CL.LIMIT latency histograms of LATENCY
// HISTOGRAM summed, with INFO commandstats' usec as their sum.
func (s *Server) respFigures() metrics.FrontendFigures {
	var f metrics.FrontendFigures
	for i, name := range decisionNames {
		f.Decisions = append(f.Decisions, metrics.DecisionCount{Limit: name,
			Allowed: s.decisions[i][decAllowed].Load(), Limited: s.decisions[i][decLimited].Load()})
		cmd := s.table[name]
		if cmd.id < len(s.hists) {
			for k := range f.Latency {
				f.Latency[k] += s.hists[cmd.id].b[k].Load()
			}
		}
		_, _, _, usec := s.commandStat(cmd)
		f.LatencySum += time.Duration(usec) * time.Microsecond
	}
	return f
}

// Metrics returns the server's metrics registry (Config.Metrics, or the
// one New made): /metrics serves it, INFO ratelimit renders it, and the
// gateways report their decisions to it.
func (s *Server) Metrics() *metrics.Registry { return s.metrics }

// initMetrics registers the server's collector and RESP's decision figures.
func (s *Server) initMetrics() error {
	if s.metrics == nil {
		s.metrics = metrics.New()
	}
	sc := serverCollector{s}
	if err := s.metrics.Register(sc); err != nil {
		return errors.New("commands: registering the server's metrics: " + err.Error())
	}
	if err := s.metrics.AddFrontend("resp", s.respFigures); err != nil {
		s.metrics.Unregister(sc)
		return errors.New("commands: " + err.Error())
	}
	return nil
}

func metricDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	descConnections  = metricDesc("cellserver_connections", "Client connections open now (INFO connected_clients).")
	descAccepted     = metricDesc("cellserver_connections_accepted_total", "Client connections accepted (INFO total_connections_received).")
	descRejected     = metricDesc("cellserver_connections_rejected_total", "Client connections refused for maxclients (INFO rejected_connections).")
	descDisconnected = metricDesc("cellserver_client_disconnections_total", "Clients closed for a limit: query_buffer, output_buffer, idle_timeout (INFO client_*_disconnections).", "reason")
	descCommands     = metricDesc("cellserver_commands_processed_total", "Commands processed (INFO total_commands_processed).")
	descErrors       = metricDesc("cellserver_error_replies_total", "Error replies by error code, the reply's first word (INFO errorstats).", "code")
	descNetIn        = metricDesc("cellserver_net_input_bytes_total", "Bytes read from clients (INFO total_net_input_bytes).")
	descNetOut       = metricDesc("cellserver_net_output_bytes_total", "Bytes written to clients (INFO total_net_output_bytes).")
	descHits         = metricDesc("cellserver_keyspace_hits_total", "Key lookups that found the key (INFO keyspace_hits).")
	descMisses       = metricDesc("cellserver_keyspace_misses_total", "Key lookups that did not (INFO keyspace_misses).")
	descKeys         = metricDesc("cellserver_keys", "Keys held, per shard (INFO keyspace db0 keys is their sum).", "shard")
	descExpiring     = metricDesc("cellserver_keys_expiring", "Keys with a TTL, per shard (INFO keyspace db0 expires is their sum).", "shard")
	descExpired      = metricDesc("cellserver_expired_keys_total", "Keys removed because they expired, per shard (INFO expired_keys is their sum).", "shard")

	descPersistEnabled = metricDesc("cellserver_persistence_enabled", "1 when the state is persisted (INFO persistence), 0 in memory only; the other cellserver_persistence_ families exist only when 1.")
	descPending        = metricDesc("cellserver_persistence_changes_pending", "Changes waiting to be committed to disk (INFO changes_pending): the persistence lag.")
	descLastFsync      = metricDesc("cellserver_persistence_last_fsync_timestamp_seconds", "When the last fsync finished, Unix time (INFO last_fsync_time).")
	descFsyncAge       = metricDesc("cellserver_persistence_seconds_since_fsync", "Seconds since the last fsync finished (from INFO last_fsync_time).")
	descWriteErrors    = metricDesc("cellserver_persistence_write_errors_total", "Failed persistence writes (INFO write_errors).")
	descLastWriteOK    = metricDesc("cellserver_persistence_last_write_ok", "1 when the last persistence write succeeded, 0 while writes fail (INFO last_write_status).")
	descCommits        = metricDesc("cellserver_persistence_commits_total", "Commits written (INFO commits).")
	descChanges        = metricDesc("cellserver_persistence_changes_written_total", "Changes written (INFO changes_written).")
	descDiskBytes      = metricDesc("cellserver_persistence_disk_bytes", "Bytes the data dir holds (INFO disk_bytes).")
)

// serverCollector exports the Server's INFO counters.
type serverCollector struct{ s *Server }

func (serverCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descConnections, descAccepted, descRejected, descDisconnected, descCommands,
		descErrors, descNetIn, descNetOut, descHits, descMisses, descKeys, descExpiring, descExpired,
		descPersistEnabled, descPending, descLastFsync, descFsyncAge, descWriteErrors, descLastWriteOK,
		descCommits, descChanges, descDiskBytes} {
		ch <- d
	}
}

func (sc serverCollector) Collect(ch chan<- prometheus.Metric) {
	s := sc.s
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := &s.stats
	gauge(descConnections, float64(s.connectedClients()))
	counter(descAccepted, st.connections.Load())
	counter(descRejected, st.rejectedConn.Load())
	counter(descDisconnected, st.queryBufLimit.Load(), "query_buffer")
	counter(descDisconnected, st.outputBufLimit.Load(), "output_buffer")
	counter(descDisconnected, st.idleTimeouts.Load(), "idle_timeout")
	counter(descCommands, st.commands.Load())
	s.errorCounts.Range(func(k, v any) bool {
		counter(descErrors, v.(*atomic.Int64).Load(), k.(string))
		return true
	})
	counter(descNetIn, st.netIn.Load())
	counter(descNetOut, st.netOut.Load())
	counter(descHits, st.hits.Load())
	counter(descMisses, st.misses.Load())
	for i, sh := range s.st.ShardStats() {
		shard := strconv.Itoa(i)
		gauge(descKeys, float64(sh.Keys), shard)
		gauge(descExpiring, float64(sh.Expires), shard)
		counter(descExpired, sh.ExpiredKeys, shard)
	}
	ps := s.st.PersistStats()
	if !ps.Enabled {
		gauge(descPersistEnabled, 0)
		return
	}
	gauge(descPersistEnabled, 1)
	gauge(descPending, float64(ps.Pending))
	if !ps.LastFsync.IsZero() && ps.LastFsync.UnixNano() > 0 {
		gauge(descLastFsync, float64(ps.LastFsync.UnixNano())/1e9)
		gauge(descFsyncAge, max(time.Since(ps.LastFsync).Seconds(), 0))
	}
	counter(descWriteErrors, ps.WriteErrors)
	ok := 0.0
	if ps.LastWriteOK {
		ok = 1
	}
	gauge(descLastWriteOK, ok)
	counter(descCommits, ps.Commits)
	counter(descChanges, ps.Changes)
	gauge(descDiskBytes, float64(ps.DiskBytes))
}

// connectedClients is INFO connected_clients.
func (s *Server) connectedClients() int {
	s.clientsMu.Lock()
	defer s.clientsMu.Unlock()
	return len(s.clients)
}
