package commands

// SUBSCRIBE and UNSUBSCRIBE, for what client-side caching needs of them:
// a RESP2 connection subscribed to __redis__:invalidate receives, as Pub/Sub
// messages, the invalidations of the clients redirecting their tracking to
// it (CLIENT TRACKING ON REDIRECT), as in Redis. cellserver has no PUBLISH:
// any channel may be subscribed to, as in Redis, but only that one ever
// carries messages. A RESP2 connection with subscriptions accepts only the
// commands Redis accepts in that context.

import "strconv"

// trackingChannel is the channel Redis sends RESP2 redirect targets
// invalidations on.
const trackingChannel = "__redis__:invalidate"

// maxSubscriptions bounds one connection's channels.
const maxSubscriptions = 10000

func registerPubsub(t Table) {
	t.add(
		&Command{Name: "subscribe", Arity: -2, Flags: FlagPubSub | FlagNoScript | FlagLoading | FlagStale, Cats: CatPubSub | CatSlow, Group: "pubsub",
			Summary: "Listens for messages published to channels (only __redis__:invalidate carries any: tracking invalidations).", Since: "2.0.0",
			Run: subscribeCmd},
		&Command{Name: "unsubscribe", Arity: -1, Flags: FlagPubSub | FlagNoScript | FlagLoading | FlagStale, Cats: CatPubSub | CatSlow, Group: "pubsub",
			Summary: "Stops listening to messages posted to channels.", Since: "2.0.0",
			Run: unsubscribeCmd},
	)
}

// pubsubOnly is Redis's refusal of a command a RESP2 connection cannot run
// while subscribed, "" for one it can.
func (c *Client) pubsubOnly(cmd *Command) string {
	if c.nsubs.Load() == 0 || c.Proto() != 2 {
		return ""
	}
	switch cmd.Name {
	case "subscribe", "unsubscribe", "psubscribe", "punsubscribe", "ssubscribe", "sunsubscribe", "ping", "quit", "reset":
		return ""
	}
	return "ERR Can't execute '" + cmd.Name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
}

// subscribed reports whether a RESP2 connection is in the Pub/Sub context
// (PING answers differently there).
func (c *Client) subscribed() bool { return c.nsubs.Load() > 0 && c.Proto() == 2 }

// writeSubReply writes one (un)subscribe confirmation: an array in RESP2,
// a push in RESP3, as Redis's addReplyPubsubSubscribed.
func writeSubReply(w *Out, kind string, channel []byte, null bool, count int) {
	if w.Proto == 3 {
		w.B = append(w.B, ">3\r\n"...)
	} else {
		w.WriteArray(3)
	}
	w.WriteBulkString(kind)
	if null {
		w.WriteNull()
	} else {
		w.WriteBulk(channel)
	}
	w.WriteInt(int64(count))
}

// SUBSCRIBE channel [channel ...]
func subscribeCmd(c *Client, w *Out, args [][]byte) {
	if c.subs == nil {
		c.subs = map[string]struct{}{}
	}
	for _, ch := range args[1:] {
		if _, ok := c.subs[string(ch)]; !ok {
			if len(c.subs) >= maxSubscriptions {
				w.WriteError("ERR too many channels subscribed (at most " + strconv.Itoa(maxSubscriptions) + ")")
				return
			}
			c.subs[string(ch)] = struct{}{}
			if string(ch) == trackingChannel {
				c.subInvalidate.Store(true)
			}
		}
		c.nsubs.Store(int32(len(c.subs)))
		c.hooked = true
		writeSubReply(w, "subscribe", ch, false, len(c.subs))
	}
}

// UNSUBSCRIBE [channel ...]
func unsubscribeCmd(c *Client, w *Out, args [][]byte) {
	if len(args) == 1 {
		if len(c.subs) == 0 {
			writeSubReply(w, "unsubscribe", nil, true, 0)
			return
		}
		chans := make([]string, 0, len(c.subs))
		for ch := range c.subs {
			chans = append(chans, ch)
		}
		for _, ch := range chans {
			c.unsubscribe(ch)
			writeSubReply(w, "unsubscribe", []byte(ch), false, len(c.subs))
		}
		return
	}
	for _, ch := range args[1:] {
		c.unsubscribe(string(ch))
		writeSubReply(w, "unsubscribe", ch, false, len(c.subs))
	}
}

func (c *Client) unsubscribe(ch string) {
	delete(c.subs, ch)
	if ch == trackingChannel {
		c.subInvalidate.Store(false)
	}
	c.nsubs.Store(int32(len(c.subs)))
}

// resetPubsub drops every subscription, as RESET does.
func (c *Client) resetPubsub() {
	c.subs = nil
	c.subInvalidate.Store(false)
	c.nsubs.Store(0)
}

// appendTrackingMessage appends the Pub/Sub message on __redis__:invalidate
// that tells a RESP2 redirect target of key (null: of a flush, written
// in the tracking client's protocol as Redis writes it).
func appendTrackingMessage(dst, key []byte, null bool, proto int) []byte {
	return appendInvalidated(append(dst, "*3\r\n$7\r\nmessage\r\n$20\r\n"+trackingChannel+"\r\n"...), key, null, proto)
}

// pingSubscribed is PING's reply in the RESP2 Pub/Sub context.
func pingSubscribed(w *Out, args [][]byte) {
	w.WriteArray(2)
	w.WriteBulkString("pong")
	if len(args) == 2 {
		w.WriteBulk(args[1])
	} else {
		w.WriteBulkString("")
	}
}

// clientType is Redis's getClientType for the clients cellserver has: a
// subscribed client is a pubsub client, any other a normal one.
func (c *Client) clientType() string {
	if c.nsubs.Load() > 0 {
		return "pubsub"
	}
	return "normal"
}

// pubsubFlags is CLIENT LIST's P flag.
func (c *Client) pubsubFlags() string {
	if c.nsubs.Load() > 0 {
		return "P"
	}
	return ""
}
