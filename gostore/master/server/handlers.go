// handlers.go defines the RPC handlers: register installs one per op of
// the protocol, a step per role (clients, segments, writes, reads,
// removals, tasks, the SSD tier, plans). Each handler calls the core
// (which takes its own locks), counts the call for /metrics and logs
// what an operator should see; none holds a lock of the server's.

package server

import (
	"time"

	"github.com/gostore/gostore/gostore/rpc"
	"github.com/gostore/gostore/gostore/wire"
)

// maxGraceMs caps a graceful unmount's grace period (a century) so that
// it cannot overflow a time.Duration.
const maxGraceMs = 100 * 365 * 24 * 3600 * 1000

// register installs the handler of every op.
func (s *Server) register() {
	s.registerClients()
	s.registerSegments()
	s.registerWrites()
	s.registerReads()
	s.registerRemovals()
	s.registerTasks()
	s.registerDisks()
	s.registerPlans()
}

// registerClients: a client's pings and its leaving.
func (s *Server) registerClients() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpPing, func(r *wire.PingReq) (*wire.PingResp, error) {
		mc.ping.call(nil)
		return &wire.PingResp{Known: c.Ping(r.ClientID), OffloadWork: c.OffloadPending(r.ClientID),
			OffloadEnabled: s.opts.EnableOffload, MultiTenants: s.opts.EnableMultiTenants,
			Tasks: c.TakeAssignedTasks(r.ClientID)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpClientLeave, func(r *wire.LeaveReq) (*struct{}, error) {
		if c.ClientLeave(r.ClientID) {
			s.log.Info("client left", "client", r.ClientID)
		}
		return &struct{}{}, nil
	})
}

// registerSegments: mounts and unmounts of memory segments and of a
// client's SSD tier, and queries of segments.
func (s *Server) registerSegments() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpMountSegment, s.mount)
	rpc.HandleFunc(s.rpc, wire.OpUnmountSegment, func(r *wire.UnmountReq) (*struct{}, error) {
		grace := time.Duration(min(r.GraceMs, maxGraceMs)) * time.Millisecond
		err := c.DrainSegment(r.ClientID, r.Name, grace)
		mc.unmount.call(err)
		switch {
		case err != nil:
		case grace > 0:
			s.log.Info("segment draining: unmounted when its grace period ends", "name", r.Name, "client", r.ClientID, "grace", grace)
		default:
			s.log.Info("segment unmounted", "name", r.Name, "client", r.ClientID)
		}
		return &struct{}{}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpUnmountLocalDisk, func(r *wire.UnmountLocalDiskReq) (*struct{}, error) {
		err := c.UnmountLocalDisk(r.ClientID)
		if err == nil {
			s.log.Info("SSD tier unmounted: its disk copies are forgotten", "client", r.ClientID)
		}
		return &struct{}{}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpQuerySegments, func(r *wire.QuerySegmentsReq) (*wire.QuerySegmentsResp, error) {
		return &wire.QuerySegmentsResp{Segs: c.QuerySegments(r.IDs)}, nil
	})
}

// mount answers MountSegment, logging a takeover and how the mount ended.
func (s *Server) mount(r *wire.MountReq) (*wire.MountResp, error) {
	res, err := s.core.Mount(r.Seg, r.GrantKey)
	s.metrics.mc.mount.call(err)
	if res.TookOver != "" {
		s.log.Warn("segment taken over: its holder was silent (dead) and a new client has its name; the holder's "+
			"memory objects are dropped, its disk copies wait for the new client to claim them",
			"name", r.Seg.Name, "dead_client", res.TookOver, "silent", res.Silent.Round(time.Millisecond), "client", r.Seg.ClientID)
	}
	switch {
	case err == nil:
		s.log.Info("segment mounted", "name", r.Seg.Name, "id", res.ID, "size", r.Seg.Size, "client", r.Seg.ClientID)
	case wire.CodeOf(err) == wire.ErrSegmentAlreadyExists:
		// Debug: a client asks again for a while (its setup's takeover
		// wait) and logs the refusal itself, naming the holder.
		s.log.Debug("mount refused", "client", r.Seg.ClientID, "err", err)
	case wire.CodeOf(err) == wire.ErrInvalidParams:
		s.log.Warn("mount refused", "name", r.Seg.Name, "client", r.Seg.ClientID, "err", err)
	}
	return &wire.MountResp{SegID: res.ID}, err
}

// registerWrites: a put's or upsert's start, end, hold and revoke.
func (s *Server) registerWrites() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpPutStart, func(r *wire.PutStartReq) (*wire.PutStartResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		res, err := c.PutStart(r.ClientID, r.HostID, r.Keys, r.Sizes, r.Config)
		mc.putStarted(r, res, err)
		return s.startWrites(res, err)
	})
	rpc.HandleFunc(s.rpc, wire.OpPutEnd, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		codes := c.PutEndHold(r.ClientID, r.Keys, r.Epochs, holdOf(r))
		mc.putEnd.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpPutUnhold, func(r *wire.KeysReq) (*struct{}, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		c.PutUnhold(r.ClientID, r.Keys, r.Epochs, holdOf(r))
		return &struct{}{}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpPutRevoke, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		codes := c.PutRevoke(r.ClientID, r.Keys, r.Epochs)
		mc.putRevoke.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpUpsertStart, func(r *wire.PutStartReq) (*wire.PutStartResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		return s.startWrites(c.UpsertStart(r.ClientID, r.HostID, r.Keys, r.Sizes, r.Config))
	})
}

// startWrites answers PutStart and UpsertStart, and asks for an eviction
// pass at once when the core wants one (a key was refused for room that
// eviction may free) instead of at the next tick.
func (s *Server) startWrites(res []wire.PutStartResult, err error) (*wire.PutStartResp, error) {
	if s.core.EvictionDue() {
		select {
		case s.evictNow <- struct{}{}:
		default:
		}
	}
	return &wire.PutStartResp{Results: res}, err
}

// holdOf is a request's HoldMS as a Duration. The core bounds a hold by
// PutStartDiscardTimeout; the hour here only keeps a peer's number from
// overflowing.
func holdOf(r *wire.KeysReq) time.Duration {
	return time.Duration(min(r.HoldMS, uint64(time.Hour/time.Millisecond))) * time.Millisecond
}

// registerReads: where keys' replicas are, whether keys exist, and the
// end of a read.
func (s *Server) registerReads() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpGetReplicas, func(r *wire.KeysReq) (*wire.GetReplicasResp, error) {
		if r.Peek {
			// A peek naming a tenant is the plan API's, of the caller's
			// keys: scoped. One naming none is the default tenant's or
			// the SSD tier's, whose keys are stored keys already (the
			// tenant is the client's claim: this is no access control).
			if r.Tenant != "" {
				if err := s.scope(r.Tenant, r.Keys); err != nil {
					return nil, err
				}
			}
			return &wire.GetReplicasResp{Results: c.PeekReplicas(r.Keys)}, nil
		}
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		res := c.GetReplicas(r.Keys, r.ForRead)
		mc.got(res) // peeks are the SSD tier's, not gets
		return &wire.GetReplicasResp{Results: res}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpExist, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		codes := c.Exist(r.Keys)
		mc.exist.codes(codes, existFailed)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpReadDone, func(r *wire.KeysReq) (*struct{}, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		c.ReadDone(r.Keys, r.Epochs)
		return &struct{}{}, nil
	})
}

// registerRemovals: what takes objects or replicas out, by key, by
// pattern, all of them, or by eviction down to a usage ratio.
func (s *Server) registerRemovals() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpRemove, func(r *wire.RemoveReq) (*wire.CodesResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		codes := c.Remove(r.Keys, r.Force)
		mc.remove.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpReplicaClear, func(r *wire.ReplicaClearReq) (*wire.KeysResp, error) {
		if err := s.scope(r.Tenant, r.Keys); err != nil {
			return nil, err
		}
		cleared := c.ReplicaClear(r.ClientID, r.Keys, r.Segment)
		s.unscope(cleared)
		return &wire.KeysResp{Keys: cleared}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpRemoveByRegex, func(r *wire.RemoveByRegexReq) (*wire.CountResp, error) {
		t, err := s.tenantOf(r.Tenant)
		if err != nil {
			return nil, err
		}
		n, err := c.RemoveByRegexOf(t, r.Pattern, r.Force)
		mc.removeRegex.call(err)
		return &wire.CountResp{N: n}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpRemoveAll, func(r *wire.RemoveAllReq) (*wire.CountResp, error) {
		t, err := s.tenantOf(r.Tenant)
		mc.removeAll.call(err)
		if err != nil {
			return nil, err
		}
		return &wire.CountResp{N: c.RemoveAllOf(t, r.Force)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpEvictUntil, func(r *wire.EvictUntilReq) (*wire.EvictUntilResp, error) {
		if !(r.Ratio >= 0 && r.Ratio <= 1) {
			return nil, wire.Errorf(wire.ErrInvalidParams, "usage ratio %v is not in [0, 1]", r.Ratio)
		}
		if c.TenantPolicyInForce() {
			// It evicts from the whole pool: one tenant's call would take
			// every tenant's objects, whatever their shares.
			err := wire.Errorf(wire.ErrInvalidParams, "evict_until is refused under a tenant quota policy (it would evict every tenant's objects)")
			s.log.Warn("evict_until refused", "err", err)
			return nil, err
		}
		res, usage := c.EvictUntil(r.Ratio)
		return &wire.EvictUntilResp{Objects: res.Objects, Bytes: res.Bytes, Usage: usage}, nil
	})
}

// registerTasks: copy and move tasks, their end and their state.
func (s *Server) registerTasks() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpCreateTask, func(r *wire.CreateTaskReq) (*wire.TaskPlan, error) {
		t, err := s.tenantOf(r.Tenant)
		if err != nil {
			return nil, err
		}
		if t != "" {
			r.Key = wire.ScopeKey(t, r.Key)
		}
		plan, err := c.CreateTask(*r)
		if r.Kind == wire.TaskMove {
			mc.moveTask.call(err)
		} else {
			mc.copyTask.call(err)
		}
		return &plan, err
	})
	rpc.HandleFunc(s.rpc, wire.OpTaskDone, func(r *wire.TaskDoneReq) (*struct{}, error) {
		err := c.TaskDone(r.ClientID, r.ID, r.Code)
		mc.updateTask.call(err)
		return &struct{}{}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpQueryTask, func(r *wire.QueryTaskReq) (*wire.TaskInfo, error) {
		t, err := s.tenantOf(r.Tenant)
		if err != nil {
			return nil, err
		}
		info, err := c.QueryTask(r.ID)
		if t != "" && err == nil {
			var owner string
			if owner, info.Key = wire.SplitScoped(info.Key); owner != t {
				// Another tenant's task is not the caller's to see.
				info, err = wire.TaskInfo{}, wire.Errorf(wire.ErrObjectNoReplicationTask, "no task %q", r.ID)
			}
		}
		mc.queryTask.call(err)
		return &info, err
	})
}

// registerDisks: the SSD tier's offload work, its copies written or
// recovered, and disk copies evicted.
func (s *Server) registerDisks() {
	c, mc := s.core, s.metrics.mc
	rpc.HandleFunc(s.rpc, wire.OpOffloadHeartbeat, func(r *wire.OffloadHeartbeatReq) (*wire.OffloadHeartbeatResp, error) {
		keys, sizes, drop := c.OffloadHeartbeat(r.ClientID, r.StorageID, r.Max)
		return &wire.OffloadHeartbeatResp{Keys: keys, Sizes: sizes, Drop: drop, Promote: c.PromotionHeartbeat(r.ClientID)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpNotifyOffloaded, func(r *wire.NotifyOffloadedReq) (*wire.CodesResp, error) {
		return &wire.CodesResp{Codes: c.NotifyOffloaded(r.ClientID, r.Endpoint, r.StorageID, r.Keys, r.Sizes, r.Epochs)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpRecoverDisk, func(r *wire.RecoverDiskReq) (*wire.CodesResp, error) {
		return &wire.CodesResp{Codes: c.RecoverDisk(r.ClientID, r.Endpoint, r.StorageID, r.Keys, r.Sizes)}, nil
	})
	rpc.HandleFunc(s.rpc, wire.OpEvictDiskReplicas, func(r *wire.KeysReq) (*wire.CodesResp, error) {
		codes := c.EvictDiskReplicas(r.ClientID, r.Keys)
		mc.evictDisk.codes(codes, notOK)
		return &wire.CodesResp{Codes: codes}, nil
	})
}

// registerPlans: the plan API's membership (gostore/plan).
func (s *Server) registerPlans() {
	c := s.core
	rpc.HandleFunc(s.rpc, wire.OpPlanJoin, func(r *wire.PlanJoinReq) (*wire.PlanJoinResp, error) {
		rank, err := c.PlanJoin(r.ClientID, r.Segment)
		return &wire.PlanJoinResp{Rank: rank}, err
	})
	rpc.HandleFunc(s.rpc, wire.OpPlanMembers, func(*wire.PlanMembersReq) (*wire.PlanMembersResp, error) {
		return &wire.PlanMembersResp{Members: c.PlanMembers()}, nil
	})
}
