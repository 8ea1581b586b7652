// The boot file: which boot of the machine last opened the directory, so
// that Open can tell a crash of the process (the kernel kept every written
// record) from a restart of the machine (records never synced may be gone).

package journal

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

const bootFile = "boot"

// thisBoot names this boot of the machine; "" where the system does not
// say (every Open then counts as after a reboot).
func thisBoot() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// checkBoot fills rec.Rebooted, then records this boot in the directory
// (synced, before any record of this boot is written).
func checkBoot(opts Options, rec *Recovered) error {
	boot := opts.BootID
	if boot == "" {
		boot = thisBoot()
	}
	path := filepath.Join(opts.Dir, bootFile)
	last, err := os.ReadFile(path)
	held := rec.Snapshot != nil || len(rec.Records) > 0
	rec.Rebooted = held && (err != nil || boot == "" || string(last) != boot)
	if string(last) == boot && boot != "" {
		return nil
	}
	if err := writeSynced(path, []byte(boot)); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// writeSynced replaces path with b: a temporary file, synced, renamed
// into place, and the directory synced.
func writeSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(filepath.Dir(path))
}
