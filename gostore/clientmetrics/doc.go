// Package clientmetrics measures one store client and serves what it
// measured over HTTP: the client HTTP server that setup's
// enable_client_http_server turns on.
//
// Owns: a Prometheus registry of its own (never the global one: the
// library lives inside a Python process next to other Go code), the
// series on it, and the HTTP server that answers /metrics (Prometheus
// text), /health (the client's health as JSON) and /metrics/summary (a
// readable digest of the same numbers). The series keep the names,
// labels, units (microseconds) and bucket bounds of Mooncake's client so
// dashboards built for it read them unchanged; the gostore_ series are
// additions.
//
// Invariants: the recording methods (RPC, Transfer, Op) of a nil
// *Metrics do nothing, so a client with the server off pays one nil
// check per call; recording never blocks and never fails; the server
// serves only the exact paths above, to GET and HEAD, and answers 404 to
// anything else.
//
// Caller's duties: the client decides what an operation is and reports
// each once, after it ended — RPCs through RPC (an rpc.ClientOptions
// observer), the bytes and time of its transfers through Transfer, and
// interface-level calls through Op; Close the Server before the client
// is gone (its health func is called on every /health request).
package clientmetrics
