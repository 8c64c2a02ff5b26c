// Package header writes the HTTP rate-limit contract of a decision: the IETF
// RateLimit and RateLimit-Policy fields (draft-ietf-httpapi-ratelimit-headers-10),
// the de-facto X-RateLimit-* set, Retry-After, and the problem+json body of
// a 429 (spec/gateways.md §1). Every front end that answers HTTP or
// hands headers to a gateway (the HTTP check, Envoy's rate-limit service, the
// Go middleware) writes them here, so they agree to the byte.
//
// It is pure: values in, header fields and bytes out; time is a parameter.
package header

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cellserver/cellserver/limit"
)

// Field is one header field.
type Field struct{ Name, Value string }

// Convention says which header sets are written.
type Convention struct {
	IETF bool // RateLimit and RateLimit-Policy
	X    bool // X-RateLimit-Limit, -Remaining, -Used, -Reset, -Resource
	// XResetDelta writes X-RateLimit-Reset as seconds from now (Envoy's
	// draft-03 meaning) instead of GitHub's UTC epoch seconds.
	XResetDelta bool
}

// Default is what cellserver writes unless told otherwise: both sets, with
// GitHub's epoch X-RateLimit-Reset.
var Default = Convention{IETF: true, X: true}

// ParseConvention parses a --rate-limit-headers value: a comma-separated
// list of "ietf", "x" (epoch reset) and "x-delta" (delta reset), or "none".
func ParseConvention(s string) (Convention, error) {
	var c Convention
	if strings.TrimSpace(s) == "none" {
		return c, nil
	}
	for _, p := range strings.Split(s, ",") {
		switch strings.TrimSpace(p) {
		case "ietf":
			c.IETF = true
		case "x":
			c.X = true
		case "x-delta":
			c.X, c.XResetDelta = true, true
		default:
			return c, fmt.Errorf("unknown header set %q (want ietf, x, x-delta, or none)", p)
		}
	}
	return c, nil
}

// String is the convention as ParseConvention reads it.
func (c Convention) String() string {
	var p []string
	if c.IETF {
		p = append(p, "ietf")
	}
	if c.X {
		if c.XResetDelta {
			p = append(p, "x-delta")
		} else {
			p = append(p, "x")
		}
	}
	if len(p) == 0 {
		return "none"
	}
	return strings.Join(p, ",")
}

// Policy is one limit of a decision, as RateLimit-Policy lists it.
type Policy struct {
	Name      string        // [a-z0-9_-] preferred; quoted as an sf-string
	Quota     int64         // q
	Window    time.Duration // w, rounded up to whole seconds (at least 1)
	Algorithm string        // the cellserver-alg parameter; "" omits it
}

// Values are a decision as the headers show it.
type Values struct {
	Policies []Policy // every limit that applied, in request order
	Deciding int      // index into Policies of the limit RateLimit and X-RateLimit-* describe
	Limited  bool     // the call was refused (a 429)
	// Remaining is the deciding limit's remaining quota.
	Remaining int64
	// Reset is the deciding limit's t: when limited, its retry-after;
	// otherwise the time until quota it used comes back (0 if none used).
	Reset time.Duration
	// RetryAfter, when Limited, is the Retry-After value.
	RetryAfter time.Duration
	// ResetAfter is the time until the deciding limit's state has run out
	// (X-RateLimit-Reset).
	ResetAfter time.Duration
	Now        time.Time
}

// Seconds rounds d up to whole seconds (never below 0): the unit of every
// header field.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// Append appends v's fields under c to dst. Nothing is appended when no
// limit applied (no Policies), except Retry-After on a refusal.
func (c Convention) Append(dst []Field, v *Values) []Field {
	if v.Limited {
		dst = append(dst, Field{"Retry-After", strconv.FormatInt(max(1, Seconds(v.RetryAfter)), 10)})
	}
	if len(v.Policies) == 0 || v.Deciding < 0 || v.Deciding >= len(v.Policies) {
		return dst
	}
	d := v.Policies[v.Deciding]
	t := Seconds(v.Reset)
	if v.Limited {
		t = max(1, Seconds(v.RetryAfter)) // never later than Retry-After
	}
	if c.IETF {
		var b strings.Builder
		for i, p := range v.Policies {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(sfString(p.Name))
			b.WriteString(";q=")
			b.WriteString(strconv.FormatInt(p.Quota, 10))
			b.WriteString(";w=")
			b.WriteString(strconv.FormatInt(max(1, Seconds(p.Window)), 10))
			if p.Algorithm != "" {
				b.WriteString(`;cellserver-alg=`)
				b.WriteString(sfString(p.Algorithm))
			}
		}
		dst = append(dst, Field{"RateLimit-Policy", b.String()})
		dst = append(dst, Field{"RateLimit", sfString(d.Name) + ";r=" + strconv.FormatInt(max(0, v.Remaining), 10) +
			";t=" + strconv.FormatInt(t, 10)})
	}
	if c.X {
		until := v.ResetAfter
		if v.Limited {
			until = max(until, v.RetryAfter)
		}
		reset := Seconds(until)
		if !c.XResetDelta {
			// The instant rounded up, not now's second plus the rounded
			// duration: a client waiting until it must find the quota back.
			// Durations count from the decision's whole millisecond.
			reset = ceilUnix(v.Now.Truncate(time.Millisecond).Add(until))
		}
		dst = append(dst,
			Field{"X-RateLimit-Limit", strconv.FormatInt(d.Quota, 10)},
			Field{"X-RateLimit-Remaining", strconv.FormatInt(max(0, v.Remaining), 10)},
			Field{"X-RateLimit-Used", strconv.FormatInt(max(0, d.Quota-max(0, v.Remaining)), 10)},
			Field{"X-RateLimit-Reset", strconv.FormatInt(reset, 10)},
			Field{"X-RateLimit-Resource", d.Name},
		)
	}
	return dst
}

// ceilUnix is t in Unix seconds, rounded up.
func ceilUnix(t time.Time) int64 {
	sec := t.Unix()
	if t.Nanosecond() > 0 {
		sec++
	}
	return sec
}

// UntilMore is RateLimit's t for a limit that admitted a call: the time
// until quota it has used starts coming back, 0 when it has used none.
// remaining and resetAfter are the limit's (CL.LIMIT's reply), now the
// decision's instant. Fixed and calendar windows give everything back at
// the window's end (resetAfter). A sliding-window counter's count starts
// to decay at the end of the current window (sooner if the previous one
// still weighs: an upper bound). A sliding log's oldest entry leaves no
// later than its newest (resetAfter: an upper bound). GCRA gives one unit
// back one emission interval after the last one still owed.
func UntilMore(l limit.Limit, remaining int64, resetAfter time.Duration, now time.Time) time.Duration {
	used := limit.Capacity(l) - remaining
	if used <= 0 {
		return 0
	}
	switch x := l.(type) {
	case limit.GCRA:
		return max(0, resetAfter-time.Duration(used-1)*time.Duration(x.Interval()))
	case limit.SWC:
		if w := x.Window.Milliseconds(); w > 0 {
			return min(resetAfter, time.Duration(w-now.UnixMilli()%w)*time.Millisecond)
		}
	}
	return resetAfter
}

// sfString quotes s as a Structured Field sf-string (RFC 9651 §3.3.3):
// printable ASCII, with \ and " escaped; anything else is dropped.
func sfString(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c >= 0x20 && c < 0x7f:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// ProblemType is the problem type of a 429 (draft-10's quota-exceeded).
const ProblemType = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// ContentTypeProblem is the media type of ProblemJSON's body.
const ContentTypeProblem = "application/problem+json"

// Problem is the problem details object of a 429 (RFC 9457).
type Problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies"`
	RetryAfter       int64    `json:"retry-after,omitempty"` // seconds, as Retry-After
}

// ProblemJSON is the body of a 429 refusing v: the policies that refused it.
func ProblemJSON(v *Values, violated []string) []byte {
	if violated == nil {
		violated = []string{}
	}
	p := Problem{
		Type:             ProblemType,
		Title:            "Too Many Requests",
		Status:           429,
		ViolatedPolicies: violated,
		RetryAfter:       max(1, Seconds(v.RetryAfter)),
	}
	if len(violated) > 0 {
		p.Detail = "quota exceeded for " + strings.Join(violated, ", ") + "; retry after " +
			strconv.FormatInt(p.RetryAfter, 10) + " s"
	}
	b, _ := json.Marshal(p) // a struct of strings and ints: cannot fail
	return b
}
