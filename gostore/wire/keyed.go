// keyed.go marks the master's requests that name object keys, so that the
// master checks every one of them against its limits in one place.

package wire

// Keyed is a request that names object keys. The master checks their
// number (--max_batch_keys) and lengths (--max_key_bytes) before it runs
// the request; a request type with keys that does not implement Keyed
// escapes both (the master's tests check that none does).
//
// KeyList returns the request's own slice: the caller reads it and keeps
// nothing.
type Keyed interface {
	KeyList() []string
}

func (r *PutStartReq) KeyList() []string        { return r.Keys }
func (r *KeysReq) KeyList() []string            { return r.Keys }
func (r *ReplicaClearReq) KeyList() []string    { return r.Keys }
func (r *RemoveReq) KeyList() []string          { return r.Keys }
func (r *NotifyOffloadedReq) KeyList() []string { return r.Keys }
func (r *RecoverDiskReq) KeyList() []string     { return r.Keys }

// KeyList of a task is its one key (a slice made for the call: tasks are
// rare).
func (r *CreateTaskReq) KeyList() []string { return []string{r.Key} }
