package middleware

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cellserver/cellserver/gateway/header"
	"github.com/cellserver/cellserver/limit"
)

// errBadReply: cellserver's reply to CL.LIMIT is not the shape of its spec
// (a server that is not cellserver, or a proxy in between).
var errBadReply = errors.New("middleware: CL.LIMIT reply of an unexpected shape")

// buildArgs returns CL.LIMIT's arguments for limits (spec cl-limit.md §2),
// every duration in ms (the MS option), with a nil at each limit's key
// position; keyAt lists those positions.
func buildArgs(limits []Limit) (args []any, keyAt []int) {
	args = append(args, "CL.LIMIT")
	for i, l := range limits {
		if i > 0 {
			args = append(args, "AND")
		}
		keyAt = append(keyAt, len(args))
		args = append(args, nil)
		switch x := l.Limit.(type) {
		case limit.GCRA:
			args = append(args, "GCRA", x.MaxBurst, x.Count, ms(x.Period))
		case limit.FW:
			args = append(args, "FW", x.Limit, ms(x.Window))
		case limit.SWC:
			args = append(args, "SWC", x.Limit, ms(x.Window))
		case limit.SWL:
			args = append(args, "SWL", x.Limit, ms(x.Window))
		case limit.CAL:
			args = append(args, "CAL", x.Limit, x.Unit.String())
			if z := x.Zone.Name(); z != "UTC" {
				args = append(args, "TZ", z)
			}
		}
		if c := l.cost(); c != 1 {
			args = append(args, "COST", c)
		}
	}
	return append(args, "MS"), keyAt
}

func ms(d time.Duration) int64 { return int64(d / time.Millisecond) }

// parseReply reads CL.LIMIT's reply (spec §5): [limited, limit, remaining,
// retry_after, reset_after, index, [R5...]]; it returns the deciding
// limit's 0-based index and every limit's R5.
func parseReply(reply any, n int) (int, []limit.R5, error) {
	a, ok := reply.([]any)
	if !ok || len(a) < 7 {
		return 0, nil, errBadReply
	}
	idx, ok := a[5].(int64)
	if !ok || idx < 1 || idx > int64(n) {
		return 0, nil, errBadReply
	}
	list, ok := a[6].([]any)
	if !ok || len(list) != n {
		return 0, nil, errBadReply
	}
	r5s := make([]limit.R5, n)
	for i, e := range list {
		f, ok := e.([]any)
		if !ok || len(f) < 5 {
			return 0, nil, errBadReply
		}
		var v [5]int64
		for j := range v {
			if v[j], ok = f[j].(int64); !ok {
				return 0, nil, errBadReply
			}
		}
		r5s[i] = limit.R5{Limited: v[0] == 1, Limit: v[1], Remaining: v[2], RetryAfter: v[3], ResetAfter: v[4]}
	}
	return int(idx - 1), r5s, nil
}

// values maps one decision's R5s (in ms) to the header values, as the
// gateway's front ends do (gateway.Decision.Values): every limit a policy,
// the deciding one described.
func values(limits []Limit, r5s []limit.R5, deciding int, now time.Time) *decision {
	d := &decision{Values: header.Values{Deciding: deciding, Now: now}}
	for i, l := range limits {
		r := r5s[i]
		d.Policies = append(d.Policies, header.Policy{
			Name: l.Name, Quota: r.Limit, Window: l.Window(), Algorithm: l.Limit.Kind().String(),
		})
		if r.Limited {
			d.Violated = append(d.Violated, l.Name)
		}
	}
	r := r5s[deciding]
	l := limits[deciding]
	d.Limited = r.Limited
	d.Remaining = max(0, r.Remaining)
	d.ResetAfter = time.Duration(max(0, r.ResetAfter)) * time.Millisecond
	if r.Limited {
		d.RetryAfter = time.Duration(r.RetryAfter) * time.Millisecond
		if r.RetryAfter < 0 { // the cost can never fit: a window is an honest wait
			d.RetryAfter = l.Window()
		}
		d.Reset = d.RetryAfter
	} else {
		d.Reset = header.UntilMore(l.Limit, r.Remaining, d.ResetAfter, now)
	}
	return d
}

// problem is an RFC 9457 problem+json body for the middleware's own
// refusals (fail closed, no identity); the 429 of a limit uses
// header.ProblemJSON.
func problem(status int, detail string, retryAfter int64) []byte {
	b, err := json.Marshal(struct {
		Type       string `json:"type"`
		Title      string `json:"title"`
		Status     int    `json:"status"`
		Detail     string `json:"detail"`
		RetryAfter int64  `json:"retry-after,omitempty"`
	}{"about:blank", http.StatusText(status), status, detail, retryAfter})
	if err != nil { // strings and ints: cannot fail
		panic(fmt.Sprintf("middleware: problem body: %v", err))
	}
	return b
}

// hashID replaces a long identity by its SHA-256, so that keys stay short
// whatever the client sends.
func hashID(id string) string {
	h := sha256.Sum256([]byte(id))
	return hashPrefix + hex.EncodeToString(h[:])
}

// hashPrefix starts a hashed identity; keys hashes a raw identity that
// starts with it too.
const hashPrefix = "sha256:"
