// hostid.go defines HostID, the identity of "the same host" for shared memory.

package transfer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
)

var hostID = sync.OnceValue(computeHostID)

// HostID identifies the kernel and namespaces this process runs in. Two
// processes with the same HostID can map each other's ShmPath: it is the
// kernel boot id plus the network namespace inode (so processes in different
// network namespaces, such as simulated hosts, use TCP) plus the PID
// namespace inode (a /proc/<pid>/fd path means the same process only inside
// one PID namespace).
//
// If any part cannot be read, HostID returns a value unique to this process,
// so that shared memory is never tried on a guess.
func HostID() string { return hostID() }

func computeHostID() string {
	boot, err1 := os.ReadFile("/proc/sys/kernel/random/boot_id")
	netns, err2 := os.Readlink("/proc/self/ns/net")
	pidns, err3 := os.Readlink("/proc/self/ns/pid")
	b := strings.TrimSpace(string(boot))
	if err1 != nil || err2 != nil || err3 != nil || b == "" {
		var r [8]byte
		_, _ = rand.Read(r[:])
		return fmt.Sprintf("unknown-%d-%s", os.Getpid(), hex.EncodeToString(r[:]))
	}
	return b + "/" + netns + "/" + pidns
}
