package commands

import "github.com/cellserver/cellserver/limit"

// Client-facing error texts, byte for byte as Redis 7 or redis-cell send them
// (without the leading '-').
const (
	ErrCellUsage       = string(limit.ErrThrottleUsage) // CL.THROTTLE's parser is package limit's
	ErrCellParsePrefix = "Cell error: Store error: Couldn't parse as integer: "
	ErrCellZeroRate    = string(limit.ErrCellZeroRate)
	ErrCellExpire      = "Cell error: Store error: Error while setting key expire"

	ErrNoAuth          = "NOAUTH Authentication required."
	ErrWrongPass       = "WRONGPASS invalid username-password pair or user is disabled."
	ErrAuthNoPassword  = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	ErrHelloNoAuth     = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	ErrNoProto         = "NOPROTO unsupported protocol version"
	ErrProtoNotInt     = "ERR Protocol version is not an integer or out of range"
	ErrSyntax          = "ERR syntax error"
	ErrWrongType       = "WRONGTYPE Operation against a key holding the wrong kind of value"
	ErrNotInteger      = "ERR value is not an integer or out of range"
	ErrInvalidCursor   = "ERR invalid cursor"
	ErrDBIndex         = "ERR DB index is out of range"
	ErrClientName      = "ERR Client names cannot contain spaces, newlines or special characters."
	ErrDebugNotAllowed = "ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server."
	ErrInternal        = "ERR internal error"
	ErrShuttingDown    = "ERR server is shutting down"
	// ErrKeyTooLong follows Redis's wording for a value over
	// proto-max-bulk-len; Redis has no key limit of its own.
	ErrKeyTooLong = "ERR key exceeds maximum allowed size (max-key-bytes)"
	ErrMisconf    = "MISCONF cellserver is unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes (stop-writes-on-persist-error option). Please check the cellserver logs for details about the error."
)

// A command the connection's user may not run, as Redis 7.2 words it
// (getAclErrorMessage, ACL_DENIED_CMD): "NOPERM User <user> has no
// permissions to run the '<command>' command", <command> being
// "parent|sub" for a subcommand. Redis 7.0 said "this user has no
// permissions to run the '<command>' command" instead; cellserver reports
// 7.2.0.
const (
	errNoPermUser = "NOPERM User "
	errNoPermRun  = " has no permissions to run the '"
	errNoPermCmd  = "' command"
)

// noPerm is the NOPERM reply for user running cmd (full name).
func noPerm(user, cmd string) string { return errNoPermUser + user + errNoPermRun + cmd + errNoPermCmd }

// ErrIntRange is Redis's getRangeLongFromObjectOrReply text for an integer
// outside a C int (SELECT), "must between" and all.
const ErrIntRange = "ERR value is out of range, value must between -2147483648 and 2147483647"
