package limit

import "errors"

// Error is a client-facing error: its text is exactly the reply's, without
// the leading '-', so commands can reply err.Error() verbatim. The fixed
// texts are the constants below; the texts that name an argument are the
// struct types after them. Compare with errors.Is / errors.As.
type Error string

func (e Error) Error() string { return string(e) }

// The fixed client-facing texts (spec §1, §2.1, §3, §6).
const (
	// ErrArity: fewer than 4 arguments after CL.LIMIT.
	ErrArity Error = "ERR wrong number of arguments for 'cl.limit' command"
	// ErrResetArity: CL.RESET without a key.
	ErrResetArity Error = "ERR wrong number of arguments for 'cl.reset' command"
	// ErrInspectArity: CL.INSPECT without exactly one key.
	ErrInspectArity Error = "ERR wrong number of arguments for 'cl.inspect' command"
	// ErrSyntax: too few arguments for a type, a missing option value, an
	// unknown, misplaced or repeated keyword, TZ on a non-CAL limit,
	// anything after the global options.
	ErrSyntax Error = "ERR syntax error"
	// ErrTooManyLimits: a 17th limit.
	ErrTooManyLimits Error = "ERR too many limits (max 16)"
	// ErrNotInteger: a number argument that is not a Redis integer.
	ErrNotInteger Error = "ERR value is not an integer or out of range"
	// ErrSWLLimit: an SWL limit above MaxSWLLimit.
	ErrSWLLimit Error = "ERR SWL limit above 10000, use SWC"
	// ErrRateTooHigh: a GCRA emission interval of 0 ns.
	ErrRateTooHigh Error = "ERR rate too high (emission interval below 1ns)"
	// ErrWrongType: a key holding a state of another kind than the limit's.
	ErrWrongType Error = "WRONGTYPE Operation against a key holding the wrong kind of value"

	// CL.PEEK's texts are CL.THROTTLE's, with its own usage line.
	ErrThrottleUsage Error = "Cell error: Store error: Usage: cl.throttle <key> <max_burst> <count per period> <period> [<quantity>]"
	ErrPeekUsage     Error = "Cell error: Store error: Usage: cl.peek <key> <max_burst> <count per period> <period> [<quantity>]"
	ErrCellZeroRate  Error = "Cell error: Store error: Zero rates are not supported"
	ErrCellExpire    Error = "Cell error: Store error: Error while setting key expire"
)

// UnknownTypeError: the type token of a limit is none of GCRA, FW, SWC, SWL,
// CAL. Type is the token as sent.
type UnknownTypeError struct{ Type string }

func (e *UnknownTypeError) Error() string { return "ERR unknown limit type '" + e.Type + "'" }

// RangeError: an integer argument outside its range. Name is max_burst,
// count, period, limit, window or cost.
type RangeError struct {
	Name     string
	Min, Max int64
}

func (e *RangeError) Error() string {
	return "ERR " + e.Name + " must be between " + itoa(e.Min) + " and " + itoa(e.Max)
}

// UnknownUnitError: a CAL unit other than DAY, WEEK, MONTH, YEAR, as sent.
type UnknownUnitError struct{ Unit string }

func (e *UnknownUnitError) Error() string { return "ERR unknown calendar unit '" + e.Unit + "'" }

// UnknownZoneError: a TZ value that is not a zone of the database, as sent.
type UnknownZoneError struct{ Zone string }

func (e *UnknownZoneError) Error() string { return "ERR unknown time zone '" + e.Zone + "'" }

// RepeatedKeyError: limit Limit (1-based) names the key of the earlier limit
// Earlier.
type RepeatedKeyError struct{ Limit, Earlier int }

func (e *RepeatedKeyError) Error() string {
	return "ERR limit " + itoa(int64(e.Limit)) + " repeats the key of limit " + itoa(int64(e.Earlier))
}

// CellParseError: a CL.PEEK number redis-cell cannot parse. Arg is the
// argument as sent.
type CellParseError struct{ Arg string }

func (e *CellParseError) Error() string {
	return "Cell error: Store error: Couldn't parse as integer: " + e.Arg
}

// Internal errors: never the client's fault, never replied verbatim.
var (
	// ErrCorrupt: an encoded state that does not decode.
	ErrCorrupt = errors.New("limit: corrupt state")
	// ErrNotAdmitted: AppendCharged for a charge Eval would not admit, or
	// for a cost of 0 (which writes nothing).
	ErrNotAdmitted = errors.New("limit: charge not admitted")
	// ErrKindMismatch: Merge of two states of different kinds.
	ErrKindMismatch = errors.New("limit: merge of states of different kinds")
	// ErrBadCall: Decide with no limit, more than MaxLimits, or too few
	// states or results.
	ErrBadCall = errors.New("limit: bad call")
)
