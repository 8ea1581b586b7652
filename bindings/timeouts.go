// timeouts.go reads the bounds of the calls that wait on the network, from
// setup's keys first, then the environment (Mooncake's names where it has
// them), into client.Config.

package main

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gostore/gostore/gostore/client"
	"github.com/gostore/gostore/gostore/wire"
)

// asMillis reads a setup key in milliseconds (a JSON integer; negative
// only where signed).
func asMillis(k string, v any, signed bool) (*int64, error) {
	x, ok := v.(float64)
	if !ok || x != float64(int64(x)) || (!signed && x < 0) {
		want := "a non-negative integer"
		if signed {
			want = "an integer"
		}
		return nil, fmt.Errorf("%s must be %s of milliseconds, got %v", k, want, v)
	}
	ms := int64(x)
	return &ms, nil
}

// envMillis reads an environment bound in milliseconds; unset is nil.
func envMillis(name string, signed bool) (*int64, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return nil, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || (!signed && ms < 0) {
		return nil, wire.Errorf(wire.ErrInvalidParams, "%s=%q: want milliseconds", name, v)
	}
	return &ms, nil
}

func millis(ms int64) time.Duration {
	return time.Duration(max(min(ms, 1<<40), -1)) * time.Millisecond
}

// applyBounds sets cfg's bounds: setup's keys, else the environment, else
// the client's defaults. A zero rpc_timeout_ms or close_timeout_ms is the
// default, as an unset one.
func applyBounds(cfg *client.Config, edge setupEdge) error {
	pick := func(given *int64, env string, signed bool) (*int64, error) {
		if given != nil {
			return given, nil
		}
		return envMillis(env, signed)
	}
	rpc, err := pick(edge.rpcTimeoutMS, "MC_RPC_TIMEOUT_MS", true)
	if err != nil {
		return err
	}
	if rpc != nil {
		cfg.RPCTimeout = millis(*rpc)
	}
	conn, err := pick(edge.connectTimeoutMS, "MC_RPC_CONNECT_TIMEOUT_MS", false)
	if err != nil {
		return err
	}
	if conn != nil {
		cfg.RPC.ConnectTimeout = millis(*conn)
	}
	closing, err := pick(edge.closeTimeoutMS, "GOSTORE_CLOSE_TIMEOUT_MS", false)
	if err != nil {
		return err
	}
	if closing != nil {
		cfg.CloseTimeout = millis(*closing)
	}
	ping, err := envMillis("GOSTORE_PING_TIMEOUT_MS", false)
	if err != nil {
		return err
	}
	if ping != nil {
		cfg.PingTimeout = millis(*ping)
	}
	return nil
}
