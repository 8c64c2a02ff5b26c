package commands

import "strings"

// What COMMAND INFO reports for the commands cellserver shares with Redis:
// Redis 7.2's flags and ACL categories, as its src/commands/*.json give
// them (taken from a real redis-server's COMMAND; CLIENT NO-TOUCH and
// SETINFO from 7.2's files). Tools and ACL-aware clients read these, so they
// are Redis's words, apart from the flags a Command carries for cellserver's
// own behaviour (its "admin" flag restricts a command to the admin user,
// which Redis's does not).
type redisMeta struct{ flags, acl string }

var redisMetas = map[string]redisMeta{
	"asking":                  {"fast", "@fast @connection"},
	"auth":                    {"noscript loading stale fast no_auth allow_busy", "@fast @connection"},
	"client":                  {"", "@slow"},
	"client|caching":          {"noscript loading stale", "@slow @connection"},
	"client|getname":          {"noscript loading stale", "@slow @connection"},
	"client|getredir":         {"noscript loading stale", "@slow @connection"},
	"client|help":             {"loading stale", "@slow @connection"},
	"client|id":               {"noscript loading stale", "@slow @connection"},
	"client|info":             {"noscript loading stale", "@slow @connection"},
	"client|kill":             {"admin noscript loading stale", "@admin @slow @dangerous @connection"},
	"client|list":             {"admin noscript loading stale", "@admin @slow @dangerous @connection"},
	"client|no-evict":         {"admin noscript loading stale", "@admin @slow @dangerous @connection"},
	"client|pause":            {"admin noscript loading stale", "@admin @slow @dangerous @connection"},
	"client|reply":            {"noscript loading stale", "@slow @connection"},
	"client|setname":          {"noscript loading stale", "@slow @connection"},
	"client|tracking":         {"noscript loading stale", "@slow @connection"},
	"client|trackinginfo":     {"noscript loading stale", "@slow @connection"},
	"client|unpause":          {"admin noscript loading stale", "@admin @slow @dangerous @connection"},
	"cluster":                 {"", "@slow"},
	"cluster|countkeysinslot": {"stale", "@slow"},
	"cluster|getkeysinslot":   {"stale", "@slow"},
	"cluster|help":            {"loading stale", "@slow"},
	"cluster|info":            {"stale", "@slow"},
	"cluster|keyslot":         {"stale", "@slow"},
	"cluster|myid":            {"stale", "@slow"},
	"cluster|nodes":           {"stale", "@slow"},
	"cluster|setslot":         {"admin stale no_async_loading", "@admin @slow @dangerous"},
	"cluster|shards":          {"stale", "@slow"},
	"cluster|slots":           {"stale", "@slow"},
	"command":                 {"loading stale", "@slow @connection"},
	"command|count":           {"loading stale", "@slow @connection"},
	"command|docs":            {"loading stale", "@slow @connection"},
	"command|getkeys":         {"loading stale", "@slow @connection"},
	"command|help":            {"loading stale", "@slow @connection"},
	"command|info":            {"loading stale", "@slow @connection"},
	"command|list":            {"loading stale", "@slow @connection"},
	"config":                  {"", "@slow"},
	"config|get":              {"admin noscript loading stale", "@admin @slow @dangerous"},
	"config|help":             {"loading stale", "@slow"},
	"config|resetstat":        {"admin noscript loading stale", "@admin @slow @dangerous"},
	"config|set":              {"admin noscript loading stale", "@admin @slow @dangerous"},
	"dbsize":                  {"readonly fast", "@keyspace @read @fast"},
	"debug":                   {"admin noscript loading stale", "@admin @slow @dangerous"},
	"del":                     {"write", "@keyspace @write @slow"},
	"discard":                 {"noscript loading stale fast allow_busy", "@fast @transaction"},
	"echo":                    {"loading stale fast", "@fast @connection"},
	"exec":                    {"noscript loading stale skip_slowlog", "@slow @transaction"},
	"exists":                  {"readonly fast", "@keyspace @read @fast"},
	"flushall":                {"write", "@keyspace @write @slow @dangerous"},
	"flushdb":                 {"write", "@keyspace @write @slow @dangerous"},
	"get":                     {"readonly fast", "@read @string @fast"},
	"hello":                   {"noscript loading stale fast no_auth allow_busy", "@fast @connection"},
	"info":                    {"loading stale", "@slow @dangerous"},
	"keys":                    {"readonly", "@keyspace @read @slow @dangerous"},
	"lastsave":                {"loading stale fast", "@admin @fast @dangerous"},
	"latency":                 {"", "@slow"},
	"latency|doctor":          {"admin noscript loading stale", "@admin @slow @dangerous"},
	"latency|graph":           {"admin noscript loading stale", "@admin @slow @dangerous"},
	"latency|help":            {"loading stale", "@slow"},
	"latency|histogram":       {"admin noscript loading stale", "@admin @slow @dangerous"},
	"latency|history":         {"admin noscript loading stale", "@admin @slow @dangerous"},
	"latency|latest":          {"admin noscript loading stale", "@admin @slow @dangerous"},
	"latency|reset":           {"admin noscript loading stale", "@admin @slow @dangerous"},
	"memory":                  {"", "@slow"},
	"memory|doctor":           {"", "@slow"},
	"memory|help":             {"loading stale", "@slow"},
	"memory|malloc-stats":     {"", "@slow"},
	"memory|purge":            {"", "@slow"},
	"memory|stats":            {"", "@slow"},
	"memory|usage":            {"readonly", "@read @slow"},
	"migrate":                 {"write movablekeys", "@keyspace @write @slow @dangerous"},
	"multi":                   {"noscript loading stale fast allow_busy", "@fast @transaction"},
	"object":                  {"", "@slow"},
	"object|encoding":         {"readonly", "@keyspace @read @slow"},
	"object|freq":             {"readonly", "@keyspace @read @slow"},
	"object|help":             {"loading stale", "@keyspace @slow"},
	"object|idletime":         {"readonly", "@keyspace @read @slow"},
	"object|refcount":         {"readonly", "@keyspace @read @slow"},
	"ping":                    {"fast", "@fast @connection"},
	"pttl":                    {"readonly fast", "@keyspace @read @fast"},
	"quit":                    {"noscript loading stale fast no_auth allow_busy", "@fast @connection"},
	"readonly":                {"loading stale fast", "@fast @connection"},
	"readwrite":               {"loading stale fast", "@fast @connection"},
	"reset":                   {"noscript loading stale fast no_auth allow_busy", "@fast @connection"},
	"role":                    {"noscript loading stale fast", "@admin @fast @dangerous"},
	"scan":                    {"readonly", "@keyspace @read @slow"},
	"select":                  {"loading stale fast", "@fast @connection"},
	"slowlog":                 {"", "@slow"},
	"slowlog|get":             {"admin loading stale", "@admin @slow @dangerous"},
	"slowlog|help":            {"loading stale", "@slow"},
	"slowlog|len":             {"admin loading stale", "@admin @slow @dangerous"},
	"slowlog|reset":           {"admin loading stale", "@admin @slow @dangerous"},
	"strlen":                  {"readonly fast", "@read @string @fast"},
	"subscribe":               {"pubsub noscript loading stale", "@pubsub @slow"},
	"time":                    {"loading stale fast", "@fast"},
	"ttl":                     {"readonly fast", "@keyspace @read @fast"},
	"type":                    {"readonly fast", "@keyspace @read @fast"},
	"unlink":                  {"write fast", "@keyspace @write @fast"},
	"unsubscribe":             {"pubsub noscript loading stale", "@pubsub @slow"},
	"unwatch":                 {"noscript loading stale fast allow_busy", "@fast @transaction"},
	"wait":                    {"noscript", "@slow @connection"},
	"watch":                   {"noscript loading stale fast allow_busy", "@fast @transaction"},
	"client|no-touch":         {"noscript loading stale", "@slow @connection"},
	"client|setinfo":          {"noscript loading stale", "@slow @connection"},
}

// aclOrder is Redis's ACL category table (acl.c): COMMAND INFO lists a
// command's categories in this order.
var aclOrder = []string{"@keyspace", "@read", "@write", "@set", "@sortedset", "@list", "@hash", "@string",
	"@bitmap", "@hyperloglog", "@geo", "@stream", "@pubsub", "@admin", "@fast", "@slow", "@blocking",
	"@dangerous", "@connection", "@transaction", "@scripting"}

// applyRedisMeta gives every command Redis also has Redis's COMMAND INFO
// flags and categories; the others keep the ones derived from their flags.
func (t Table) applyRedisMeta() {
	for _, c := range t {
		for _, x := range append([]*Command{c}, c.Subcommands...) {
			m, ok := redisMetas[x.Name]
			if !ok {
				x.acl = orderACL(x.aclCategories())
				continue
			}
			x.infoFlags = strings.Fields(m.flags)
			x.acl = strings.Fields(m.acl)
		}
	}
}

// orderACL sorts categories into Redis's table order, dropping repeats.
func orderACL(cats []string) []string {
	var out []string
	for _, o := range aclOrder {
		for _, c := range cats {
			if c == o {
				out = append(out, o)
				break
			}
		}
	}
	return out
}
