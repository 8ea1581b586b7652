// Package child runs a benchmark's master in a child process: the bench
// program itself, started again with -serve and the caller's arguments.
// The master's garbage, goroutines and CPU are then its own, not the
// measuring process's, and the CPU it used can be read when it ends.
//
// The child's duties: print one line with its addresses (space-separated)
// once it serves, and exit when its standard input closes.
package child

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Proc is a running child.
type Proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// Start runs this program with -serve and args, and returns the child and
// the fields of the first line it prints.
func Start(args ...string) (*Proc, []string, error) {
	cmd := exec.Command(os.Args[0], append([]string{"-serve"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, nil, err
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return nil, nil, fmt.Errorf("the master child did not start: %v", err)
	}
	return &Proc{cmd: cmd, stdin: stdin}, strings.Fields(line), nil
}

// Stop closes the child's standard input, waits for it to exit and
// returns the CPU time (user and system) it used.
func (p *Proc) Stop() time.Duration {
	p.stdin.Close()
	p.cmd.Wait()
	return p.cmd.ProcessState.UserTime() + p.cmd.ProcessState.SystemTime()
}
