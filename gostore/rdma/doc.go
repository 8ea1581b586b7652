// Package rdma finds RDMA devices through libibverbs, opened at run time
// (dlopen) so gostore builds and runs where no verbs library or NIC
// exists and reports why there. It lists the devices verbs can open; the
// client matches them with the topology's NICs to choose one per buffer
// location. Moving bytes over verbs (registration, RDMA READ/WRITE) is not
// part of this build: without a NIC to run on, it would be untested code.
package rdma
