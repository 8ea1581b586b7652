// kvevents.go: the KV events a router follows (Mooncake's
// --enable_kv_events): which objects became readable, and on which medium,
// and which stopped being. The core only decides and queues them; the
// server publishes them (gostore/master/server/kvevents.go).

package master

import (
	"sync"
	"sync/atomic"

	"github.com/gostore/gostore/gostore/wire"
)

// EventKind says what an Event announces.
type EventKind uint8

const (
	// EventStored: Key became readable on Medium.
	EventStored EventKind = iota + 1
	// EventRemoved: Key is no longer readable on Medium.
	EventRemoved
	// EventAllCleared: forget every key announced before (a remove-all left
	// nothing, or a master started).
	EventAllCleared
)

// Medium is where a stored object's bytes are: Mooncake's medium names.
type Medium uint8

const (
	MediumCPU  Medium = iota + 1 // a COMPLETE memory replica
	MediumDisk                   // a disk copy in a client's SSD tier
)

func (m Medium) String() string {
	switch m {
	case MediumCPU:
		return "cpu"
	case MediumDisk:
		return "disk"
	}
	return ""
}

// Event is one KV event, in the order the core made it. For one key, events
// are queued under the key's shard lock, so they are in the order of the
// changes; a Stored for a medium is always followed by that medium's
// Removed before the next Stored.
type Event struct {
	Kind   EventKind
	Medium Medium // none for EventAllCleared
	Key    string
	// Tenant is the object's tenant; "" is the default tenant (the
	// publisher names it).
	Tenant string
	At     int64 // ns on the core's clock
}

// What of an object its events have announced (object.announced).
const (
	announcedCPU uint8 = 1 << iota
	announcedDisk
)

// announce queues the events that bring what o's events said (o.announced)
// to what o is now: readable from memory (a COMPLETE replica) and from disk
// (a disk copy no write in progress has made stale). gone: o has left the
// map. The caller holds key's shard lock. Every change of either goes
// through report, which the durable-state property test pins: an object's
// COMPLETE replicas and disk copy are durable state.
func (c *Core) announce(key string, o *object, gone bool) {
	q := c.cfg.Events
	if q == nil {
		return
	}
	var now uint8
	if !gone {
		if o.complete() {
			now |= announcedCPU
		}
		if o.onDisk() != nil && !o.unfinished() {
			now |= announcedDisk
		}
	}
	was := o.announced
	if was == now {
		return
	}
	o.announced = now
	at := c.now()
	// A tenant's object is stored under its scoped key (wire.ScopeKey):
	// subscribers get the tenant's own key and the tenant by name.
	tenant := ""
	if c.cfg.MultiTenants {
		if t, k := wire.SplitScoped(key); t != wire.DefaultTenant {
			tenant, key = t, k
		}
	}
	for _, m := range [...]struct {
		bit    uint8
		medium Medium
	}{{announcedCPU, MediumCPU}, {announcedDisk, MediumDisk}} {
		switch {
		case was&m.bit == 0 && now&m.bit != 0:
			q.Push(Event{Kind: EventStored, Medium: m.medium, Key: key, Tenant: tenant, At: at})
		case was&m.bit != 0 && now&m.bit == 0:
			q.Push(Event{Kind: EventRemoved, Medium: m.medium, Key: key, Tenant: tenant, At: at})
		}
	}
}

// EventQueue is the bounded queue between the core, which pushes events
// under its locks, and the publisher, which drains them off those locks:
// a push never waits for a socket. Full, it drops its oldest event and
// counts it (Mooncake's --kv_events_queue_capacity).
type EventQueue struct {
	mu sync.Mutex
	// held: events pushed while the queue is held (Hold), before the ring's
	// and never dropped: the all-cleared a master starts with and the
	// stored events of what it restores, pushed before the publisher runs.
	held    []Event
	holding bool
	buf     []Event // a ring: n events from head
	head    int
	n       int
	limit   int // 0: unbounded (the ring grows)
	// lost: events dropped since the last Drain (the publisher leaves a
	// gap of that many in its sequence numbers); dropped: ever.
	lost    uint64
	dropped atomic.Uint64
	ready   chan struct{}
}

// NewEventQueue is a queue of at most capacity events; 0 is unbounded, as
// Mooncake's 0.
func NewEventQueue(capacity int) *EventQueue {
	size := capacity
	if size == 0 || size > 1024 {
		size = 1024 // grown on demand up to the capacity
	}
	return &EventQueue{buf: make([]Event, size), limit: capacity, ready: make(chan struct{}, 1)}
}

// Hold keeps every event pushed from now until Release, whatever the
// capacity: the server holds the queue while a master restores its state,
// before the publisher drains it (a restore announces each object).
func (q *EventQueue) Hold() {
	q.mu.Lock()
	q.holding = true
	q.mu.Unlock()
}

// Release ends Hold: the events held are drained first, and the capacity
// bounds what comes after.
func (q *EventQueue) Release() {
	q.mu.Lock()
	q.holding = false
	q.mu.Unlock()
}

// Push appends e. When the queue is full it drops its oldest event, but
// never an all-cleared one: with an all-cleared oldest it drops the next
// (the all-cleared stays first), and with nothing else to drop it drops e
// (unless e clears too, which then replaces it).
func (q *EventQueue) Push(e Event) {
	q.mu.Lock()
	wake := q.push(e)
	q.mu.Unlock()
	q.wake(wake)
}

// push is Push under q.mu; true: the queue was empty (wake the publisher).
func (q *EventQueue) push(e Event) bool {
	if q.holding {
		q.held = append(q.held, e)
		return len(q.held)+q.n == 1
	}
	if q.n == len(q.buf) {
		if q.limit == 0 || q.n < q.limit {
			q.grow()
		} else if !q.dropFor(e) {
			return false
		}
	}
	q.buf[(q.head+q.n)%len(q.buf)] = e
	q.n++
	return q.n+len(q.held) == 1
}

// PushIf pushes e if ok(), called under the queue's lock: nothing is
// queued between the two. ok must take no lock (this one is the last).
func (q *EventQueue) PushIf(e Event, ok func() bool) {
	q.mu.Lock()
	wake := ok() && q.push(e)
	q.mu.Unlock()
	q.wake(wake)
}

// dropFor makes room in the full ring for e (see Push); false: e itself
// is the one dropped.
func (q *EventQueue) dropFor(e Event) bool {
	q.lost++
	q.dropped.Add(1)
	oldest := &q.buf[q.head]
	if oldest.Kind == EventAllCleared && e.Kind != EventAllCleared {
		if q.n == 1 {
			return false
		}
		next := &q.buf[(q.head+1)%len(q.buf)]
		if next.Kind != EventAllCleared {
			*next = *oldest // the all-cleared takes the dropped event's place
		}
	}
	*oldest = Event{}
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return true
}

func (q *EventQueue) wake(wake bool) {
	if wake {
		select {
		case q.ready <- struct{}{}:
		default:
		}
	}
}

// grow doubles the ring (at most to the limit), keeping the order.
func (q *EventQueue) grow() {
	size := 2 * len(q.buf)
	if q.limit != 0 && size > q.limit {
		size = q.limit
	}
	buf := make([]Event, size)
	for i := 0; i < q.n; i++ {
		buf[i] = q.buf[(q.head+i)%len(q.buf)]
	}
	q.buf, q.head = buf, 0
}

// Drain moves up to max of the oldest events to dst and returns it, with
// the number of events dropped since the last Drain (before these).
func (q *EventQueue) Drain(dst []Event, max int) ([]Event, uint64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	k := min(max, len(q.held))
	dst = append(dst, q.held[:k]...)
	q.held = q.held[k:]
	if len(q.held) == 0 {
		q.held = nil
	}
	max -= k
	for ; max > 0 && q.n > 0; max-- {
		dst = append(dst, q.buf[q.head])
		q.buf[q.head] = Event{}
		q.head = (q.head + 1) % len(q.buf)
		q.n--
	}
	lost := q.lost
	q.lost = 0
	return dst, lost
}

// Ready has a value once the queue gets an event after being empty: a
// publisher waits on it when a Drain came back empty.
func (q *EventQueue) Ready() <-chan struct{} { return q.ready }

// Len is the number of events waiting.
func (q *EventQueue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.held) + q.n
}

// Dropped is the number of events dropped for room since the start.
func (q *EventQueue) Dropped() uint64 { return q.dropped.Load() }
