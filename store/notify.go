package store

// Key change notification: WATCH (a transaction aborts if a watched key
// changed) and CLIENT TRACKING (a client is told to drop what it cached)
// both need to learn that a key changed, from the goroutine that changed
// it. Each shard keeps, for the keys someone registered for, the listeners
// to tell; a store with none pays one length check at each write site.

// KeyListener learns that a key it registered for changed: written (an allowed CL.THROTTLE,
// a charged CL.LIMIT, an import), deleted (DEL, CL.RESET, a slot dropped), expired (sweep or
// lazy), or flushed. Called on the goroutine that owns (or holds) the key's shard; it must not
// block or call the store. `by` is the ID of the Session whose request changed it (0: expiry,
// flush of a key by the server itself, internal). A registration fires once and is removed.
// key is valid only during the call.
type KeyListener interface{ KeyChanged(key []byte, by uint64) }

// InterestReq is a keyed request registering Listener's interest in Key on the key's shard
// (Remove: withdraw it). Queue it with Session.Add like any keyed request.
//
// Registering first drops Key if it has expired (a key that expired before
// the registration did not change after it). A listener registered twice
// for a key is registered once; withdrawing one that is not registered
// (it fired already) does nothing. Registrations live until they fire or
// are withdrawn: the caller bounds how many it makes.
type InterestReq struct {
	envelope
	Key      []byte
	Listener KeyListener
	Remove   bool
}

// RegistrationListener is a KeyListener that also learns, on the shard's
// goroutine, that a registration of it for a key is in place: looking the
// key up first may have fired (and so removed) an earlier registration of
// the same listener, which its owner may have forgotten meanwhile.
type RegistrationListener interface {
	KeyListener
	KeyRegistered(key []byte)
}

func (r *InterestReq) route() *envelope {
	e := r.addressed(r, r.Key)
	e.nogate = true
	return e
}

func (r *InterestReq) run(sh *shard, now int64) {
	if r.Remove {
		sh.withdraw(r.Key, r.Listener)
		return
	}
	sh.find(r.Key, r.keyHash(sh.t, r.Key), floorMs(now))
	ls := sh.interest[string(r.Key)]
	known := false
	for _, l := range ls {
		if l == r.Listener {
			known = true
			break
		}
	}
	if !known {
		if sh.interest == nil {
			sh.interest = map[string][]KeyListener{}
		}
		sh.interest[string(r.Key)] = append(ls, r.Listener)
	}
	if rl, ok := r.Listener.(RegistrationListener); ok {
		rl.KeyRegistered(r.Key)
	}
}

// withdraw removes l's registration for key, if any.
func (sh *shard) withdraw(key []byte, l KeyListener) {
	ls, ok := sh.interest[string(key)]
	if !ok {
		return
	}
	for i, x := range ls {
		if x == l {
			ls = append(ls[:i], ls[i+1:]...)
			break
		}
	}
	if len(ls) == 0 {
		delete(sh.interest, string(key))
		return
	}
	sh.interest[string(key)] = ls
}

// changed tells key's listeners that it changed, by session by (0: the
// store itself). Every write site calls it; it costs a length check when
// the shard has no registration.
func (sh *shard) changed(key []byte, by uint64) {
	if len(sh.interest) != 0 {
		sh.fire(key, by)
	}
	if b := sh.bcast.Load(); b != nil {
		b.l.KeyChanged(key, by)
	}
}

func (sh *shard) fire(key []byte, by uint64) {
	ls, ok := sh.interest[string(key)]
	if !ok {
		return
	}
	delete(sh.interest, string(key))
	for _, l := range ls {
		l.KeyChanged(key, by)
	}
}

// flushed tells the listeners of every key the shard holds, live or
// expired but not yet removed, that a flush by session by removed it
// (Redis 7: FLUSHALL touches the watched keys that existed). Call it
// before the table is emptied.
func (sh *shard) flushed(by uint64) {
	for k := range sh.interest {
		if sh.t.findHash([]byte(k), sh.t.hash([]byte(k))) >= 0 {
			sh.fire([]byte(k), by)
		}
	}
}

// Broadcast listening (CLIENT TRACKING's BCAST mode) is told of every
// change of every key, with no registration per key. The listener sits
// behind one pointer all shards share, nil while there is none: a store
// without one pays a load and a nil check at each write site.
type broadcast struct{ l KeyListener }

// SetBroadcast makes l the listener told of every change of any key, on
// the goroutine of the key's shard and with KeyListener's rules, except
// that it is never removed by firing (nil: none). Each key a flush removes
// is not told one by one: the caller knows of the flush.
func (s *Store) SetBroadcast(l KeyListener) {
	if l == nil {
		s.bcast.Store(nil)
		return
	}
	s.bcast.Store(&broadcast{l: l})
}
