// interrupt.go lets Python's Ctrl-C end a store call its main thread is
// waiting in. Python runs its SIGINT handler only between bytecodes, never
// while the main thread is inside a ctypes call; so a C handler is chained
// in front of Python's (which still runs, as before): it writes a byte to
// a pipe, and a goroutine reading the pipe ends the main thread's calls in
// flight (client.InterruptMain). The call returns at once, and Python's
// handler raises KeyboardInterrupt as the call returns. The calls of other
// threads go on. Nothing runs on a call's path but the client's check of
// the calling thread (one gettid).
//
// Python replaces the C handler whenever a program sets a SIGINT handler
// (signal.signal): the goroutine chains in front of the new one within
// rechainEvery. A SIGINT that is ignored or left to the default action
// (signal.SIG_IGN, SIG_DFL) is left alone.

package main

/*
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

// The main thread, once a call on it was seen (gs_note_main): telling it
// by pthread_self costs a call no system call.
static pthread_t gs_main;
static volatile int gs_main_known;

static void gs_note_main(void) {
	gs_main = pthread_self();
	gs_main_known = 1;
}

// gs_on_main: 1 on the main thread, 0 off it, -1 while it is not known.
static int gs_on_main(void) {
	if (!gs_main_known) return -1;
	return pthread_equal(pthread_self(), gs_main) ? 1 : 0;
}

static struct sigaction gs_prev;
static volatile int gs_wakefd = -1;
static volatile pid_t gs_pid; // a forked child shares the pipe: it must not wake the parent

static void gs_on_sigint(int sig, siginfo_t *info, void *uc) {
	int saved = errno;
	char b = 1;
	if (gs_wakefd >= 0 && getpid() == gs_pid) {
		ssize_t r = write(gs_wakefd, &b, 1);
		(void)r;
	}
	errno = saved;
	if (gs_prev.sa_flags & SA_SIGINFO) {
		if (gs_prev.sa_sigaction != NULL) gs_prev.sa_sigaction(sig, info, uc);
	} else if (gs_prev.sa_handler != SIG_DFL && gs_prev.sa_handler != SIG_IGN) {
		gs_prev.sa_handler(sig);
	}
}

// gs_chain_sigint puts gs_on_sigint in front of SIGINT's handler when that
// is a function (Python's): 1 when it is there, 0 when SIGINT is ignored or
// default, -1 on error.
static int gs_chain_sigint(int fd) {
	struct sigaction cur, mine;
	if (sigaction(SIGINT, NULL, &cur) != 0) return -1;
	if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == gs_on_sigint) return 1;
	if (!(cur.sa_flags & SA_SIGINFO) && (cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN)) return 0;
	gs_pid = getpid();
	gs_wakefd = fd;
	gs_prev = cur;
	mine = cur; // its mask and flags (Python's: no SA_RESTART)
	mine.sa_flags |= SA_SIGINFO | SA_ONSTACK;
	mine.sa_sigaction = gs_on_sigint;
	return sigaction(SIGINT, &mine, NULL) == 0 ? 1 : -1;
}
*/
import "C"

import (
	"context"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gostore/gostore/gostore/client"
)

// rechainEvery is how soon a SIGINT handler a program sets after setup is
// chained again.
const rechainEvery = 200 * time.Millisecond

var interrupts sync.Once

// watchInterrupts starts, once per process, the chained handler and the
// goroutine that ends the main thread's calls on SIGINT.
func watchInterrupts() {
	interrupts.Do(func() {
		var fds [2]int
		if err := unix.Pipe2(fds[:], unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
			logger.Warn("Ctrl-C cannot interrupt store calls: no pipe", "err", err)
			return
		}
		r := os.NewFile(uintptr(fds[0]), "sigint")
		wake := C.int(fds[1])
		C.gs_chain_sigint(wake)
		go func() {
			buf := make([]byte, 64)
			for {
				if _, err := r.Read(buf); err != nil {
					logger.Warn("Ctrl-C no longer interrupts store calls", "err", err)
					return
				}
				interruptMain()
			}
		}()
		go func() {
			for range time.Tick(rechainEvery) {
				C.gs_chain_sigint(wake)
			}
		}()
	})
}

// setupScope is the parent of the setups run on the main thread: ended,
// and replaced, at each SIGINT.
var setupScope struct {
	sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// setupContext is what a setup on this thread may be interrupted by (nil
// off the main thread).
func setupContext() context.Context {
	if !onMainThread() {
		return nil
	}
	setupScope.Lock()
	defer setupScope.Unlock()
	if setupScope.ctx == nil {
		setupScope.ctx, setupScope.cancel = context.WithCancelCause(context.Background())
	}
	return setupScope.ctx
}

// onMainThread is client.Config.OnMainThread: a C call once the main
// thread is known, a system call (gettid) until then.
func onMainThread() bool {
	if on := C.gs_on_main(); on >= 0 {
		return on == 1
	}
	if client.OnMainThread() {
		C.gs_note_main()
		return true
	}
	return false
}

// interruptMain ends the main thread's waiting calls on every store, and
// a setup it runs.
func interruptMain() {
	setupScope.Lock()
	if setupScope.cancel != nil {
		setupScope.cancel(client.ErrInterrupted)
		setupScope.ctx, setupScope.cancel = nil, nil
	}
	setupScope.Unlock()
	handles.Range(func(_, v any) bool {
		if s, ok := v.(*store); ok {
			if c := s.client.Load(); c != nil {
				c.InterruptMain()
			}
		}
		return true
	})
}
