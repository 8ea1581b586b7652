// segments.go defines Segments: the segments a client mounts at run time
// besides the one setup contributes (Mooncake's mount_segment and
// allocate_and_mount_segment): a file's pages mapped at an offset, or host
// memory allocated for the purpose. Each is served by a transfer server of
// its own and named at the master by that server's address; the caller
// knows it by an id the client made up, which survives the remount that
// follows a master restart. Unmounting is immediate or graceful: with a
// grace period the master places nothing new on the segment while its
// objects stay readable, removes it when the period ends, and only then
// does the client let the memory go.

package client

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/memlimit"
	"github.com/gostore/gostore/gostore/transfer"
	"github.com/gostore/gostore/gostore/wire"
)

// AllocAlign is what AllocateAndMount rounds a size up to: Mooncake's
// slab size (16 MiB), so the sizes it reports match the wheel's.
const AllocAlign = 16 << 20

// initAll* are the values Mooncake's init_all passes to its setup.
const (
	initAllHostname = "localhost:12345"
	initAllMetadata = "127.0.0.1:2379"
	initAllBuffer   = 1 << 30
	initAllMaster   = "127.0.0.1:50051"
)

// InitAllConfig is the configuration Mooncake's init_all(protocol,
// device_name, mount_segment_size) sets a client up with: hostname
// localhost:12345, a 1 GiB local buffer, the master at 127.0.0.1:50051.
func InitAllConfig(protocol, deviceName string, segmentSize uint64) Config {
	return Config{LocalHostname: initAllHostname, MetadataServer: initAllMetadata,
		GlobalSegmentSize: segmentSize, LocalBufferSize: initAllBuffer, Protocol: protocol,
		RDMADevices: deviceName, MasterServerAddr: initAllMaster}
}

// drainPoll is how often a client asks whether the master has removed a
// segment whose grace period ended; drainPatience is how long it keeps
// asking before it gives up and keeps the memory until Close.
const (
	drainPoll     = 100 * time.Millisecond
	drainPatience = time.Minute
)

// extraSeg is one segment mounted at run time.
type extraSeg struct {
	handle    string // the caller's id: two decimal uint64s, "N-M"
	allocated bool   // memory allocated for it (else a file's pages)
	name      string // the master's name: host:port of server
	path      string // the file (allocated: "")
	file      fileID // the file's identity (allocated: zero)
	offset    uint64 // where in the file the mapping starts
	size      uint64
	mem       []byte                 // the mapping
	local     *transfer.LocalSegment // allocated: owns mem
	server    *transfer.Server
	exposure  segExposure // its UCX exposure: revoked by release, before mem goes

	// Guarded by extraSegs.mu.
	id         uint64 // the master's ID; a remount changes it
	draining   bool   // a graceful unmount was asked for
	unmounting int    // unmounts asked of the master and not failed: a remount is undone
}

// Segments mounts and unmounts the segments this client adds at run time
// (MountFile, AllocateAndMount, UnmountSegments), remounts them when the
// master forgot them, and lets their memory go once no call copies in or
// out of it and the master let them go; UnmountLocalDisk unmounts the SSD
// tier. It owns the registry of run-time segments (extra). Locks:
// extra.mu around the registry and each segment's id and draining state,
// never across an RPC; core's inFlight write lock while a segment's
// memory is freed (freeExtra), so no call is reading it; each segment's
// exposure lock (segExposure) from its expose to the master's answer.
type Segments struct {
	*core
	extra extraSegs // segments mounted at run time
}

// extraSegs is the client's registry of run-time segments.
type extraSegs struct {
	mu       sync.Mutex
	byHandle map[string]*extraSeg
	closed   bool           // release ran: nothing may be added
	serving  sync.WaitGroup // the servers' Serve goroutines
}

// MountFile mounts size bytes of the file at path, from offset (a multiple
// of the page size), as a segment of this client: objects placed there
// live in the file's pages (MAP_SHARED), so they are in the file as they
// are written. It returns the ids naming the new segments for
// UnmountSegments (one; none when size is 0). A range overlapping one this
// client has mounted from the same file is refused (Mooncake mounts it, and
// two segments then share bytes). The file must not shrink below the range
// while it is mounted: touching pages past its end kills the process
// (SIGBUS), as it would Mooncake's. protocol and location are accepted as
// Mooncake accepts them and change nothing. Failures are ErrInternal, as
// Mooncake's mount_segment reports every failure, with the reason in the
// error and the log; nothing stays mounted or mapped.
func (c *Segments) MountFile(path string, offset, size uint64, protocol, location string) ([]string, error) {
	if err := c.checkOpen(); err != nil {
		return nil, err
	}
	if size == 0 {
		return []string{}, nil
	}
	fail := func(format string, args ...any) ([]string, error) {
		err := wire.Errorf(wire.ErrInternal, format, args...)
		c.log.Error("mount_segment failed", "path", path, "offset", offset, "size", size, "err", err)
		return nil, err
	}
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail("open %s: %v", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fail("fstat %s: %v", path, err)
	}
	fileSize := uint64(max(st.Size, 0))
	if offset > fileSize || size > fileSize-offset {
		return fail("[%d, +%d) is beyond the end of %s (%d bytes)", offset, size, path, fileSize)
	}
	if page := uint64(os.Getpagesize()); offset%page != 0 {
		return fail("offset %d is not a multiple of the page size (%d)", offset, page)
	}
	if size > uint64(maxMapping) || offset > uint64(maxMapping) {
		return fail("%d bytes at %d cannot be mapped", size, offset)
	}
	mem, err := unix.Mmap(fd, int64(offset), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail("mmap %d bytes of %s at %d: %v", size, path, offset, err)
	}
	s := &extraSeg{path: path, file: fileID{dev: uint64(st.Dev), ino: st.Ino}, offset: offset, size: size, mem: mem}
	if other := c.overlapping(s); other != nil {
		unix.Munmap(mem)
		return fail("[%d, +%d) overlaps segment %s, mounted from the same file at [%d, +%d)",
			offset, size, other.handle, other.offset, other.size)
	}
	if err := c.mountExtra(s); err != nil {
		return fail("%v", err)
	}
	c.log.Info("file segment mounted", "id", s.handle, "name", s.name, "path", path, "offset", offset, "size", size,
		"protocol", protocol, "location", location)
	return []string{s.handle}, nil
}

// fileID identifies a file whatever path names it.
type fileID struct{ dev, ino uint64 }

// overlapping returns a mounted segment holding some of the same file
// bytes as s, or nil. Two segments over the same bytes would hand the same
// memory to two objects: Mooncake mounts them anyway; gostore refuses.
func (c *Segments) overlapping(s *extraSeg) *extraSeg {
	c.extra.mu.Lock()
	defer c.extra.mu.Unlock()
	return c.overlappingLocked(s)
}

func (c *Segments) overlappingLocked(s *extraSeg) *extraSeg {
	if s.allocated {
		return nil
	}
	for _, o := range c.extra.byHandle {
		if o != s && !o.allocated && o.file == s.file && s.offset < o.offset+o.size && o.offset < s.offset+s.size {
			return o
		}
	}
	return nil
}

// maxMapping bounds one mapping (an int on this platform).
const maxMapping = int(^uint(0) >> 1)

// AllocateAndMount allocates size bytes of host memory, rounded up to
// AllocAlign, and mounts them as a segment of this client. It returns the
// ids naming the new segments and the bytes allocated. The memory is a
// memfd, so same-host peers map it as they map the setup segment. A size
// beyond the memory this process may still take (memlimit.Check) is refused
// before anything is allocated: the pages are populated at once, and
// taking more would invite the OOM killer. Failures are ErrInternal, as in
// Mooncake, with the reason in the error and the log.
func (c *Segments) AllocateAndMount(size uint64, protocol, location string) ([]string, uint64, error) {
	if err := c.checkOpen(); err != nil {
		return nil, 0, err
	}
	fail := func(format string, args ...any) ([]string, uint64, error) {
		err := wire.Errorf(wire.ErrInternal, format, args...)
		c.log.Error("allocate_and_mount_segment failed", "size", size, "err", err)
		return nil, 0, err
	}
	if size == 0 {
		return fail("size is 0")
	}
	if size > ^uint64(0)-(AllocAlign-1) {
		return fail("%d bytes overflow when rounded up to %d", size, AllocAlign)
	}
	aligned := (size + AllocAlign - 1) / AllocAlign * AllocAlign
	if err := memlimit.Check(memlimit.Ask{Name: "allocate_and_mount_segment", Bytes: aligned}); err != nil {
		return fail("%v", err)
	}
	s := &extraSeg{allocated: true, size: aligned}
	// The memfd is named after the segment, which needs the listener:
	// mountExtra names it and calls back for the memory.
	if err := c.mountExtra(s); err != nil {
		return fail("%v", err)
	}
	c.log.Info("allocated segment mounted", "id", s.handle, "name", s.name, "size", aligned,
		"protocol", protocol, "location", location)
	return []string{s.handle}, aligned, nil
}

// mountExtra gives s a listener, a name, memory when it is allocated, a
// server and an id, mounts it at the master and registers it; on failure
// everything it made is released (s.mem too).
func (c *Segments) mountExtra(s *extraSeg) (err error) {
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	host, _ := splitLocal(c.hostname)
	h, ln, err := listenTransfer(host, c.bindHost, c.log)
	if err != nil {
		return err
	}
	s.name = net.JoinHostPort(h, strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if s.allocated {
		if s.local, err = transfer.NewLocalSegment(s.name, s.size); err != nil {
			ln.Close()
			return err
		}
		s.mem = s.local.Bytes()
	}
	s.server = c.serving(transfer.NewServer(ln, s.mem, c.log))
	s.handle = newSegmentHandle()
	ctx, cancel := c.ctx()
	defer cancel()
	id, err := c.mountAtMaster(ctx, s)
	if err != nil {
		return err
	}
	c.extra.mu.Lock()
	if c.extra.closed { // Close ran meanwhile: the master dropped the client's segments
		c.extra.mu.Unlock()
		return wire.Errorf(wire.ErrInternal, "store is closed")
	}
	if other := c.overlappingLocked(s); other != nil { // a concurrent mount of the same bytes won
		c.extra.mu.Unlock()
		c.master.Call(ctx, wire.OpUnmountSegment, &wire.UnmountReq{ClientID: c.id, Name: s.name}, nil)
		return wire.Errorf(wire.ErrInternal, "the range overlaps segment %s, mounted from the same file meanwhile", other.handle)
	}
	if c.extra.byHandle == nil {
		c.extra.byHandle = make(map[string]*extraSeg)
	}
	s.id = id
	c.extra.byHandle[s.handle] = s
	c.extra.serving.Add(1)
	go func() {
		defer c.extra.serving.Done()
		s.server.Serve()
	}()
	c.extra.mu.Unlock()
	return nil
}

// mountAtMaster mounts s at the master, with its server's grant key and
// (route on) a fresh UCX exposure of its memory, and returns its ID there
// (which the server then expects grants to name). errRevoked once release
// ran: its memory is going or gone.
func (c *Segments) mountAtMaster(ctx context.Context, s *extraSeg) (id uint64, err error) {
	describe := func() (wire.SegmentDesc, error) {
		desc := wire.SegmentDesc{Name: s.name, ClientID: c.id, HostID: transfer.HostID(),
			TransferAddr: s.server.Addr().String(), Size: s.size, Base: uint64(addrOf(s.mem))}
		if s.local != nil {
			desc.ShmPath = s.local.ShmPath()
		}
		return desc, nil
	}
	err = s.exposure.mount(c.ucx, false, c.log, describe, func(desc wire.SegmentDesc) error {
		s.server.SetSegID(0) // a remount may bring a new id: see ownSegment.mountQuiet
		var resp wire.MountResp
		if err := c.master.Call(ctx, wire.OpMountSegment, &wire.MountReq{Seg: desc, GrantKey: s.server.GrantKey()}, &resp); err != nil {
			return err
		}
		s.server.SetSegID(resp.SegID)
		id = resp.SegID
		return nil
	})
	return id, err
}

func newSegmentHandle() string {
	var b [16]byte
	rand.Read(b[:])
	return fmt.Sprintf("%d-%d", binary.LittleEndian.Uint64(b[:8]), binary.LittleEndian.Uint64(b[8:]))
}

// release revokes s's UCX exposure (a mount in progress ends first, and
// none follows), stops its server and lets its memory go. The caller makes
// sure nothing of this process copies in or out of it any more.
func (s *extraSeg) release() {
	s.exposure.revoke()
	if s.server != nil {
		s.server.Close() // waits for the peers' transfers in progress
	}
	if s.local != nil {
		s.local.Close()
	} else if s.mem != nil {
		unix.Munmap(s.mem)
	}
	s.mem = nil
}

// UnmountSegments unmounts the segments named by ids, those MountFile
// returned (allocated false) or those AllocateAndMount returned (true).
// With grace 0 each goes at once, its objects with it, and its memory is
// released. With a grace period the master places nothing new on it and
// keeps its objects readable until the period ends, then removes it; the
// client releases the memory once the master has. Every id is tried; the
// error is the first failure: ErrInternal for an id this client did not
// mount of that kind, ErrInvalidParams for one already being unmounted
// gracefully (as Mooncake answers), or what the master answered.
func (c *Segments) UnmountSegments(ids []string, grace time.Duration, allocated bool) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	var first error
	note := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, h := range ids {
		c.extra.mu.Lock()
		s := c.extra.byHandle[h]
		draining := s != nil && s.draining
		if s != nil && !draining && grace > 0 {
			s.draining = true // claimed: a second unmount of it is refused from now on
		}
		c.extra.mu.Unlock()
		switch {
		case s == nil || s.allocated != allocated:
			kind := "mount_segment"
			if allocated {
				kind = "allocate_and_mount_segment"
			}
			err := wire.Errorf(wire.ErrInternal, "%q names no segment this client's %s returned", h, kind)
			c.log.Error("unmount failed", "id", h, "err", err)
			note(err)
			continue
		case draining:
			err := wire.Errorf(wire.ErrInvalidParams, "segment %s is already being unmounted", h)
			c.log.Error("unmount failed", "id", h, "err", err)
			note(err)
			continue
		}
		if err := c.unmountOne(s, grace); err != nil {
			c.log.Error("unmount failed", "id", h, "name", s.name, "err", err)
			note(err)
		}
	}
	return first
}

// unmountOne asks the master to unmount s and releases it (at once), or
// (grace; s was marked draining) waits for the master in the background.
func (c *Segments) unmountOne(s *extraSeg, grace time.Duration) error {
	ctx, cancel := c.ctx()
	defer cancel()
	req := &wire.UnmountReq{ClientID: c.id, Name: s.name, GraceMs: uint64(grace / time.Millisecond)}
	if grace > 0 && req.GraceMs == 0 {
		req.GraceMs = 1
	}
	c.extra.mu.Lock()
	s.unmounting++ // from here a heartbeat's remount of s is undone (remountOne)
	c.extra.mu.Unlock()
	err := c.master.Call(ctx, wire.OpUnmountSegment, req, nil)
	if wire.CodeOf(err) == wire.ErrSegmentNotFound {
		// The master no longer has it (it restarted and we have not
		// remounted yet): it is gone, as the caller wants.
		err, req.GraceMs = nil, 0
	}
	if err != nil {
		c.extra.mu.Lock()
		s.unmounting--
		if grace > 0 {
			s.draining = false // still mounted: it may be unmounted again
		}
		c.extra.mu.Unlock()
		return err
	}
	if req.GraceMs == 0 {
		c.freeExtra(s)
		c.log.Info("segment unmounted", "id", s.handle, "name", s.name)
		return nil
	}
	c.log.Info("segment draining", "id", s.handle, "name", s.name, "grace", grace)
	go c.awaitRemoval(s, grace)
	return nil
}

// awaitRemoval waits out s's grace period, then for the master to have
// removed it, and releases it. Not one of c.wg's goroutines: it may wait
// for inFlight, which Close holds while it waits for those.
func (c *Segments) awaitRemoval(s *extraSeg, grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.stop:
		return // release frees it
	case <-t.C:
	}
	deadline := time.Now().Add(drainPatience)
	for {
		if c.masterDropped(s) {
			c.freeExtra(s)
			c.log.Info("segment unmounted after its grace period", "id", s.handle, "name", s.name)
			return
		}
		if time.Now().After(deadline) {
			c.log.Warn("the master still lists a segment past its grace period; keeping its memory until close",
				"id", s.handle, "name", s.name)
			return
		}
		select {
		case <-c.stop:
			return
		case <-time.After(drainPoll):
		}
	}
}

// masterDropped reports whether the master no longer lists s.
func (c *Segments) masterDropped(s *extraSeg) bool {
	c.extra.mu.Lock()
	id := s.id
	c.extra.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var resp wire.QuerySegmentsResp
	if err := c.master.Call(ctx, wire.OpQuerySegments, &wire.QuerySegmentsReq{IDs: []uint64{id}}, &resp); err != nil {
		return false
	}
	for _, d := range resp.Segs {
		if d.Name == s.name { // IDs restart with a restarted master: the name tells
			return false
		}
	}
	return true
}

// freeExtra forgets s and releases it once no call of this process is
// copying in or out of any segment; after Close it does nothing (release
// freed everything).
func (c *Segments) freeExtra(s *extraSeg) {
	c.inFlight.Lock()
	defer c.inFlight.Unlock()
	if c.closed.Load() {
		return
	}
	c.extra.mu.Lock()
	if c.extra.byHandle[s.handle] != s {
		c.extra.mu.Unlock()
		return
	}
	delete(c.extra.byHandle, s.handle)
	id := s.id
	c.extra.mu.Unlock()
	c.peers.forget(id)
	c.engine.Forget(id) // our own mapping of an allocated segment's memfd, if any
	s.release()
}

// remountExtra mounts the run-time segments again at a master that forgot
// this client (the heartbeat's rejoin); draining ones are left to
// awaitRemoval, which finds them gone.
func (c *Segments) remountExtra(ctx context.Context) error {
	c.extra.mu.Lock()
	var todo []*extraSeg
	for _, s := range c.extra.byHandle {
		if !s.draining {
			todo = append(todo, s)
		}
	}
	c.extra.mu.Unlock()
	for _, s := range todo {
		if err := c.remountOne(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// remountOne mounts s again for remountExtra. An unmount of s that began
// meanwhile wins: after one asked the master, a remount that got through
// is undone at the master; after its release, none starts (errRevoked),
// so its memory is never exposed or mounted again.
func (c *Segments) remountOne(ctx context.Context, s *extraSeg) error {
	id, err := c.mountAtMaster(ctx, s)
	if err == errRevoked {
		return nil
	}
	if err != nil {
		c.log.Error("remount of a segment failed", "id", s.handle, "name", s.name, "err", err)
		return err
	}
	c.extra.mu.Lock()
	old := s.id
	s.id = id
	gone := c.extra.byHandle[s.handle] != s || s.unmounting > 0
	c.extra.mu.Unlock()
	if gone { // unmounted meanwhile: its memory is going or gone
		c.master.Call(ctx, wire.OpUnmountSegment, &wire.UnmountReq{ClientID: c.id, Name: s.name}, nil)
		return nil
	}
	// What this process cached of s is stale even under the same id: the
	// desc names the new exposure.
	c.peers.forget(old)
	c.engine.Forget(old)
	return nil
}

// closeExtra releases every run-time segment (Close; nothing copies any
// more) and refuses new ones.
func (c *Segments) closeExtra() {
	c.extra.mu.Lock()
	c.extra.closed = true
	segs := c.extra.byHandle
	c.extra.byHandle = nil
	c.extra.mu.Unlock()
	for _, s := range segs {
		s.release()
	}
	c.extra.serving.Wait()
}

// UnmountLocalDisk takes this client's SSD tier out of the pool (Mooncake's
// unmount_local_disk_segment): the master forgets its disk copies (objects
// that lived only there disappear) and stops handing it offloads, the tier
// stops asking for them, and the call then waits grace, during which
// readers already sent to the tier's copies are still served (and after,
// until Close). The files stay in the directory; the next client that
// opens it deletes them. Without a tier there is nothing to do: nil, as in
// Mooncake. The master's answer otherwise (-1300 without its SSD tier).
func (c *Segments) UnmountLocalDisk(grace time.Duration) error {
	if err := c.checkOpen(); err != nil {
		return err
	}
	if c.ssd == nil {
		c.log.Warn("unmount_local_disk_segment: this client has no SSD tier; nothing to do")
		return nil
	}
	ctx, cancel := c.ctx()
	err := c.master.Call(ctx, wire.OpUnmountLocalDisk, &wire.UnmountLocalDiskReq{ClientID: c.id}, nil)
	cancel()
	if err != nil {
		c.log.Error("unmount_local_disk_segment failed", "err", err)
		return err
	}
	c.ssd.Unmount()
	c.log.Info("SSD tier unmounted from the pool", "grace", grace)
	if grace > 0 {
		t := time.NewTimer(grace)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.stop:
		}
	}
	return nil
}
