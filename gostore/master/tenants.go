// tenants.go holds the tenants' accounts under --enable_multi_tenants
// (Config.MultiTenants): what each tenant's objects hold in memory, the
// quota policy, admission of writes against it and the tenant-first
// eviction. Keys are stored scoped (wire.ScopeKey); the tenant of an
// object is read from its key.
//
// An object is charged its size times its memory replicas (those being
// written included), as Mooncake charges; the charge follows every change
// of its replicas through report (every such change is reported, see the
// package invariants) and o.charged remembers what was charged, so a
// removal refunds exactly that. Restore recounts.

package master

import (
	"fmt"
	"maps"
	"math"
	"math/big"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.yaml.in/yaml/v2"

	"github.com/gostore/gostore/gostore/wire"
)

// TenantPolicy is a quota policy: each registered tenant's quota in bytes
// (Mooncake's requested_quota_bytes).
type TenantPolicy map[string]uint64

// ParseTenantPolicy reads Mooncake's policy file: `version: 1` and a list
// `tenants` of `name` and `quota` (a positive integer, optionally with a
// unit B, KB, MB, GB or TB, binary multiples). Names follow
// wire.ValidTenant and are unique.
func ParseTenantPolicy(b []byte) (TenantPolicy, error) {
	var doc struct {
		Version *int `yaml:"version"`
		Tenants []struct {
			Name  *string `yaml:"name"`
			Quota *string `yaml:"quota"`
		} `yaml:"tenants"`
	}
	if err := yaml.UnmarshalStrict(b, &doc); err != nil {
		return nil, fmt.Errorf("invalid YAML: %v", err)
	}
	if doc.Version == nil {
		return nil, fmt.Errorf("tenant quota policy version is required")
	}
	if *doc.Version != 1 {
		return nil, fmt.Errorf("unsupported tenant quota policy version %d (want 1)", *doc.Version)
	}
	p := make(TenantPolicy, len(doc.Tenants))
	for _, t := range doc.Tenants {
		if t.Name == nil || !wire.ValidTenant(*t.Name) {
			return nil, fmt.Errorf("tenant name missing or invalid (empty, starting with '_', holding a control character or over 256 bytes)")
		}
		if t.Quota == nil {
			return nil, fmt.Errorf("tenant %q: quota is required", *t.Name)
		}
		if _, dup := p[*t.Name]; dup {
			return nil, fmt.Errorf("duplicate tenant name %q", *t.Name)
		}
		q, err := parseQuota(*t.Quota)
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %v", *t.Name, err)
		}
		p[*t.Name] = q
	}
	return p, nil
}

var quotaUnits = map[string]uint64{"": 1, "B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}

func parseQuota(s string) (uint64, error) {
	digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
	if digits == 0 {
		return 0, fmt.Errorf("quota %q must start with an integer", s)
	}
	n, err := strconv.ParseUint(s[:digits], 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("quota %q must be a positive integer that fits 64 bits", s)
	}
	unit, ok := quotaUnits[s[digits:]]
	if !ok {
		return 0, fmt.Errorf("quota %q: unsupported unit %q (B, KB, MB, GB, TB)", s, s[digits:])
	}
	if n > math.MaxInt64/unit {
		return 0, fmt.Errorf("quota %q is over 2^63-1 bytes", s)
	}
	return n * unit, nil
}

// tenantAccount is one tenant's usage and counters.
type tenantAccount struct {
	charged  atomic.Int64 // bytes its objects' memory replicas hold
	reserved atomic.Int64 // bytes of writes being admitted (startWrites)
	// rejects by reason (Mooncake's label): quota_exceeded, not_registered.
	rejectQuota, rejectUnregistered atomic.Int64
	evicted                         atomic.Int64 // bytes taken by tenant-first eviction
	// dropped: the account left the ledger (dropEmpty); a charge that
	// lands on it is moved to the tenant's new account (charge).
	dropped atomic.Bool
}

// An unregistered tenant's refused writes are counted on its own account
// (Mooncake's series are per tenant) for the first maxRefusedAccounts
// such tenants; beyond, on the one account unregisteredTenants, so that
// names a peer makes up cost bounded state. A tenant name never starts
// with '_'.
const (
	maxRefusedAccounts  = 256
	unregisteredTenants = "_unregistered"
)

// tenantLedger is every tenant's account and the policy in force.
// An account exists for each tenant the policy names and each that holds
// objects; an empty one the policy does not name is dropped at the next
// tick (dropEmpty). Accounts are read without a lock (charge runs under
// shard locks, on every change of replicas).
type tenantLedger struct {
	accounts sync.Map     // tenant name -> *tenantAccount
	refused  atomic.Int64 // accounts made for an unregistered tenant's refusal
	mu       sync.RWMutex
	policy   TenantPolicy      // nil: no quotas
	share    map[string]uint64 // each registered tenant's effective quota
	// kept is the last share of each tenant a new policy no longer
	// names while it still owns objects (Mooncake refuses to delete a
	// tenant that is not empty): its writes are refused, and eviction
	// takes only what it holds beyond that share, until it holds nothing.
	kept     map[string]uint64
	capacity uint64 // the pool's capacity share was computed for
}

func (l *tenantLedger) account(tenant string) *tenantAccount {
	if a, ok := l.accounts.Load(tenant); ok {
		return a.(*tenantAccount)
	}
	a, _ := l.accounts.LoadOrStore(strings.Clone(tenant), &tenantAccount{})
	return a.(*tenantAccount)
}

// charge moves key's tenant's charge to o's replicas (o nil: none), from
// what o was charged before; the caller holds key's shard lock.
func (c *Core) charge(key string, o *object) {
	var before, after int64
	if o != nil {
		n := min(o.numReplicas(), math.MaxUint8)
		before, after = int64(o.charged)*int64(o.size), int64(n)*int64(o.size)
		o.charged = uint8(n)
	}
	if before != after {
		t, _ := wire.SplitScoped(key)
		c.ledger.addCharge(t, after-before)
	}
}

// addCharge adds d to tenant's charge. An account dropped meanwhile
// (dropEmpty) does not keep it: dropEmpty marks the account, then reads
// its charge; this adds, then reads the mark, so one of them sees the
// other and the charge lands on a live account.
func (l *tenantLedger) addCharge(tenant string, d int64) {
	for {
		a := l.account(tenant)
		a.charged.Add(d)
		if !a.dropped.Load() {
			return
		}
		a.charged.Add(-d)
		l.accounts.CompareAndDelete(tenant, a)
	}
}

// dropEmpty drops the accounts of tenants the policy does not name that
// hold and reserve nothing and count no refusal (their other counters
// go with them).
func (l *tenantLedger) dropEmpty() {
	l.mu.RLock()
	defer l.mu.RUnlock()
	l.accounts.Range(func(k, v any) bool {
		t, a := k.(string), v.(*tenantAccount)
		_, kept := l.kept[t]
		if _, named := l.policy[t]; named || kept || t == unregisteredTenants || a.rejectUnregistered.Load() != 0 {
			return true // named, or counting refusals (bounded by maxRefusedAccounts)
		}
		a.dropped.Store(true)
		if a.charged.Load() != 0 || a.reserved.Load() != 0 {
			a.dropped.Store(false)
			return true
		}
		l.accounts.CompareAndDelete(t, a)
		return true
	})
}

// uncharge refunds what o (being deleted under key) was charged; the
// caller holds key's shard lock.
func (l *tenantLedger) uncharge(key string, o *object) {
	if o.charged == 0 {
		return
	}
	t, _ := wire.SplitScoped(key)
	l.addCharge(t, -int64(o.charged)*int64(o.size))
	o.charged = 0
}

// recountTenants sets every tenant's charge from the objects (after a
// restore, which reports nothing).
func (c *Core) recountTenants() {
	if c.ledger == nil {
		return
	}
	for i := range c.shards {
		c.shards[i].sweep(func(key string, o *object) {
			o.charged = 0
			c.charge(key, o)
		})
	}
}

// SetTenantPolicy puts p in force (nil: no quotas): from now on writes of
// a tenant p does not name are refused (-1701), and a tenant's writes are
// admitted against its share of the pool. A tenant the last policy named
// and p does not keeps its last share while it owns objects (ledger.kept):
// those tenants are returned, by name, for the caller to warn of. Without
// MultiTenants it does nothing.
func (c *Core) SetTenantPolicy(p TenantPolicy) []string {
	if c.ledger == nil {
		return nil
	}
	l := c.ledger
	l.mu.Lock()
	var kept map[string]uint64
	var names []string
	if p != nil {
		last := maps.Clone(l.share)
		if last == nil {
			last = map[string]uint64{}
		}
		for t, sh := range l.kept {
			if _, named := last[t]; !named {
				last[t] = sh
			}
		}
		for t, sh := range last {
			if _, named := p[t]; named {
				continue
			}
			if a, ok := l.accounts.Load(t); ok && a.(*tenantAccount).charged.Load() > 0 {
				if kept == nil {
					kept = map[string]uint64{}
				}
				kept[t] = sh
				names = append(names, t)
			}
		}
	}
	l.policy, l.kept = p, kept
	l.capacity = c.capacity()
	l.share = shares(p, l.capacity)
	l.mu.Unlock()
	for t := range p {
		l.account(t) // listed in the series from now on
	}
	slices.Sort(names)
	return names
}

// shareOf is tenant's share: its registered one, else a kept one (0 for
// neither); the caller holds l.mu.
func (l *tenantLedger) shareOf(tenant string) uint64 {
	if sh, ok := l.share[tenant]; ok {
		return sh
	}
	return l.kept[tenant]
}

// TenantPolicyInForce reports whether a quota policy is in force.
func (c *Core) TenantPolicyInForce() bool {
	l := c.ledger
	if l == nil {
		return false
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.policy != nil
}

// refreshShares recomputes the shares when the pool's capacity changed.
func (c *Core) refreshShares() {
	l := c.ledger
	if l == nil {
		return
	}
	capacity := c.capacity()
	l.mu.Lock()
	if l.policy != nil && capacity != l.capacity {
		l.capacity = capacity
		l.share = shares(l.policy, capacity)
	}
	for t := range l.kept {
		if a, ok := l.accounts.Load(t); !ok || a.(*tenantAccount).charged.Load() <= 0 {
			delete(l.kept, t) // empty now: gone for good
		}
	}
	l.mu.Unlock()
	l.dropEmpty()
}

// shares is each tenant's effective quota (Mooncake's rule): its quota
// while the quotas together fit the pool, otherwise the pool divided in
// proportion to the quotas, the bytes left by rounding down going one
// each to the largest remainders (ties to the smaller name).
func shares(p TenantPolicy, capacity uint64) map[string]uint64 {
	if p == nil {
		return nil
	}
	out := make(map[string]uint64, len(p))
	sum := new(big.Int)
	for t, q := range p {
		out[t] = q
		sum.Add(sum, new(big.Int).SetUint64(q))
	}
	if sum.Cmp(new(big.Int).SetUint64(capacity)) <= 0 {
		return out
	}
	type rem struct {
		t string
		r *big.Int
	}
	var rems []rem
	var given uint64
	for t, q := range p {
		prod := new(big.Int).Mul(new(big.Int).SetUint64(capacity), new(big.Int).SetUint64(q))
		base, r := new(big.Int).QuoRem(prod, sum, new(big.Int))
		out[t] = base.Uint64()
		given += out[t]
		rems = append(rems, rem{t, r})
	}
	slices.SortFunc(rems, func(a, b rem) int {
		if c := b.r.Cmp(a.r); c != 0 {
			return c
		}
		return strings.Compare(a.t, b.t)
	})
	for i := 0; given < capacity && i < len(rems); i++ {
		out[rems[i].t]++
		given++
	}
	return out
}

// capacity is the pool's capacity (draining segments left out, as usage
// leaves them).
func (c *Core) capacity() uint64 {
	_, capacity := c.poolBytes()
	return capacity
}

// admitTenant decides a write of need bytes under key against its
// tenant's share: OK with the bytes reserved (the caller gives them back
// with unreserve once the write has started or failed: by then its
// replicas are charged), or the refusal. A tenant at its share first
// evicts its own objects (Mooncake's tenant-scoped eviction), as much as
// the write needs and an EvictionRatio of its share besides, so that the
// next writes find room. No lock may be held.
func (c *Core) admitTenant(now int64, key string, need uint64) (*tenantAccount, wire.Code) {
	l := c.ledger
	t, _ := wire.SplitScoped(key)
	l.mu.RLock()
	policy := l.policy
	share, registered := l.share[t]
	l.mu.RUnlock()
	if policy == nil {
		return nil, wire.OK
	}
	if !registered {
		// Counted on the tenant's account when it has one (it holds
		// objects), else on the one account of all the others.
		a, ok := l.accounts.Load(t)
		if !ok && l.refused.Add(1) <= maxRefusedAccounts {
			a = l.account(t)
		} else if !ok {
			a = l.account(unregisteredTenants)
		}
		a.(*tenantAccount).rejectUnregistered.Add(1)
		return nil, wire.ErrTenantNotRegistered
	}
	a := l.account(t) // a named tenant's: the policy bounds them
	if need > share { // checked first: need may be over 2^63 (quotaCharge)
		a.rejectQuota.Add(1)
		return nil, wire.ErrTenantQuotaExceeded
	}
	for try := 0; ; try++ {
		// The reservations first, then the charge: a write that starts
		// meanwhile is charged before it is unreserved (startWrites), so
		// it is counted in one reading or both, never in neither.
		r := a.reserved.Add(int64(need))
		if testHookAdmitting != nil {
			testHookAdmitting()
		}
		used := a.charged.Load() + r
		if used <= int64(share) {
			return a, wire.OK
		}
		a.reserved.Add(-int64(need))
		if try == 1 {
			a.rejectQuota.Add(1)
			return nil, wire.ErrTenantQuotaExceeded
		}
		want := used - int64(share) + int64(c.cfg.EvictionRatio*float64(share))
		c.evictTenants(now, map[string]int64{t: want})
	}
}

// quotaCharge is what a write of size bytes in replicas memory replicas
// is charged (Mooncake's requested charge): their product, saturated at
// 2^64-1 rather than wrapped. replicas is what the placer will try to
// place (replica_num capped at the segments mounted), so a huge
// replica_num is charged the replicas it can get, never a wrapped product
// small enough to pass admission.
func quotaCharge(size uint64, replicas int) uint64 {
	hi, lo := bits.Mul64(size, uint64(max(replicas, 1)))
	if hi != 0 {
		return math.MaxUint64
	}
	return lo
}

// testHookAdmitting, when set (tests), runs between admission's two
// readings of the account.
var testHookAdmitting func()

// testHookAdmitted, when set (tests), runs after a write is admitted,
// before it starts.
var testHookAdmitted func()

func unreserve(a *tenantAccount, need uint64) {
	if a != nil {
		a.reserved.Add(-int64(need))
	}
}

// evictTenants evicts, for each tenant of wants, its evictable objects
// (EvictPass's rules; soft pinned ones only when AllowEvictSoftPinned,
// after the others) until its want bytes of memory replicas are freed,
// least recently used first: one sweep lists every such tenant's
// candidates, then each tenant's are taken oldest first. It returns the
// bytes freed in all.
func (c *Core) evictTenants(now int64, wants map[string]int64) int64 {
	type cand struct {
		key     string
		lastUse int64
		soft    bool
	}
	var dropped int64
	cands := map[string][]cand{}
	for t, want := range wants {
		if want <= 0 {
			delete(wants, t)
			continue
		}
		// The tenant's hot extras go first: they are copies the master
		// made, charged to the tenant like any replica, and cost it no
		// object.
		d := int64(c.dropHotReplicasOf(now, uint64(want), func(key string) bool {
			owner, _ := wire.SplitScoped(key)
			return owner == t
		}))
		dropped += d
		if want -= d; want > 0 {
			wants[t] = want
			cands[t] = nil
		} else {
			delete(wants, t)
		}
	}
	if len(wants) == 0 {
		return dropped
	}
	for i := range c.shards {
		c.shards[i].sweep(func(key string, o *object) {
			t, _ := wire.SplitScoped(key)
			list, ok := cands[t]
			if !ok {
				return
			}
			if ok, soft := c.evictable(o, now); ok && (!soft || c.cfg.AllowEvictSoftPinned) {
				cands[t] = append(list, cand{key, o.lastUse, soft})
			}
		})
	}
	var all int64
	for t, list := range cands {
		slices.SortFunc(list, func(a, b cand) int {
			if a.soft != b.soft {
				if a.soft {
					return 1
				}
				return -1
			}
			return int(max(-1, min(1, a.lastUse-b.lastUse)))
		})
		var freed, objects int64
		for _, cd := range list {
			if freed >= wants[t] {
				break
			}
			sh := c.shardOf(cd.key)
			sh.mu.Lock()
			if o, ok := sh.objects[cd.key]; ok {
				if ok, _ := c.evictable(o, now); ok {
					freed += c.evictObject(sh, cd.key, o)
					objects++
				}
			}
			sh.mu.Unlock()
		}
		if freed > 0 {
			c.ledger.account(t).evicted.Add(freed)
			c.stats.EvictedObjects.Add(objects)
			c.stats.EvictedBytes.Add(freed)
		}
		all += freed
	}
	return dropped + all
}

// evictOverShare evicts, tenant by tenant, what each tenant holds beyond
// its share: the first thing an eviction pass takes. It returns the
// objects' bytes freed.
func (c *Core) evictOverShare(now int64) int64 {
	l := c.ledger
	if l == nil {
		return 0
	}
	l.mu.RLock()
	over := map[string]int64{}
	if l.policy != nil {
		l.accounts.Range(func(k, v any) bool {
			t := k.(string)
			share := l.shareOf(t) // 0 for a tenant no policy names
			if d := v.(*tenantAccount).charged.Load() - int64(share); d > 0 {
				over[t] = d
			}
			return true
		})
	}
	l.mu.RUnlock()
	return c.evictTenants(now, over)
}

// TenantSnapshot is one tenant's account, as Mooncake's tenant quota
// snapshot and its mooncake_tenant_* series name them.
type TenantSnapshot struct {
	TenantID            string `json:"tenant_id"`
	RequestedQuotaBytes uint64 `json:"requested_quota_bytes"`
	EffectiveQuotaBytes uint64 `json:"effective_quota_bytes"`
	ChargedBytes        int64  `json:"charged_bytes"`
	AdmissionClosed     bool   `json:"admission_closed"`
	OverQuota           bool   `json:"over_quota"`
	HasExplicitPolicy   bool   `json:"has_explicit_policy"`
	// RejectQuotaExceeded and RejectNotRegistered count refused writes;
	// EvictedBytes what tenant-first eviction took.
	RejectQuotaExceeded int64 `json:"-"`
	RejectNotRegistered int64 `json:"-"`
	EvictedBytes        int64 `json:"-"`
}

// Tenants returns every tenant's account, by name, and the capacity the
// shares were computed for (nil without MultiTenants).
func (c *Core) Tenants() ([]TenantSnapshot, uint64) {
	l := c.ledger
	if l == nil {
		return nil, 0
	}
	l.mu.RLock()
	defer l.mu.RUnlock()
	var out []TenantSnapshot
	l.accounts.Range(func(k, v any) bool {
		t, a := k.(string), v.(*tenantAccount)
		q, explicit := l.policy[t]
		share := l.shareOf(t)
		s := TenantSnapshot{TenantID: t, RequestedQuotaBytes: q, EffectiveQuotaBytes: share,
			ChargedBytes: a.charged.Load(), HasExplicitPolicy: explicit,
			AdmissionClosed:     l.policy != nil && !explicit,
			RejectQuotaExceeded: a.rejectQuota.Load(), RejectNotRegistered: a.rejectUnregistered.Load(),
			EvictedBytes: a.evicted.Load()}
		s.OverQuota = l.policy != nil && s.ChargedBytes > int64(share)
		out = append(out, s)
		return true
	})
	slices.SortFunc(out, func(a, b TenantSnapshot) int { return strings.Compare(a.TenantID, b.TenantID) })
	return out, l.capacity
}
