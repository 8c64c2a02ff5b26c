package store

// ShardStats returns each shard's Stats, in shard order (index i is shard
// i), from the same counters Stats sums: their totals are what Stats
// reports, so a per-shard figure (metrics) and INFO's total never disagree
// beyond the counters moving between two reads. Cheap, without stopping
// the shards.
func (s *Store) ShardStats() []Stats {
	out := make([]Stats, len(s.shards))
	for i, sh := range s.shards {
		out[i] = Stats{
			Keys:        sh.nkeys.Load(),
			Expires:     sh.nexpires.Load(),
			ExpiredKeys: sh.expired.Load(),
			TableBytes:  sh.bytes.Load(),
		}
	}
	return out
}
