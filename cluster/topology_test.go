package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	idA = NodeID("127.0.0.1", 7001)
	idB = NodeID("127.0.0.1", 7002)
	idC = NodeID("127.0.0.1", 7003)
	idD = NodeID("127.0.0.1", 7004)
)

// doc builds a topology document; shards are JSON objects.
func doc(epoch string, shards ...string) string {
	return fmt.Sprintf(`{"epoch":%s,"shards":[%s]}`, epoch, strings.Join(shards, ","))
}

func shard(slots, primary string, replicas ...string) string {
	return fmt.Sprintf(`{"slots":%s,"primary":%s,"replicas":[%s]}`, slots, primary, strings.Join(replicas, ","))
}

func node(id, host string, port int) string {
	return fmt.Sprintf(`{"id":%q,"host":%q,"port":%d}`, id, host, port)
}

func TestNodeID(t *testing.T) {
	cases := []struct {
		host string
		port int
		id   string
	}{
		// printf %s host:port | sha1sum
		{"127.0.0.1", 7001, "73e424d53fc3edc27f2c55eb2808f7bdd833f129"},
		{"localhost", 6379, "d4243325436dc620ca804d73473c56a961b53179"},
		{"::1", 7001, "35d0ddabe13092d7cd18802cb40117e95eb94863"}, // of "[::1]:7001"
	}
	for _, c := range cases {
		assert.Equal(t, c.id, NodeID(c.host, c.port))
		assert.NoError(t, checkNodeID(NodeID(c.host, c.port)))
	}
}

func TestParseValid(t *testing.T) {
	in := doc("3",
		shard("[[0,5460]]", node(idA, "127.0.0.1", 7001), node(idD, "127.0.0.1", 7004)),
		shard("[[5461,10922]]", node(idB, "127.0.0.1", 7002)),
		shard("[[10923,16000],[16001,16383]]", node(idC, "127.0.0.1", 7003)))
	top, err := Parse([]byte(in))
	require.NoError(t, err)
	assert.Equal(t, uint64(3), top.Epoch)
	assert.Equal(t, SlotCount, top.Covered())
	require.Len(t, top.Shards, 3)
	assert.Equal(t, Node{ID: idD, Host: "127.0.0.1", Port: 7004}, top.Shards[0].Replicas[0])
	assert.Equal(t, [][2]int{{10923, 16000}, {16001, 16383}}, top.Shards[2].Slots)

	for _, c := range []struct {
		id      string
		shard   int
		primary bool
		ok      bool
	}{
		{idA, 0, true, true},
		{idD, 0, false, true},
		{idB, 1, true, true},
		{idC, 2, true, true},
		{NodeID("127.0.0.1", 9999), 0, false, false},
	} {
		s, ok := top.ShardOf(c.id)
		assert.Equal(t, c.ok, ok, c.id)
		assert.Equal(t, c.shard, s, c.id)
		n, s, primary, ok := top.Node(c.id)
		assert.Equal(t, c.ok, ok, c.id)
		assert.Equal(t, c.shard, s, c.id)
		assert.Equal(t, c.primary, primary, c.id)
		if ok {
			assert.Equal(t, c.id, n.ID)
		}
	}

	// Optional/omitted parts: no replicas key, a shard without slots,
	// whitespace around the document.
	top, err = Parse([]byte("\n " + `{"epoch":1,"shards":[{"slots":[[0,16383]],"primary":` + node(idA, "h", 1) + `},{"slots":[],"primary":` + node(idB, "h", 2) + `}]}` + "\n"))
	require.NoError(t, err)
	assert.Equal(t, SlotCount, top.Covered())
	_, ok := top.ShardOf(idB)
	assert.True(t, ok)
}

func TestParseErrors(t *testing.T) {
	a, b, c := node(idA, "127.0.0.1", 7001), node(idB, "127.0.0.1", 7002), node(idC, "127.0.0.1", 7003)
	cases := []struct {
		name string
		in   string
		want string
	}{
		{"not json", `{`, "invalid topology JSON"},
		{"not an object", `[]`, "invalid topology JSON"},
		{"unknown top field", `{"epoch":1,"shards":[` + shard("[[0,1]]", a) + `],"x":1}`, `unknown field "x"`},
		{"unknown shard field", doc("1", `{"slots":[[0,1]],"primary":`+a+`,"weight":2}`), `unknown field "weight"`},
		{"unknown node field", doc("1", shard("[[0,1]]", `{"id":"`+idA+`","host":"h","port":1,"name":"x"}`)), `unknown field "name"`},
		{"trailing data", doc("1", shard("[[0,1]]", a)) + ` {}`, "unexpected data after the document"},
		{"trailing garbage", doc("1", shard("[[0,1]]", a)) + `}`, "unexpected data after the document"},
		{"range of one", doc("1", shard("[[0]]", a)), "shard 0: slot range 0 must be [first, last], it has 1 elements"},
		{"range of three", doc("1", shard("[[0,1],[2,3,4]]", a)), "shard 0: slot range 1 must be [first, last], it has 3 elements"},
		{"fractional slot", doc("1", shard("[[0,1.5]]", a)), "invalid topology JSON"},
		{"string port", doc("1", shard("[[0,1]]", `{"id":"`+idA+`","host":"h","port":"1"}`)), "invalid topology JSON"},
		{"epoch zero", doc("0", shard("[[0,1]]", a)), "epoch must be at least 1, got 0"},
		{"epoch missing", `{"shards":[` + shard("[[0,1]]", a) + `]}`, "epoch must be at least 1"},
		{"epoch negative", doc("-1", shard("[[0,1]]", a)), "invalid topology JSON"},
		{"epoch above 2^53-1", doc("9007199254740992", shard("[[0,1]]", a)), "epoch must be at most 9007199254740991 (2^53-1), got 9007199254740992"},
		{"epoch 2^64-1", doc("18446744073709551615", shard("[[0,1]]", a)), "epoch must be at most 9007199254740991 (2^53-1), got 18446744073709551615"},
		{"no shards", doc("1"), "no shards"},
		{"shards missing", `{"epoch":1}`, "no shards"},
		{"range reversed", doc("1", shard("[[10,5]]", a)), "shard 0: slot range 0 [10, 5] starts after it ends"},
		{"range too high", doc("1", shard("[[0,16384]]", a)), "shard 0: slot range 0 [0, 16384] is outside 0..16383"},
		{"range negative", doc("1", shard("[[-1,3]]", a)), "shard 0: slot range 0 [-1, 3] is outside 0..16383"},
		{"overlap across shards", doc("1", shard("[[0,200]]", a), shard("[[300,400]]", b), shard("[[100,150]]", c)), "slot 100 is in shard 0 and shard 2"},
		{"overlap in one shard", doc("1", shard("[[0,10],[5,20]]", a)), "slot 5 is in two ranges of shard 0"},
		{"id too short", doc("1", shard("[[0,1]]", node("abc", "h", 1))), `shard 0 primary: node id "abc" must be exactly 40 lowercase hex characters, it has 3 characters`},
		{"id empty", doc("1", shard("[[0,1]]", `{"host":"h","port":1}`)), `shard 0 primary: node id "" must be exactly 40`},
		{"id uppercase", doc("1", shard("[[0,1]]", node(strings.ToUpper(idA), "h", 1))), "character 2 is 'E'"},
		{"id not hex", doc("1", shard("[[0,1]]", a, node("g"+idB[1:], "h", 9))), "shard 0 replica 0: node id \"g" + idB[1:] + "\" must be exactly 40 lowercase hex characters, character 0 is 'g'"},
		{"id twice", doc("1", shard("[[0,1]]", a), shard("[[2,3]]", b, node(idA, "10.0.0.1", 1))), "node id " + idA + " appears twice: shard 0 primary and shard 1 replica 0"},
		{"address twice", doc("1", shard("[[0,1]]", a), shard("[[2,3]]", node(idB, "127.0.0.1", 7001))), "address 127.0.0.1:7001 is used by two nodes: shard 0 primary and shard 1 primary"},
		{"host empty", doc("1", shard("[[0,1]]", node(idA, "", 1))), "shard 0 primary (id " + idA + "): host is empty"},
		{"host with space", doc("1", shard("[[0,1]]", node(idA, "a b", 1))), `host "a b" contains a space or control character`},
		{"port zero", doc("1", shard("[[0,1]]", a), shard("[[2,3]]", node(idB, "h", 0))), "shard 1 primary (id " + idB + "): port 0 is not in 1..65535"},
		{"port too big", doc("1", shard("[[0,1]]", a, node(idB, "h", 65536))), "shard 0 replica 0 (id " + idB + "): port 65536 is not in 1..65535"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			top, err := Parse([]byte(c.in))
			require.Error(t, err)
			assert.Nil(t, top)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestEpochBound: MaxEpoch itself is a valid epoch for Parse and Init (the
// epochs above it are refused in TestParseErrors and TestInitErrors).
func TestEpochBound(t *testing.T) {
	a := node(idA, "127.0.0.1", 7001)
	top, err := Parse([]byte(doc("9007199254740991", shard("[[0,16383]]", a))))
	require.NoError(t, err)
	assert.Equal(t, uint64(MaxEpoch), top.Epoch)
	_, err = Init([]string{"h:1"}, MaxEpoch)
	require.NoError(t, err)
}

func TestValidateBuildsAndClearsOwners(t *testing.T) {
	top := &Topology{Epoch: 1, Shards: []Shard{
		{Slots: [][2]int{{0, 99}}, Primary: Node{ID: idA, Host: "h", Port: 1}},
		{Slots: [][2]int{{200, 299}}, Primary: Node{ID: idB, Host: "h", Port: 2}},
	}}
	// Not validated yet: nothing is owned (never "everything in shard 0").
	_, ok := top.Owner(0)
	assert.False(t, ok)
	assert.Equal(t, 0, top.Covered())

	require.NoError(t, top.Validate())
	assert.Equal(t, 200, top.Covered())
	s, ok := top.Owner(250)
	assert.True(t, ok)
	assert.Equal(t, 1, s)

	top.Shards[1].Slots = append(top.Shards[1].Slots, [2]int{50, 60})
	require.EqualError(t, top.Validate(), "slot 50 is in shard 0 and shard 1")
	_, ok = top.Owner(0)
	assert.False(t, ok, "a failed Validate leaves nothing owned")
	assert.Equal(t, 0, top.Covered())
	_, ok = top.ShardOf(idA)
	assert.False(t, ok)
}

func TestOwner(t *testing.T) {
	top, err := Parse([]byte(doc("1",
		shard("[[0,99],[1000,1000]]", node(idA, "h", 1)),
		shard("[[100,199],[16383,16383]]", node(idB, "h", 2)))))
	require.NoError(t, err)
	assert.Equal(t, 202, top.Covered())
	cases := []struct {
		slot  int
		shard int
		ok    bool
	}{
		{0, 0, true}, {99, 0, true}, {100, 1, true}, {199, 1, true},
		{200, -1, false}, {999, -1, false}, {1000, 0, true}, {1001, -1, false},
		{16382, -1, false}, {16383, 1, true},
		{-1, 0, false}, {SlotCount, 0, false},
	}
	for _, c := range cases {
		s, ok := top.Owner(c.slot)
		assert.Equal(t, c.ok, ok, "slot %d", c.slot)
		if c.ok {
			assert.Equal(t, c.shard, s, "slot %d", c.slot)
		}
	}
	s, ok := top.Owner(KeySlot([]byte("{user1000}.x"))) // slot 3443: unassigned
	assert.False(t, ok, "%d", s)
}

func addrs(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("127.0.0.1:%d", 7001+i)
	}
	return out
}

func TestInit(t *testing.T) {
	// Ranges printed by `redis-cli --cluster create` (Redis 7.0.15) for 3
	// and 7 masters; 1 and 2 follow from the same arithmetic.
	cases := []struct {
		n    int
		want [][2]int
	}{
		{1, [][2]int{{0, 16383}}},
		{2, [][2]int{{0, 8191}, {8192, 16383}}},
		{3, [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}},
		{7, [][2]int{{0, 2340}, {2341, 4680}, {4681, 7021}, {7022, 9361}, {9362, 11702}, {11703, 14042}, {14043, 16383}}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.n), func(t *testing.T) {
			top, err := Init(addrs(c.n), 5)
			require.NoError(t, err)
			assert.Equal(t, uint64(5), top.Epoch)
			assert.Equal(t, SlotCount, top.Covered())
			require.Len(t, top.Shards, c.n)
			for i, s := range top.Shards {
				assert.Equal(t, [][2]int{c.want[i]}, s.Slots, "shard %d", i)
				port := 7001 + i
				assert.Equal(t, Node{ID: NodeID("127.0.0.1", port), Host: "127.0.0.1", Port: port}, s.Primary)
				assert.NotNil(t, s.Replicas)
				assert.Empty(t, s.Replicas)
			}
		})
	}
}

func TestInitSplitProperties(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 16, 17, 31, 100, 127, 1000, 1023, 4095, 10000, 16383, 16384} {
		r := splitSlots(n)
		require.Len(t, r, n)
		next, lo, hi := 0, SlotCount, 0
		for i, x := range r {
			require.Equal(t, next, x[0], "n=%d shard %d starts where the previous ended", n, i)
			require.LessOrEqual(t, x[0], x[1], "n=%d shard %d", n, i)
			size := x[1] - x[0] + 1
			lo, hi = min(lo, size), max(hi, size)
			next = x[1] + 1
		}
		require.Equal(t, SlotCount, next, "n=%d covers every slot", n)
		require.LessOrEqual(t, hi-lo, 1, "n=%d sizes differ by at most one", n)
	}
}

func TestInitIPv6AndHostnames(t *testing.T) {
	top, err := Init([]string{"[::1]:7001", "node-b.internal:7001"}, 1)
	require.NoError(t, err)
	assert.Equal(t, Node{ID: "35d0ddabe13092d7cd18802cb40117e95eb94863", Host: "::1", Port: 7001}, top.Shards[0].Primary)
	assert.Equal(t, "[::1]:7001", top.Shards[0].Primary.Addr())
	assert.Equal(t, "node-b.internal", top.Shards[1].Primary.Host)
}

func TestInitErrors(t *testing.T) {
	cases := []struct {
		name  string
		addrs []string
		epoch uint64
		want  string
	}{
		{"none", nil, 1, "no node addresses"},
		{"duplicate", []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7001"}, 1, "node 127.0.0.1:7001 is listed twice (positions 1 and 3)"},
		{"duplicate spelled differently", []string{"127.0.0.1:7001", "127.0.0.1:07001"}, 1, "listed twice"},
		{"no port", []string{"127.0.0.1"}, 1, `address "127.0.0.1": want host:port`},
		{"empty", []string{""}, 1, `address "": want host:port`},
		{"empty host", []string{":7001"}, 1, `address ":7001": host is empty`},
		{"port zero", []string{"h:0"}, 1, `address "h:0": port must be a number in 1..65535`},
		{"port too big", []string{"h:65536"}, 1, "port must be a number in 1..65535"},
		{"port not a number", []string{"h:http"}, 1, "port must be a number in 1..65535"},
		{"bad host", []string{"a b:1"}, 1, "contains a space"},
		{"epoch zero", []string{"h:1"}, 0, "epoch must be at least 1"},
		{"epoch above the bound", []string{"h:1"}, MaxEpoch + 1, "epoch must be at most 9007199254740991"},
		{"too many", make([]string, SlotCount+1), 1, "at most 16384"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			top, err := Init(c.addrs, c.epoch)
			require.Error(t, err)
			assert.Nil(t, top)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

func TestMoves(t *testing.T) {
	old, err := Init(addrs(3), 1) // A [0,5460] B [5461,10922] C [10923,16383]
	require.NoError(t, err)
	// Epoch 2: A gives [5000,5460] to B and takes [16000,16383] from C; D,
	// a replica of C before, becomes a primary owning [100,199] taken from A.
	d := Node{ID: idD, Host: "127.0.0.1", Port: 7004}
	old.Shards[2].Replicas = []Node{d}
	require.NoError(t, old.Validate())
	newer := &Topology{Epoch: 2, Shards: []Shard{
		{Slots: [][2]int{{0, 99}, {200, 4999}, {16000, 16383}}, Primary: old.Shards[0].Primary},
		{Slots: [][2]int{{5000, 5460}, {5461, 10922}}, Primary: old.Shards[1].Primary},
		{Slots: [][2]int{{10923, 15999}}, Primary: old.Shards[2].Primary},
		{Slots: [][2]int{{100, 199}}, Primary: d},
	}}
	require.NoError(t, newer.Validate())
	require.Equal(t, SlotCount, newer.Covered())

	cases := []struct {
		name         string
		from, to     *Topology
		id           string
		lost, gained [][2]int
	}{
		{"A", old, newer, idA, [][2]int{{100, 199}, {5000, 5460}}, [][2]int{{16000, 16383}}},
		{"B merged ranges", old, newer, idB, nil, [][2]int{{5000, 5460}}},
		{"C", old, newer, idC, [][2]int{{16000, 16383}}, nil},
		{"replica promoted", old, newer, idD, nil, [][2]int{{100, 199}}},
		{"unknown node", old, newer, NodeID("10.0.0.1", 1), nil, nil},
		{"same topology", old, old, idA, nil, nil},
		{"from nothing", nil, newer, idA, nil, [][2]int{{0, 99}, {200, 4999}, {16000, 16383}}},
		{"to nothing", newer, nil, idB, [][2]int{{5000, 10922}}, nil},
		{"back again", newer, old, idA, [][2]int{{16000, 16383}}, [][2]int{{100, 199}, {5000, 5460}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lost, gained := c.from.Moves(c.to, c.id)
			assert.Equal(t, c.lost, lost, "lost")
			assert.Equal(t, c.gained, gained, "gained")
		})
	}
	assert.Equal(t, [][2]int{{5000, 10922}}, newer.SlotsOf(idB))
	assert.Nil(t, newer.SlotsOf(NodeID("10.0.0.1", 1)))
}

func TestRanges(t *testing.T) {
	r := Ranges{{0, 5460}, {7000, 7000}, {16383, 16383}}
	assert.Equal(t, 5463, r.Count())
	assert.Equal(t, "0-5460 7000 16383", r.String())
	for slot, want := range map[int]bool{0: true, 5460: true, 5461: false, 7000: true, 7001: false, 16383: true, -1: false} {
		assert.Equal(t, want, r.Contains(slot), "slot %d", slot)
	}
	assert.Equal(t, "", Ranges(nil).String())
	assert.Equal(t, 0, Ranges(nil).Count())
}

func TestMarshalStable(t *testing.T) {
	top := &Topology{Epoch: 7, Shards: []Shard{
		{Slots: [][2]int{{0, 8191}}, Primary: Node{ID: idA, Host: "127.0.0.1", Port: 7001},
			Replicas: []Node{{ID: idC, Host: "127.0.0.1", Port: 7003}, {ID: idD, Host: "::1", Port: 7004}}},
		{Slots: [][2]int{{8192, 10000}, {10001, 16383}}, Primary: Node{ID: idB, Host: "127.0.0.1", Port: 7002}}, // nil Replicas
		{Primary: Node{ID: NodeID("h", 1), Host: "h", Port: 1}},                                                 // no slots
	}}
	want := `{
  "epoch": 7,
  "shards": [
    {
      "slots": [[0, 8191]],
      "primary": {"id": "` + idA + `", "host": "127.0.0.1", "port": 7001},
      "replicas": [
        {"id": "` + idC + `", "host": "127.0.0.1", "port": 7003},
        {"id": "` + idD + `", "host": "::1", "port": 7004}
      ]
    },
    {
      "slots": [[8192, 10000], [10001, 16383]],
      "primary": {"id": "` + idB + `", "host": "127.0.0.1", "port": 7002},
      "replicas": []
    },
    {
      "slots": [],
      "primary": {"id": "` + NodeID("h", 1) + `", "host": "h", "port": 1},
      "replicas": []
    }
  ]
}
`
	out, err := top.Marshal()
	require.NoError(t, err)
	assert.Equal(t, want, string(out))
	again, err := top.Marshal()
	require.NoError(t, err)
	assert.Equal(t, out, again)

	// Round trip: Parse(Marshal(t)) is the same topology, and marshals to the
	// same bytes.
	back, err := Parse(out)
	require.NoError(t, err)
	assert.Equal(t, top.Epoch, back.Epoch)
	assert.Equal(t, top.Shards[0], back.Shards[0])
	assert.Equal(t, top.Shards[1].Slots, back.Shards[1].Slots)
	assert.Empty(t, back.Shards[2].Slots)
	out2, err := back.Marshal()
	require.NoError(t, err)
	assert.Equal(t, out, out2)

	// Init output survives a round trip too.
	initTop, err := Init(addrs(3), 1)
	require.NoError(t, err)
	out, err = initTop.Marshal()
	require.NoError(t, err)
	back, err = Parse(out)
	require.NoError(t, err)
	assert.Equal(t, initTop.Shards, back.Shards)
	assert.Equal(t, SlotCount, back.Covered())

	// An invalid topology is not marshalled.
	_, err = (&Topology{Epoch: 0, Shards: top.Shards}).Marshal()
	assert.EqualError(t, err, "epoch must be at least 1, got 0")
}

func TestSaveLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "topology.json")

	top, err := Load(path)
	require.NoError(t, err, "a missing file is not an error")
	assert.Nil(t, top)

	first, err := Init(addrs(3), 1)
	require.NoError(t, err)
	require.NoError(t, first.Save(path))
	loaded, err := Load(path)
	require.NoError(t, err)
	assert.Equal(t, first.Epoch, loaded.Epoch)
	assert.Equal(t, first.Shards, loaded.Shards)
	assert.Equal(t, SlotCount, loaded.Covered())
	s, ok := loaded.Owner(10923)
	assert.True(t, ok)
	assert.Equal(t, 2, s)
	onDisk, err := os.ReadFile(path)
	require.NoError(t, err)
	want, _ := first.Marshal()
	assert.Equal(t, want, onDisk)

	// Overwrite with a newer epoch.
	second, err := Init(addrs(2), 2)
	require.NoError(t, err)
	require.NoError(t, second.Save(path))
	loaded, err = Load(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), loaded.Epoch)
	assert.Len(t, loaded.Shards, 2)

	// An invalid topology is refused and the file keeps the last good one.
	bad := &Topology{Epoch: 3, Shards: []Shard{{Primary: Node{ID: "x", Host: "h", Port: 1}}}}
	assert.Error(t, bad.Save(path))
	loaded, err = Load(path)
	require.NoError(t, err)
	assert.Equal(t, uint64(2), loaded.Epoch)

	// No temporary files are left behind.
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, "topology.json", entries[0].Name())

	// A corrupt file is an error naming the file.
	require.NoError(t, os.WriteFile(path, []byte(`{"epoch":1,"shards":[]}`), 0o600))
	_, err = Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path)
	assert.Contains(t, err.Error(), "no shards")

	// A directory that does not exist.
	assert.Error(t, first.Save(filepath.Join(dir, "missing", "topology.json")))
}
