package commands

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cellserver/cellserver/store"
)

func noPermReply(user, cmd string) string {
	return "-NOPERM User " + user + " has no permissions to run the '" + cmd + "' command\r\n"
}

// infoField returns one "name:value" field of INFO.
func (h *harness) infoField(name string) string {
	for _, line := range strings.Split(h.cmd("INFO", "stats"), "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	return ""
}

var emulated = ClusterConfig{Mode: ClusterEmulated, Host: "127.0.0.1", Port: 7001}

func TestAdminCommandsNeedAdmin(t *testing.T) {
	h := newHarness(t, Config{AdminPassword: "adm", EnableDebug: "yes", Cluster: emulated})
	state := []string{"CLUSTER", "IMPORTSTATE", "k", "1700000001000000000", "1700000001000"}
	assert.Equal(t, noPermReply("default", "cluster|importstate"), h.cmd(state...), "loopback is not enough once an admin password is set")
	assert.Equal(t, noPermReply("default", "cluster|settopology"), h.cmd("CLUSTER", "SETTOPOLOGY", "{}"))
	assert.Equal(t, noPermReply("default", "debug"), h.cmd("DEBUG", "CLOCK", "SET", "1"))
	assert.Equal(t, ":0\r\n", h.cmd("EXISTS", "k"))
	assert.Equal(t, "3", h.infoField("acl_access_denied_cmd"))
	// What cluster clients need stays open.
	for _, args := range [][]string{{"SLOTS"}, {"SHARDS"}, {"NODES"}, {"INFO"}, {"MYID"}, {"KEYSLOT", "k"},
		{"COUNTKEYSINSLOT", "0"}, {"GETKEYSINSLOT", "0", "1"}, {"HELP"}} {
		got := h.cmd(append([]string{"CLUSTER"}, args...)...)
		assert.False(t, strings.HasPrefix(got, "-"), "CLUSTER %v: %q", args, got)
	}
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " user=default ")

	assert.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd("AUTH", "admin", "nope"))
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "admin", "adm"))
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " user=admin ")
	assert.Equal(t, ":1\r\n", h.cmd(state...))
	assert.Equal(t, "-ERR CLUSTER SETTOPOLOGY needs --cluster yes (this node is emulating a one-node cluster)\r\n", h.cmd("CLUSTER", "SETTOPOLOGY", "{}"))
	assert.Equal(t, "+OK\r\n", h.cmd("DEBUG", "CLOCK", "REAL"))

	// Logging in as default drops the admin rights.
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "default", "anything"))
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " user=default ")
	assert.Equal(t, noPermReply("default", "cluster|importstate"), h.cmd(state...))
}

func TestAdminCommandsLoopbackOnlyWithoutAdminPassword(t *testing.T) {
	h := newHarness(t, Config{EnableDebug: "yes", Cluster: emulated})
	state := []string{"CLUSTER", "IMPORTSTATE", "k", "1700000001000000000", "1700000001000"}
	assert.Equal(t, ":1\r\n", h.cmd(state...), "loopback client")
	assert.Equal(t, "+OK\r\n", h.cmd("DEBUG", "CLOCK", "REAL"))

	h.remote()
	assert.Equal(t, noPermReply("default", "cluster|importstate"), h.cmd(state...))
	assert.Equal(t, noPermReply("default", "debug"), h.cmd("DEBUG", "CLOCK", "REAL"))
	assert.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd("AUTH", "admin", ""), "no admin user without a password")
	assert.Equal(t, noPermReply("default", "cluster|importstate"), h.cmd(state...))
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n", h.cmd("CL.THROTTLE", "other", "1", "1", "1"), "ordinary commands are open")
}

func TestAdminUnderRequirePass(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "pw", AdminPassword: "adm", Cluster: emulated})
	assert.Equal(t, "-"+ErrNoAuth+"\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "k", "1", "1"), "NOAUTH before NOPERM, as Redis")
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "admin", "adm"))
	assert.Equal(t, "*5\r\n:0\r\n:2\r\n:1\r\n:-1\r\n:1\r\n", h.cmd("CL.THROTTLE", "k", "1", "1", "1"), "admin runs ordinary commands")
	assert.Equal(t, ":0\r\n", h.cmd("CLUSTER", "IMPORTSTATE", "k", "1", "1"), "admin runs admin commands (an expired state merges nothing)")

	h.remote()
	reply := h.cmd("HELLO", "2", "AUTH", "admin", "adm")
	assert.True(t, strings.HasPrefix(reply, "*14\r\n"), reply)
	assert.Contains(t, h.cmd("CLIENT", "INFO"), " user=admin ")
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "pw"))
	assert.Equal(t, noPermReply("default", "cluster|importstate"), h.cmd("CLUSTER", "IMPORTSTATE", "k", "1", "1"))
}

func TestAdminPasswordMustDiffer(t *testing.T) {
	st, err := store.New(store.Config{Shards: 1})
	require.NoError(t, err)
	defer st.Close()
	_, err = New(Config{RequirePass: "same", AdminPassword: "same"}, st)
	require.EqualError(t, err, "commands: the admin password must differ from the default user's (requirepass)")
}

// TestDebugRefusedBeforeAuth: as Redis, a DEBUG that --enable-debug-command
// forbids is refused as such before NOAUTH or NOPERM apply.
func TestDebugRefusedBeforeAuth(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "pw", AdminPassword: "adm"})
	assert.Equal(t, "-"+ErrDebugNotAllowed+"\r\n", h.cmd("DEBUG", "CLOCK", "REAL"))
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "admin", "adm"))
	assert.Equal(t, "-"+ErrDebugNotAllowed+"\r\n", h.cmd("DEBUG", "CLOCK", "REAL"))
}

// TestAuthDelay: each failed AUTH or HELLO AUTH on a connection pauses
// twice as long as the one before, from 4 ms up to 1 s, whichever user it
// tried; a success in between does not reset it; INFO counts them.
func TestAuthDelay(t *testing.T) {
	h := newHarness(t, Config{RequirePass: "pw", AdminPassword: "adm"})
	fails := [][]string{
		{"AUTH", "wrong"}, {"AUTH", "default", "wrong"}, {"AUTH", "admin", "wrong"}, {"HELLO", "2", "AUTH", "admin", "x"},
		{"AUTH", "nobody", "pw"}, {"AUTH", "admin", "pw"}, {"AUTH", "wrong"}, {"AUTH", "wrong"},
		{"AUTH", "wrong"}, {"AUTH", "wrong"}, {"HELLO", "2", "AUTH", "default", "adm"}, {"AUTH", "wrong"},
	}
	for i, args := range fails {
		if i == 6 {
			require.Equal(t, "+OK\r\n", h.cmd("AUTH", "pw"))
		}
		require.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd(args...), "%q", args)
	}
	ms := time.Millisecond
	assert.Equal(t, []time.Duration{4 * ms, 8 * ms, 16 * ms, 32 * ms, 64 * ms, 128 * ms, 256 * ms, 512 * ms,
		time.Second, time.Second, time.Second, time.Second}, h.slept)
	assert.Equal(t, "12", h.infoField("acl_access_denied_auth"))
	assert.Equal(t, time.Second, authDelay(1<<20))

	// Another connection starts from 4 ms.
	h.slept = nil
	h.remote()
	assert.Equal(t, "-"+ErrWrongPass+"\r\n", h.cmd("AUTH", "wrong"))
	assert.Equal(t, []time.Duration{4 * ms}, h.slept)
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "pw"))
	assert.Equal(t, "13", h.infoField("acl_access_denied_auth"))
	// The default user cannot wipe the counts that show a password attack
	// (CONFIG RESETSTAT is an admin command, as in Redis).
	assert.Equal(t, "-NOPERM User default has no permissions to run the 'config|resetstat' command\r\n", h.cmd("CONFIG", "RESETSTAT"))
	assert.Equal(t, "13", h.infoField("acl_access_denied_auth"))
	assert.Equal(t, "+OK\r\n", h.cmd("AUTH", "admin", "adm"))
	assert.Equal(t, "+OK\r\n", h.cmd("CONFIG", "RESETSTAT"))
	assert.Equal(t, "0", h.infoField("acl_access_denied_auth"))

	// No password configured: AUTH <password> is a usage error, not a
	// failed attempt.
	h2 := newHarness(t, Config{})
	assert.Equal(t, "-"+ErrAuthNoPassword+"\r\n", h2.cmd("AUTH", "x"))
	assert.Empty(t, h2.slept)
	assert.Equal(t, "0", h2.infoField("acl_access_denied_auth"))
}

// TestAuthAndHelloAreSlow: the wire layer runs them off the event loop, so
// a pause there holds up no other connection; CL.THROTTLE stays on it.
func TestAuthAndHelloAreSlow(t *testing.T) {
	h := newHarness(t, Config{})
	argv := func(args ...string) [][]byte {
		var out [][]byte
		for _, a := range args {
			out = append(out, []byte(a))
		}
		return out
	}
	assert.True(t, h.srv.Slow([][][]byte{argv("auth", "x")}))
	assert.True(t, h.srv.Slow([][][]byte{argv("PING"), argv("HELLO", "2", "AUTH", "a", "b")}))
	assert.False(t, h.srv.Slow([][][]byte{argv("PING"), argv("CL.THROTTLE", "k", "1", "1", "1")}))
}
