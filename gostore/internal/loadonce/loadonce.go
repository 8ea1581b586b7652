// Package loadonce holds a process-wide thing loaded once (a driver
// library opened with dlopen: gostore/gpu, gostore/rdma) from options the
// edge may set before the first use, and never after: a library mapped
// into the process and its entry points bound as C globals cannot be
// loaded again differently.
package loadonce

import "sync"

// Once loads a V once, from the options O configured until then. The zero
// value is ready: options are O's zero value until Configure.
type Once[O, V any] struct {
	once sync.Once
	val  V

	mu     sync.Mutex // guards opt and loaded
	opt    O
	loaded bool
}

// Configure sets the options the load will use; false (nothing changed)
// once the load has begun.
func (o *Once[O, V]) Configure(opt O) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.loaded {
		return false
	}
	o.opt = opt
	return true
}

// Get runs load once, with the options configured, and returns its value
// to every caller.
func (o *Once[O, V]) Get(load func(O) V) V {
	o.once.Do(func() {
		o.mu.Lock()
		o.loaded = true
		opt := o.opt
		o.mu.Unlock()
		o.val = load(opt)
	})
	return o.val
}
