package wire

// Op names a master RPC. Per-key operations exist only in batch form on the
// wire: a single put is a batch of one, so one code path serves both.
type Op uint16

const (
	OpPing Op = iota + 1
	OpMountSegment
	OpUnmountSegment
	OpQuerySegments
	OpPutStart
	OpPutEnd
	OpPutRevoke
	OpGetReplicas
	OpExist
	OpRemove
	OpRemoveByRegex
	OpRemoveAll
	OpUpsertStart
	OpReadDone
	OpCreateTask
	OpTaskDone
	OpQueryTask
	OpOffloadHeartbeat
	OpNotifyOffloaded
	OpEvictDiskReplicas
	OpRecoverDisk
	OpPlanJoin
	OpPlanMembers
	OpEvictUntil
	OpClientLeave
	OpReplicaClear
	OpUnmountLocalDisk
	OpPutUnhold
	opEnd
)

// Client-to-client RPCs, served by a client's SSD tier (never by the
// master): the load path of an object that only exists on a disk. They
// share the frame format and number space, above the master's ops.
const (
	OpStageOffloaded Op = 48 + iota
	OpReleaseStaged
	opClientEnd
)

var opNames = [...]string{"", "Ping", "MountSegment", "UnmountSegment", "QuerySegments",
	"PutStart", "PutEnd", "PutRevoke", "GetReplicas", "Exist", "Remove", "RemoveByRegex", "RemoveAll",
	"UpsertStart", "ReadDone", "CreateTask", "TaskDone", "QueryTask",
	"OffloadHeartbeat", "NotifyOffloaded", "EvictDiskReplicas", "RecoverDisk",
	"PlanJoin", "PlanMembers", "EvictUntil", "ClientLeave", "ReplicaClear", "UnmountLocalDisk",
	"PutUnhold"}

var clientOpNames = [...]string{"StageOffloaded", "ReleaseStaged"}

// Valid reports whether op is a master RPC this version of the protocol knows.
func (op Op) Valid() bool { return op > 0 && op < opEnd }

// ValidClient reports whether op is a client-to-client RPC.
func (op Op) ValidClient() bool { return op >= OpStageOffloaded && op < opClientEnd }

func (op Op) String() string {
	switch {
	case op.Valid():
		return opNames[op]
	case op.ValidClient():
		return clientOpNames[op-OpStageOffloaded]
	}
	return "Op(?)"
}

// SegmentDesc describes memory a client contributes to the pool and how a
// peer reaches it.
type SegmentDesc struct {
	_msgpack struct{} `msgpack:",as_array"`
	// ID is assigned by the master at mount and never reused while it runs,
	// so a peer's cached mapping of an old segment of the same name is never
	// mistaken for the new one.
	ID       uint64
	Name     string // "host:port", the owner's get_hostname()
	ClientID string
	Size     uint64
	// HostID identifies a kernel and network namespace; peers with the same
	// HostID may map ShmPath instead of using TCP.
	HostID       string
	ShmPath      string // e.g. /proc/<pid>/fd/<n> of the owner's memfd
	TransferAddr string // "ip:port" of the owner's transfer server
	// Offload is set when the owner runs an SSD tier: with the master's
	// tier on, objects on this segment are evicted only once persisted.
	Offload bool
	// Location is "" for host memory or "cuda:N" for GPU memory, which a
	// peer on the same host maps through its CUDA IPC handle IPC. N is the
	// owner's device number; GPUPCI names the GPU for peers that number
	// devices differently (CUDA_VISIBLE_DEVICES).
	Location string
	IPC      []byte
	GPUPCI   string
	// Base is the owner's address of the segment's first byte (a device
	// address for a GPU segment): replica descriptors report Base + offset
	// as Mooncake does. Nothing but the owner may dereference it.
	Base uint64
	// UCX is the owner's UCX exposure of the segment (gostore/ucx
	// Exposure.Desc: worker address and remote key), empty when the owner
	// runs no UCX route. It is a capability: peers the master
	// authenticated receive it, no listing prints it (json "-"). Last, so
	// records written before it decode with it empty.
	UCX []byte `json:"-"`
}

// ReplicaConfig is the wire form of Python's ReplicateConfig.
type ReplicaConfig struct {
	_msgpack   struct{} `msgpack:",as_array"`
	ReplicaNum int
	SoftPin    bool
	HardPin    bool
	Preferred  []string // segment names tried first, in order
	SameNode   bool
}

// Replica locates one copy of an object: a byte range of a segment.
type Replica struct {
	_msgpack struct{} `msgpack:",as_array"`
	SegID    uint64
	Offset   uint64
	// Grant is the capability (gostore/grant) the segment's transfer
	// server asks for: to write the replica (PutStart, UpsertStart, a
	// task's targets) or read it (GetReplicas, a task's sources). nil
	// where the master grants nothing (Peek; a segment whose owner has
	// not given it a key yet).
	Grant []byte
}

type PingReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
}

type PingResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	// Known is false when the master does not know the client (it restarted,
	// or the client was silent past client_ttl); the client remounts.
	Known bool
	// OffloadWork: the master has objects for the client's SSD tier to
	// persist or drop; the client runs its offload heartbeat now.
	OffloadWork bool
	// OffloadEnabled: the master accepts SSD tiers (--enable_offload). A
	// client asked for a tier refuses to start without it: its disk would
	// never receive anything.
	OffloadEnabled bool
	// MultiTenants: the master runs --enable_multi_tenants; a client of
	// another tenant than the default one finds its disk copies under
	// their scoped keys (ScopeKey). Sent only when true (tenantcodec.go).
	MultiTenants bool
	// Tasks are replica tasks the master started for the client to run
	// (hot-object replicas, --dynamic_replication_mode=enforce); each
	// ends with TaskDone.
	Tasks []AssignedTask
}

// AssignedTask is a replica task the master started: copy Key from one of
// Plan.Sources to Plan.Targets, then TaskDone(Plan.ID).
type AssignedTask struct {
	_msgpack struct{} `msgpack:",as_array"`
	Key      string
	Plan     TaskPlan
}

type MountReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	Seg      SegmentDesc
	// GrantKey is the segment's key (gostore/grant), which the master
	// signs the segment's grants with. It is not part of Seg: other
	// clients receive SegmentDescs, and nobody but the owner and the
	// master may hold the key.
	GrantKey []byte
}

type MountResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	SegID    uint64
}

type UnmountReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	Name     string
	// GraceMs > 0 asks for a graceful unmount: the segment takes no new
	// replicas at once, keeps serving its objects, and goes after GraceMs.
	GraceMs uint64
}

// LeaveReq tells the master a client closed: its segments go at once and
// it is not counted as expired later.
type LeaveReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
}

// UnmountLocalDiskReq takes a client's SSD tier out of the pool; the
// client and its memory segments stay.
type UnmountLocalDiskReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
}

type QuerySegmentsReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	IDs      []uint64
}

type QuerySegmentsResp struct {
	_msgpack struct{}      `msgpack:",as_array"`
	Segs     []SegmentDesc // only the segments still mounted
}

type PutStartReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	Keys     []string
	Sizes    []uint64
	Config   ReplicaConfig
	HostID   string // the writer's host, for ReplicaConfig.SameNode
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

// PutStartResult is the outcome for one key: OK with the replicas to write,
// ErrObjectAlreadyExists for a key already stored, or another error.
type PutStartResult struct {
	_msgpack struct{} `msgpack:",as_array"`
	Code     Code
	Replicas []Replica
	// Epoch names this write; PutEnd/PutRevoke quote it so that a write
	// preempted by a newer one (same client or not) cannot end the newer.
	Epoch uint64
	// NoSpace explains an ErrNoAvailableHandle; nil for other outcomes
	// (a pointer keeps the results of successful puts small).
	NoSpace *NoSpace
}

// NoSpace says why a key found no room (for the writer's log), whether
// waiting may bring it, how many eviction passes the master had run (a
// writer told SpaceUnknown waits for the next one), and a count of the
// master's events that free room (evictions, disk copies, removals,
// revoked or reclaimed writes, departed clients): a writer told
// SpaceComing stops waiting when it stops moving.
type NoSpace struct {
	_msgpack struct{} `msgpack:",as_array"`
	Why      string
	Space    SpaceOutlook
	Passes   uint64
	Progress uint64
}

// SpaceOutlook tells a writer refused for lack of space whether to wait.
type SpaceOutlook uint8

const (
	// SpaceNone: nothing will free room (no segment, or an object larger
	// than any segment): fail now.
	SpaceNone SpaceOutlook = iota
	// SpaceUnknown: the last eviction pass found nothing to free; one is
	// due now that may find more: retry until it has run.
	SpaceUnknown
	// SpaceComing: eviction is freeing room, or objects wait for their
	// disk copies to be evicted; retry until the writer's deadline.
	SpaceComing
)

type PutStartResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Results  []PutStartResult
}

// KeysReq serves PutEnd, PutRevoke, PutUnhold, GetReplicas, Exist and
// ReadDone.
type KeysReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	Keys     []string
	// PutEnd/PutRevoke: the epochs PutStart returned; ReadDone: the epochs
	// GetReplicas returned.
	Epochs []uint64
	// ForRead (GetReplicas): the caller will transfer the bytes; the
	// object counts it as a reader until ReadDone or the lease ends.
	ForRead bool
	// Peek (GetReplicas): locate the replicas without using the object
	// (no lease, no reader, no recency): the SSD tier's reads and the
	// plan API's look at a key.
	Peek bool
	// Stored (with Peek; not sent): Keys are stored keys (the SSD
	// tier's, any tenant's), so the client sends no tenant with them and
	// the master scopes nothing.
	Stored bool `msgpack:"-"`
	// HoldMS (PutEnd): the call that wrote these objects goes on writing
	// (it waits for room for the rest): keep them from eviction, unless
	// they have a disk copy, for up to this long or until PutUnhold.
	// (PutUnhold): end those holds this much later (0: now).
	HoldMS uint64
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

// ReplicaClearReq asks the master to drop replicas of objects ClientID
// wrote: all of each (Segment "") or those on Segment (a segment name).
type ReplicaClearReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	Keys     []string
	Segment  string
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

// KeysResp is a list of keys (ReplicaClear: the keys cleared).
type KeysResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Keys     []string
}

type CodesResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Codes    []Code
}

type GetResult struct {
	_msgpack struct{} `msgpack:",as_array"`
	Code     Code
	Size     uint64
	Replicas []Replica // complete replicas only
	// LeaseMS is the lease just granted: a transfer that ends later than
	// this after the request was sent may have read reclaimed memory.
	LeaseMS int64
	// Epoch of the object read; ReadDone quotes it so that a late ReadDone
	// never ends a read of a newer object under the same key.
	Epoch uint64
	// Disk is the endpoint of the client holding a LOCAL_DISK copy ("" if
	// none); a reader falls back to it when Replicas is empty.
	Disk string
	// Placed names the object's replica set: the epoch of its write until
	// a task adds a replica, then a fresh name per addition (and after a
	// master restart), drawn from a random start so that no name comes
	// back. A reader that saw an object under the same Epoch and Placed
	// knows its replicas held its bytes all along (client/spots.go).
	Placed uint64
}

type GetReplicasResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Results  []GetResult
}

type RemoveReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	Keys     []string
	Force    bool
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

type RemoveByRegexReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	Pattern  string
	Force    bool
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

type RemoveAllReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	Force    bool
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

type CountResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	N        int64
}

// TaskKind is a replica task's kind.
type TaskKind uint8

const (
	TaskCopy TaskKind = iota + 1 // add replicas on target segments
	TaskMove                     // add a replica on the target, drop the source's
)

// CreateTaskReq asks for a copy (Targets) or move (Source → Targets[0]).
// The calling client executes the task and reports with TaskDone.
type CreateTaskReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	Kind     TaskKind
	Key      string
	Source   string // move: the segment to take the replica from
	Targets  []string
	// Tenant is the caller's tenant (Tenanted); "" is the default one.
	Tenant string
}

// TaskPlan is what the executing client must do: read Size bytes from one
// of Sources and write them to every Target.
type TaskPlan struct {
	_msgpack struct{} `msgpack:",as_array"`
	ID       string
	Size     uint64
	Sources  []Replica
	Targets  []Replica
}

type TaskDoneReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	ID       string
	Code     Code // OK, or why the transfer failed
}

type QueryTaskReq struct {
	ID     string
	Tenant string // the caller's tenant ("": default); last, sent only when set (tenantcodec.go)
}

// TaskInfo describes a task; Status is PENDING, PROCESSING, SUCCESS or FAILED.
type TaskInfo struct {
	_msgpack struct{} `msgpack:",as_array"`
	ID       string
	Key      string
	Kind     TaskKind
	Status   string
	Error    string
}

// OffloadHeartbeatReq asks which objects the client should persist and
// which copies in its directory (StorageID) it should delete.
type OffloadHeartbeatReq struct {
	_msgpack  struct{} `msgpack:",as_array"`
	ClientID  string
	Max       int
	StorageID string
}

// OffloadHeartbeatResp lists the objects to persist (by key and size) and
// the keys whose disk copies the master no longer refers to (removed or
// rewritten objects): the client deletes those before it writes new ones.
type OffloadHeartbeatResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Keys     []string
	Sizes    []uint64
	Drop     []string
	// Promote lists objects whose disk copy the client holds and that
	// reads want back in memory (the master's --promotion_on_hit).
	Promote []PromotionTask
}

// PromotionTask asks the holder of Key's disk copy to load it into Target,
// a range of one of its own host-memory segments, and to end task ID with
// TaskDone: OK makes Target a replica of the object.
type PromotionTask struct {
	_msgpack struct{} `msgpack:",as_array"`
	ID       string
	Key      string
	Size     uint64
	Target   Replica
}

// NotifyOffloadedReq reports objects now held in the client's SSD tier,
// reachable at Endpoint. StorageID names the directory they live in (it
// survives restarts); Epochs, when given, are those of the reads the bytes
// came from, so a copy of a since-replaced object is refused.
type NotifyOffloadedReq struct {
	_msgpack  struct{} `msgpack:",as_array"`
	ClientID  string
	Endpoint  string
	Keys      []string
	Sizes     []uint64
	StorageID string
	Epochs    []uint64
}

// RecoverDiskReq re-registers, after a restart, the objects a client found
// in its SSD tier: a missing key comes back as a disk-only object; a key
// whose disk copy was in the same StorageID is rebound to the new process;
// any other key is -702 (the client deletes its stale copy).
type RecoverDiskReq struct {
	_msgpack  struct{} `msgpack:",as_array"`
	ClientID  string
	Endpoint  string
	StorageID string
	Keys      []string
	Sizes     []uint64
}

// StageReq (client to client) asks the owner of disk copies to read them
// into its staging buffer; Sizes are those the master reported.
type StageReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	Keys     []string
	Sizes    []uint64
}

// StageResp locates the staged bytes: Codes[i] is OK with the object at
// Offsets[i] of Buffer, or why it could not be staged. The caller pulls
// the bytes with the transfer engine and then sends ReleaseStaged(BatchID);
// the owner reclaims the space by itself GCTTLMS after staging.
type StageResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	BatchID  uint64
	Codes    []Code
	Offsets  []uint64
	Buffer   SegmentDesc
	GCTTLMS  int64
	// Grants[i] lets the caller read the object at Offsets[i] from the
	// staging buffer (the holder mints them with the buffer's key).
	Grants [][]byte
}

type ReleaseStagedReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	BatchID  uint64
}

// PlanJoinReq makes the caller's segment a member of the plan API.
type PlanJoinReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	ClientID string
	Segment  string
}

type PlanJoinResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Rank     int
}

// PlanMember is a member of the plan API: its rank and segment, and the
// bytes of the segment in use.
type PlanMember struct {
	_msgpack struct{} `msgpack:",as_array"`
	Rank     int
	Seg      SegmentDesc
	Used     uint64
}

type PlanMembersReq struct {
	_msgpack struct{} `msgpack:",as_array"`
}

type PlanMembersResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Members  []PlanMember
}

// EvictUntilReq asks for eviction until the pool's usage is below Ratio.
type EvictUntilReq struct {
	_msgpack struct{} `msgpack:",as_array"`
	Ratio    float64
}

type EvictUntilResp struct {
	_msgpack struct{} `msgpack:",as_array"`
	Objects  int
	Bytes    uint64
	Usage    float64
}
