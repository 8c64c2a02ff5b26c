// Package peer is the traffic between cellserver nodes: how a node moves
// its slots' keys to another and takes them in (MIGRATE, CLUSTER MOVEKEYS,
// CLUSTER MIGRATESTATE), the slot states that govern who serves a key
// meanwhile (SETSLOT, SETTOPOLOGY), the connections a node keeps to its
// peers, and the orchestrator's side, `cellserver cluster apply`, which
// drives those steps on every node. Hash slots and topology documents, and
// the apply plan as pure functions of them, are package cluster's; replies
// and their wording are package commands'.
package peer

import "strings"

// oneLine keeps a peer's message on one line, whatever it says.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
