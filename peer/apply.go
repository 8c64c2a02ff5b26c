package peer

// `cellserver cluster apply`'s steps: the orchestrator's side of node
// traffic. It asks every node (CLUSTER GETSTATE), plans with
// cluster.PlanApply, and carries the plan out: join, open, move, flip,
// orphans, verify. What it tells as it goes, and what it did, the caller
// prints.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cellserver/cellserver/cluster"
)

// Login is how an orchestrator reaches a node: the login and the
// per-command timeout.
type Login struct {
	User, Password string
	Timeout        time.Duration
}

// NewLogin logs in as admin if adminPassword is set (admin may also do
// what the default user may), else as the default user with password.
func NewLogin(adminPassword, password string, timeout time.Duration) Login {
	if adminPassword != "" {
		return Login{User: "admin", Password: adminPassword, Timeout: timeout}
	}
	return Login{Password: password, Timeout: timeout}
}

// moveTimeout is the reply timeout of MOVEKEYS, which runs until every key
// of the slots has moved: minutes for millions of keys.
func (l Login) moveTimeout() time.Duration { return max(10*l.Timeout, 5*time.Minute) }

// do sends one command on a fresh connection and waits at most readTimeout
// for the reply (l.Timeout if 0).
func (l Login) do(addr string, readTimeout time.Duration, args ...any) (any, error) {
	if readTimeout == 0 {
		readTimeout = l.Timeout
	}
	c := redis.NewClient(&redis.Options{
		Addr:            addr,
		Username:        l.User,
		Password:        l.Password,
		Protocol:        2,
		DialTimeout:     l.Timeout,
		ReadTimeout:     readTimeout,
		WriteTimeout:    l.Timeout,
		MaxRetries:      -1, // go-redis: 0 means the default (3 retries); -1 means none
		DialerRetries:   1,  // one dial attempt (0 would mean the default, 5)
		PoolSize:        1,
		DisableIdentity: true, // no CLIENT SETINFO
	})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*l.Timeout+readTimeout)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// ok sends a command that must reply +OK.
func (l Login) ok(addr string, args ...any) error {
	reply, err := l.do(addr, 0, args...)
	if err != nil {
		return err
	}
	if s, ok := reply.(string); !ok || s != "OK" {
		return fmt.Errorf("unexpected reply %v", reply)
	}
	return nil
}

// GetState asks the node at addr for CLUSTER GETSTATE.
func (l Login) GetState(addr string) (*cluster.NodeReport, error) {
	reply, err := l.do(addr, 0, "CLUSTER", "GETSTATE")
	if err != nil {
		return nil, err
	}
	s, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("unexpected reply %v to CLUSTER GETSTATE", reply)
	}
	return cluster.ParseNodeReport([]byte(s))
}

// moveKeys sends CLUSTER MOVEKEYS dst ms [ORPHANS] and returns the keys moved.
func (l Login) moveKeys(addr, dstID string, orphans bool) (int64, error) {
	args := []any{"CLUSTER", "MOVEKEYS", dstID, strconv.FormatInt(l.Timeout.Milliseconds(), 10)}
	if orphans {
		args = append(args, "ORPHANS")
	}
	reply, err := l.do(addr, l.moveTimeout(), args...)
	if err != nil {
		return 0, err
	}
	n, ok := reply.(int64)
	if !ok || n < 0 {
		return 0, fmt.Errorf("unexpected reply %v to CLUSTER MOVEKEYS", reply)
	}
	return n, nil
}

// Reason is an error as a report line states it: a node's refusal as the
// node said it, anything else (dial, timeout) as unreachable.
func Reason(err error) string {
	var rerr redis.Error
	if errors.As(err, &rerr) {
		return oneLine(err.Error())
	}
	if strings.HasPrefix(err.Error(), "invalid GETSTATE reply") || strings.HasPrefix(err.Error(), "unexpected reply") {
		return oneLine(err.Error())
	}
	return "unreachable: " + oneLine(err.Error())
}

// maxMoveRounds bounds the MOVEKEYS calls per move: each call moves every
// key it finds, so a second one normally replies 0.
const maxMoveRounds = 100

// NodeLine is what apply tells of one node as it goes: Problem is "" when
// the node did what it was asked, else what went wrong ("CLUSTER MOVEKEYS
// to 127.0.0.1:7002: ERR ...").
type NodeLine struct {
	Node    cluster.Node
	Problem string
}

// Applied is what a successful apply did: the keys each move carried, in
// plan order, then the orphan keys moved to their owners.
type Applied struct {
	Moves   []MovedKeys
	Orphans []MovedKeys
}

// MovedKeys is how many keys went from Src to Dst; Slots is how many slots
// the move gave Dst (0 for orphans).
type MovedKeys struct {
	Src, Dst cluster.Node
	Slots    int
	Keys     int64
}

// Apply makes the nodes match doc (payload: doc as compact JSON, for
// SETTOPOLOGY), keys included, telling line about each node as it goes.
// Its error says why it stopped and what was left; after a failure the
// slots stay open and served, and running it again resumes.
func Apply(l Login, doc *cluster.Topology, payload string, line func(NodeLine)) (Applied, error) {
	a := &applier{auth: l, doc: doc, payload: payload, line: line}
	return a.run()
}

// applier carries out one Apply.
type applier struct {
	auth    Login
	doc     *cluster.Topology
	payload string
	line    func(NodeLine)
}

// nodeLine tells that n did it, or what: reason.
func (a *applier) nodeLine(n cluster.Node, what string, err error) {
	switch {
	case err == nil:
		a.line(NodeLine{Node: n})
	case what != "":
		a.nodeError(n, what+": "+Reason(err))
	default:
		a.nodeError(n, Reason(err))
	}
}

func (a *applier) nodeError(n cluster.Node, text string) {
	a.line(NodeLine{Node: n, Problem: text})
}

// states asks every node for GETSTATE at once (a down node costs one
// timeout, not one per node). A node answering with another id is an error.
func (a *applier) states(nodes []cluster.Node) ([]*cluster.NodeReport, []error) {
	states := make([]*cluster.NodeReport, len(nodes))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Go(func() {
			st, err := a.auth.GetState(n.Addr())
			if err == nil && st.ID != n.ID {
				err = fmt.Errorf("invalid GETSTATE reply: the node's id is %s, not %s", st.ID, n.ID)
			}
			states[i], errs[i] = st, err
		})
	}
	wg.Wait()
	return states, errs
}

// preflight reaches every node of the document and of every topology a
// reached node holds, until no new node turns up. A node that failed has
// its line told, and nothing has been changed anywhere.
func (a *applier) preflight() ([]cluster.NodeView, error) {
	seen := make(map[string]bool)
	var pending []cluster.Node
	add := func(t *cluster.Topology) {
		for _, s := range t.Shards {
			for _, n := range append([]cluster.Node{s.Primary}, s.Replicas...) {
				if !seen[n.ID] {
					seen[n.ID] = true
					pending = append(pending, n)
				}
			}
		}
	}
	add(a.doc)
	var views []cluster.NodeView
	failed, total := 0, 0
	for len(pending) > 0 {
		round := pending
		pending = nil
		states, errs := a.states(round)
		for i, n := range round {
			total++
			if errs[i] != nil {
				failed++
				a.nodeLine(n, "", errs[i])
				continue
			}
			views = append(views, cluster.NodeView{Node: n, State: states[i]})
			if states[i].Topology != nil {
				add(states[i].Topology)
			}
		}
	}
	if failed > 0 {
		return nil, fmt.Errorf("nothing was changed: %d of %d nodes did not answer CLUSTER GETSTATE", failed, total)
	}
	return views, nil
}

func (a *applier) run() (Applied, error) {
	views, err := a.preflight()
	if err != nil {
		return Applied{}, err
	}
	plan, err := cluster.PlanApply(a.doc, views)
	if err != nil {
		return Applied{}, fmt.Errorf("%v; nothing was changed", err)
	}
	if plan.Join != nil {
		if err := a.join(views, plan.Join); err != nil {
			return Applied{}, err
		}
	}
	moves := plan.Moves
	if err := a.open(moves); err != nil {
		return Applied{}, err
	}
	var done Applied
	for _, m := range moves {
		n, err := a.move(m.Src, m.Dst, false)
		if err != nil {
			a.nodeLine(m.Src, fmt.Sprintf("CLUSTER MOVEKEYS to %s", m.Dst.Addr()), err)
			return Applied{}, fmt.Errorf("moving slots %s from %s to %s stopped after %d keys: the slots stay open and served; run apply again to resume",
				m.Slots, m.Src.Addr(), m.Dst.Addr(), n)
		}
		done.Moves = append(done.Moves, MovedKeys{Src: m.Src, Dst: m.Dst, Slots: m.Slots.Count(), Keys: n})
	}
	if err := a.stillOpen(moves); err != nil {
		return Applied{}, err
	}
	if err := a.flip(views, moves); err != nil {
		return Applied{}, err
	}
	if done.Orphans, err = a.drainOrphans(views); err != nil {
		return Applied{}, err
	}
	if err := a.verify(views); err != nil {
		return Applied{}, err
	}
	return done, nil
}

// join sends j (the current ownership, naming every node) to every node
// below its epoch, so that sources and destinations know each other.
func (a *applier) join(views []cluster.NodeView, j *cluster.Topology) error {
	payload, err := j.Marshal()
	if err == nil {
		var b bytes.Buffer
		if err = json.Compact(&b, payload); err == nil {
			payload = b.Bytes()
		}
	}
	if err != nil { // cannot happen: PlanApply validated it
		return err
	}
	results := make([]error, len(views))
	var wg sync.WaitGroup
	for i, v := range views {
		if v.State.Epoch >= j.Epoch {
			continue
		}
		wg.Go(func() { results[i] = a.auth.ok(v.Node.Addr(), "CLUSTER", "SETTOPOLOGY", string(payload)) })
	}
	wg.Wait()
	failed := 0
	for i, err := range results {
		if err != nil {
			failed++
			a.nodeLine(views[i].Node, fmt.Sprintf("CLUSTER SETTOPOLOGY (epoch %d, adding the new nodes)", j.Epoch), err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d nodes did not accept epoch %d, which adds the new nodes with no slots; no keys were moved", failed, len(views), j.Epoch)
	}
	return nil
}

// open marks every planned range IMPORTING on its destination, then
// MIGRATING on its source. The same state already there is accepted by the
// node, so a re-run passes through ranges a previous run opened.
func (a *applier) open(moves []cluster.SlotMove) error {
	for _, m := range moves {
		for _, r := range m.Slots {
			lo, hi := strconv.Itoa(r[0]), strconv.Itoa(r[1])
			if err := a.auth.ok(m.Dst.Addr(), "CLUSTER", "SETSLOTRANGE", lo, hi, "IMPORTING", m.Src.ID); err != nil {
				a.nodeLine(m.Dst, fmt.Sprintf("CLUSTER SETSLOTRANGE %s %s IMPORTING", lo, hi), err)
				return fmt.Errorf("could not open slots %s-%s from %s to %s; no keys were moved", lo, hi, m.Src.Addr(), m.Dst.Addr())
			}
			if err := a.auth.ok(m.Src.Addr(), "CLUSTER", "SETSLOTRANGE", lo, hi, "MIGRATING", m.Dst.ID); err != nil {
				a.nodeLine(m.Src, fmt.Sprintf("CLUSTER SETSLOTRANGE %s %s MIGRATING", lo, hi), err)
				if uerr := a.auth.ok(m.Dst.Addr(), "CLUSTER", "SETSLOTRANGE", lo, hi, "STABLE"); uerr != nil {
					a.nodeLine(m.Dst, fmt.Sprintf("CLUSTER SETSLOTRANGE %s %s STABLE (undo)", lo, hi), uerr)
					return fmt.Errorf("could not open slots %s-%s from %s to %s, and %s still imports them; no keys were moved",
						lo, hi, m.Src.Addr(), m.Dst.Addr(), m.Dst.Addr())
				}
				return fmt.Errorf("could not open slots %s-%s from %s to %s; no keys were moved", lo, hi, m.Src.Addr(), m.Dst.Addr())
			}
		}
	}
	return nil
}

// move repeats MOVEKEYS on src until it replies 0 and returns the keys moved.
func (a *applier) move(src, dst cluster.Node, orphans bool) (int64, error) {
	var total int64
	for range maxMoveRounds {
		n, err := a.auth.moveKeys(src.Addr(), dst.ID, orphans)
		if err != nil {
			// The node says how many it moved before it stopped.
			var done int64
			if _, scanErr := fmt.Sscanf(err.Error(), "ERR moved %d keys, then", &done); scanErr == nil {
				total += done
			}
			return total, err
		}
		if n == 0 {
			return total, nil
		}
		total += n
	}
	return total, fmt.Errorf("keys still left after %d rounds of CLUSTER MOVEKEYS", maxMoveRounds)
}

// flip sends the document to the nodes in cluster.FlipGroups's order, each
// group at once; a group with a refusal stops the ones after it. One line
// per node, in view order.
func (a *applier) flip(views []cluster.NodeView, moves []cluster.SlotMove) error {
	results := make([]error, len(views))
	sent := make([]bool, len(views))
	stopped := false
	for _, group := range cluster.FlipGroups(views, moves) {
		if stopped {
			break
		}
		var wg sync.WaitGroup
		for _, i := range group {
			sent[i] = true
			wg.Go(func() { results[i] = a.auth.ok(views[i].Node.Addr(), "CLUSTER", "SETTOPOLOGY", a.payload) })
		}
		wg.Wait()
		for _, i := range group {
			if results[i] != nil {
				stopped = true
			}
		}
	}
	failed := 0
	for i, v := range views {
		switch {
		case !sent[i]:
			failed++
			a.nodeError(v.Node, "not sent: a node of an earlier group refused")
		case results[i] != nil:
			failed++
		}
		if sent[i] {
			a.nodeLine(v.Node, "", results[i])
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d nodes did not accept epoch %d", failed, len(views), a.doc.Epoch)
	}
	return nil
}

// drainOrphans re-reads every node and moves the keys each holds of slots
// it neither owns nor imports to their owner in the document.
func (a *applier) drainOrphans(views []cluster.NodeView) ([]MovedKeys, error) {
	fresh, err := a.reread(views)
	if err != nil {
		return nil, err
	}
	var moved []MovedKeys
	for i, st := range fresh {
		if st.Orphans == 0 {
			continue
		}
		src := views[i].Node
		for _, s := range a.doc.Shards {
			if s.Primary.ID == src.ID || len(s.Slots) == 0 {
				continue
			}
			n, err := a.move(src, s.Primary, true)
			if err != nil {
				a.nodeLine(src, fmt.Sprintf("CLUSTER MOVEKEYS %s ORPHANS to %s", s.Primary.ID, s.Primary.Addr()), err)
				return nil, fmt.Errorf("epoch %d is applied, but moving orphan keys from %s to %s stopped after %d keys; run apply again to resume",
					a.doc.Epoch, src.Addr(), s.Primary.Addr(), n)
			}
			if n > 0 {
				moved = append(moved, MovedKeys{Src: src, Dst: s.Primary, Keys: n})
			}
		}
	}
	return moved, nil
}

// reread asks every node for GETSTATE again; a failing node's line is
// told.
func (a *applier) reread(views []cluster.NodeView) ([]*cluster.NodeReport, error) {
	nodes := make([]cluster.Node, len(views))
	for i, v := range views {
		nodes[i] = v.Node
	}
	states, errs := a.states(nodes)
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			a.nodeLine(nodes[i], "", err)
		}
	}
	if failed > 0 {
		return nil, fmt.Errorf("epoch %d is applied, but %d of %d nodes did not answer CLUSTER GETSTATE afterwards; run apply again to finish", a.doc.Epoch, failed, len(nodes))
	}
	return states, nil
}

// verify checks that no node is left with orphan keys or an open slot.
func (a *applier) verify(views []cluster.NodeView) error {
	states, err := a.reread(views)
	if err != nil {
		return err
	}
	bad := 0
	for i, st := range states {
		if problems := st.Unsettled(); len(problems) > 0 {
			bad++
			a.nodeError(views[i].Node, strings.Join(problems, "; "))
		}
	}
	if bad > 0 {
		return fmt.Errorf("epoch %d is applied, but %d of %d nodes are not settled", a.doc.Epoch, bad, len(views))
	}
	return nil
}

// stillOpen asks each move's source and destination, just before the flip,
// whether its slots are still open between them (cluster.SlotMove's
// FirstClosed). (The source itself refuses the flip while it holds keys of
// a slot.)
func (a *applier) stillOpen(moves []cluster.SlotMove) error {
	for _, m := range moves {
		src, err := a.auth.GetState(m.Src.Addr())
		if err != nil {
			a.nodeLine(m.Src, "CLUSTER GETSTATE", err)
			return fmt.Errorf("cannot check the moved slots on %s before the flip; nothing flipped: run apply again", m.Src.Addr())
		}
		dst, err := a.auth.GetState(m.Dst.Addr())
		if err != nil {
			a.nodeLine(m.Dst, "CLUSTER GETSTATE", err)
			return fmt.Errorf("cannot check the moved slots on %s before the flip; nothing flipped: run apply again", m.Dst.Addr())
		}
		slot, atDst, closed := m.FirstClosed(src, dst)
		switch {
		case !closed:
		case atDst:
			a.nodeError(m.Dst, fmt.Sprintf("slot %d is no longer importing from %s", slot, m.Src.Addr()))
			return fmt.Errorf("slot %d was closed or re-targeted on %s during the move; nothing flipped: check it, then run apply again", slot, m.Dst.Addr())
		default:
			a.nodeError(m.Src, fmt.Sprintf("slot %d no longer migrates to %s", slot, m.Dst.Addr()))
			return fmt.Errorf("slot %d was closed or re-targeted on %s during the move; nothing flipped: check it, then run apply again", slot, m.Src.Addr())
		}
	}
	return nil
}
