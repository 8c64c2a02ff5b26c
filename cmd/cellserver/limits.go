package main

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// fdReserve is how many file descriptors are kept back from clients for
// everything else (listener, spare descriptor, cluster peers, pprof, logs),
// as Redis's CONFIG_MIN_RESERVED_FDS. A persistent server adds Pebble's.
const fdReserve = 32

// fitMaxClients makes room for maxclients connections: it raises the soft
// open-files limit to maxclients+reserve where the hard limit allows, and
// otherwise lowers maxclients to what the limit leaves and logs it, as
// Redis does at start. It returns the maxclients in force.
func fitMaxClients(maxclients, reserve int, log *slog.Logger) (int, error) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		log.Warn("cannot read the open files limit; keeping maxclients", "maxclients", maxclients, "err", err)
		return maxclients, nil
	}
	need := uint64(maxclients) + uint64(reserve)
	if rl.Cur >= need {
		return maxclients, nil
	}
	var setErr error
	if want := min(need, rl.Max); want > rl.Cur {
		raised := rl
		raised.Cur = want
		if setErr = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &raised); setErr == nil {
			rl = raised
		}
	}
	if rl.Cur >= need {
		log.Info("raised the open files limit for maxclients", "open_files_limit", rl.Cur, "maxclients", maxclients)
		return maxclients, nil
	}
	if rl.Cur <= uint64(reserve) {
		return 0, fmt.Errorf("the open files limit (%d) leaves no descriptor for clients: cellserver keeps %d for itself; increase 'ulimit -n'", rl.Cur, reserve)
	}
	eff := int(rl.Cur) - reserve
	args := []any{"requested", maxclients, "maxclients", eff, "open_files_limit", rl.Cur, "reserved_fds", reserve}
	if setErr != nil {
		args = append(args, "err", setErr)
	}
	log.Warn("maxclients has been reduced to compensate for low ulimit; if you need higher maxclients increase 'ulimit -n'", args...)
	return eff, nil
}

// parseOutputLimit parses "hard soft seconds" (Redis's
// client-output-buffer-limit for one class; a leading "normal" is allowed),
// sizes in Redis's units (b, k=1000, kb=1024, m, mb, g, gb).
func parseOutputLimit(s string) (hard, soft int64, softFor time.Duration, err error) {
	f := strings.Fields(s)
	if len(f) == 4 && strings.EqualFold(f[0], "normal") {
		f = f[1:]
	}
	if len(f) != 3 {
		return 0, 0, 0, fmt.Errorf("want \"<hard> <soft> <seconds>\", got %q", s)
	}
	if hard, err = parseMemory(f[0]); err != nil {
		return 0, 0, 0, fmt.Errorf("hard limit: %v", err)
	}
	if soft, err = parseMemory(f[1]); err != nil {
		return 0, 0, 0, fmt.Errorf("soft limit: %v", err)
	}
	secs, err := strconv.ParseInt(f[2], 10, 32)
	if err != nil || secs < 0 {
		return 0, 0, 0, fmt.Errorf("seconds must be a non-negative integer, got %q", f[2])
	}
	if soft > 0 && secs == 0 {
		return 0, 0, 0, fmt.Errorf("a soft limit needs seconds above 0")
	}
	return hard, soft, time.Duration(secs) * time.Second, nil
}

// parseMemory parses a size the way Redis's memtoull does.
func parseMemory(s string) (int64, error) {
	l := strings.ToLower(s)
	mul := int64(1)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10}, {"g", 1e9}, {"m", 1e6}, {"k", 1e3}, {"b", 1}} {
		if strings.HasSuffix(l, u.suffix) {
			l, mul = strings.TrimSuffix(l, u.suffix), u.mul
			break
		}
	}
	n, err := strconv.ParseInt(l, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mul {
		return 0, fmt.Errorf("not a size: %q", s)
	}
	return n * mul, nil
}

// noLimit maps a flag's 0 ("no limit") to the components' negative.
func noLimit(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
