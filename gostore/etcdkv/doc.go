// Package etcdkv speaks etcd v3 over its JSON gateway (the HTTP/JSON API
// every etcd 3.4+ member serves on its client port): the few calls the
// master's high availability needs (put, range, transactions with
// comparisons that put and delete ranges, leases), with failover between
// the cluster's endpoints.
//
// It is plain net/http and encoding/json: the master binary takes no gRPC
// stack for five calls.
//
// # Invariants
//
//   - A call goes to one endpoint at a time, the last one that answered
//     first; a transport error or a 5xx moves it to the next. An answer
//     with an etcd error (a 4xx, or a body with "error") is returned as
//     such, without trying another member.
//   - Keys and values are bytes; the gateway's base64 and its int64-as-
//     string numbers never leave this package.
//
// # The caller's duties
//
// Give every call a context with a deadline: a member cut off from its
// quorum may hold a request until it gives up.
package etcdkv
