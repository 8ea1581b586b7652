// Package wire owns what crosses a process boundary: the contract's error
// codes (Code, Error), the master RPC frame format and its messages.
//
// It is the leaf of the import graph; every other gostore package may import
// it and it imports none of them. Message bodies are msgpack arrays (field
// order is the schema), which measured fastest on loopback among the options
// the architecture notes list.
//
// Tenants (tenant.go): under the master's --enable_multi_tenants a key is
// stored as ScopeKey(tenant, key). Requests that name keys carry their
// tenant as a last field written only when it is not the default, so the
// default tenant's messages keep their old bytes (tenantcodec.go).
package wire
