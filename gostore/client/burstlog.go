// burstlog.go defines burstLog, the client's name for burstlog.Log.

package client

import "github.com/gostore/gostore/gostore/internal/burstlog"

// burstLog is burstlog.Log under the lower-case method names put.go calls
// (noSpace.fail, .on, .ok); the logic lives in burstlog, shared with the
// SSD tier.
type burstLog struct{ log burstlog.Log }

func (b *burstLog) fail(n int, logFirst func(others int)) { b.log.Fail(n, logFirst) }
func (b *burstLog) on() bool                              { return b.log.On() }
func (b *burstLog) ok(logEnd func(more int))              { b.log.OK(logEnd) }
