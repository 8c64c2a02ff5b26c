package commands

import "math/bits"

// Flags is a command's flags, as a bit set on its registration line:
// Redis's own flags (what COMMAND INFO lists, in Redis's words and order)
// and cellserver's behaviour flags, which COMMAND INFO does not list.
type Flags uint64

// Redis's command flags, in the order COMMAND INFO lists them (Redis's
// addReplyFlagsForCommand).
const (
	FlagWrite Flags = 1 << iota
	FlagReadOnly
	FlagDenyOOM
	FlagAdmin
	FlagPubSub
	FlagNoScript
	FlagBlocking
	FlagLoading
	FlagStale
	FlagSkipMonitor
	FlagSkipSlowlog
	FlagAsking
	FlagFast
	// FlagNoAuth: Redis's no_auth; the command runs before AUTH.
	FlagNoAuth
	FlagNoMandatoryKeys
	FlagNoAsyncLoading
	FlagNoMulti
	FlagMovableKeys
	FlagAllowBusy

	// redisFlagCount is how many of the bits above are Redis's.
	redisFlagCount = iota
)

// cellserver's behaviour flags.
const (
	// AdminOnly: only the admin user may run it (a loopback client when no
	// admin password is set); others get NOPERM. Redis's admin flag only
	// says what COMMAND INFO lists: monitoring tools log in as the default
	// user, so read-only diagnostics Redis flags admin stay open.
	AdminOnly Flags = 1 << (redisFlagCount + iota)
	// OffLoop: the command waits on other servers, may run for seconds,
	// or pauses (a failed AUTH): the wire layer runs a pipeline holding
	// one off its event loop, so the loop's other connections are not held
	// up, and a node never waits on a peer that waits on it.
	OffLoop
	// Protected: refused unless --enable-debug-command allows the client,
	// before AUTH is even checked (Redis's CMD_PROTECTED, which COMMAND
	// INFO does not list either).
	Protected
	// SelfRouted: in cluster mode the handler checks its keys' slots itself
	// (MIGRATE moves keys of slots this node may not serve), so they are
	// not refused with MOVED first.
	SelfRouted
	// TxExec: the command runs a transaction's queue (EXEC): a pause and
	// the tracking of reads judge it by what it queued, and its own
	// refusal aborts the transaction.
	TxExec
	// TxImmediate: inside MULTI the command runs at once instead of being
	// queued (MULTI, EXEC, DISCARD, WATCH, QUIT, RESET, as in Redis).
	TxImmediate
	// TxForbidden: refused inside MULTI. The cluster's admin commands hold
	// shards themselves or wait on other nodes, which may be moving keys
	// to this one: under EXEC's hold of every shard the two would wait on
	// each other.
	TxForbidden
	// TxDiscard: the command ends a transaction without running it
	// (DISCARD).
	TxDiscard
	// KeepsCaching: a CLIENT CACHING yes still applies to the command
	// after this one (CLIENT's subcommands, MULTI), as in Redis.
	KeepsCaching
	// KeysTogether: the command's keys are one request, which the shard
	// checks together during a slot move (CL.LIMIT); other commands of
	// several keys run key by key and get TRYAGAIN there.
	KeysTogether
)

// redisFlagNames are Redis's words for its flags, by bit.
var redisFlagNames = [redisFlagCount]string{
	"write", "readonly", "denyoom", "admin", "pubsub", "noscript", "blocking", "loading", "stale",
	"skip_monitor", "skip_slowlog", "asking", "fast", "no_auth", "no_mandatory_keys", "no_async_loading",
	"no_multi", "movablekeys", "allow_busy",
}

// has reports whether every flag of f is set.
func (fl Flags) has(f Flags) bool { return fl&f == f }

// redisNames lists Redis's flags of fl in COMMAND INFO's order.
func (fl Flags) redisNames() []string {
	var out []string
	for b := fl & (1<<redisFlagCount - 1); b != 0; b &= b - 1 {
		out = append(out, redisFlagNames[bits.TrailingZeros64(uint64(b))])
	}
	return out
}

// Cats is a command's ACL categories, as a bit set.
type Cats uint64

// The ACL categories, in Redis's table order (acl.c), in which COMMAND
// INFO lists them.
const (
	CatKeyspace Cats = 1 << iota
	CatRead
	CatWrite
	CatSet
	CatSortedSet
	CatList
	CatHash
	CatString
	CatBitmap
	CatHyperLogLog
	CatGeo
	CatStream
	CatPubSub
	CatAdmin
	CatFast
	CatSlow
	CatBlocking
	CatDangerous
	CatConnection
	CatTransaction
	CatScripting

	catCount = iota
)

// catNames are the categories' names, by bit.
var catNames = [catCount]string{
	"@keyspace", "@read", "@write", "@set", "@sortedset", "@list", "@hash", "@string",
	"@bitmap", "@hyperloglog", "@geo", "@stream", "@pubsub", "@admin", "@fast", "@slow", "@blocking",
	"@dangerous", "@connection", "@transaction", "@scripting",
}

// names lists the categories of cs in Redis's order.
func (cs Cats) names() []string {
	var out []string
	for b := cs; b != 0; b &= b - 1 {
		out = append(out, catNames[bits.TrailingZeros64(uint64(b))])
	}
	return out
}

// catByName finds a category by its name with the "@", or 0.
func catByName(name string) Cats {
	for i, n := range catNames {
		if n == name {
			return 1 << i
		}
	}
	return 0
}
