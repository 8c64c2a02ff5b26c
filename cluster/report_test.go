package cluster

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNodeReportRoundTrip: what a node sends for CLUSTER GETSTATE is what
// apply reads back.
func TestNodeReportRoundTrip(t *testing.T) {
	top := planTop(t, 4, [][2]int{rng(0, 8191)}, [][2]int{rng(8192, 16383)})
	r := &NodeReport{ID: planNodes[0].ID, Epoch: 4, Topology: top,
		Migrating: map[int]string{7: planNodes[1].ID, 3: planNodes[1].ID}, Importing: map[int]string{9000: planNodes[1].ID},
		Orphans: 2, Migrated: 11, Imported: 5}
	data, err := r.Marshal()
	require.NoError(t, err)
	assert.Contains(t, string(data), `"migrating":[[3,"`+planNodes[1].ID+`"],[7,"`, "open slots sorted")
	assert.NotContains(t, string(data), "\n", "one line")
	back, err := ParseNodeReport(data)
	require.NoError(t, err)
	assert.Equal(t, r.ID, back.ID)
	assert.Equal(t, r.Epoch, back.Epoch)
	assert.True(t, sameTopology(r.Topology, back.Topology))
	assert.Equal(t, r.Migrating, back.Migrating)
	assert.Equal(t, r.Importing, back.Importing)
	assert.Equal(t, [3]int64{2, 11, 5}, [3]int64{back.Orphans, back.Migrated, back.Imported})

	empty, err := (&NodeReport{ID: planNodes[0].ID}).Marshal()
	require.NoError(t, err)
	assert.Equal(t, `{"id":"`+planNodes[0].ID+`","epoch":0,"topology":null,"migrating":[],"importing":[],"orphans":0,"migrated":0,"imported":0}`, string(empty))
}

func TestNodeReportUnsettled(t *testing.T) {
	assert.Empty(t, (&NodeReport{ID: "x"}).Unsettled())
	r := &NodeReport{ID: "x", Orphans: 3, Migrating: map[int]string{5: "y"}}
	assert.Equal(t, []string{"3 orphan keys left", "slots still open: [5->-y]"}, r.Unsettled())
}
