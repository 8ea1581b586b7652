// Package wire owns what crosses a process boundary: the contract's error
// codes (Code, Error), the master RPC frame format and its messages.
//
// It is the leaf of the import graph; every other gostore package may import
// it and it imports none of them. Message bodies are msgpack arrays (field
// order is the schema), which measured fastest on loopback among the options
// the architecture notes list.
package wire
