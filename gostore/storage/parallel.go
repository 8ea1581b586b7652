package storage

// offloadWorkers is how many objects of one batch the file-per-key and
// offset-allocator backends write at once (with fileio.ForEach): each
// write ends with its own datasync, and a disk serves many of those in
// parallel far faster than one after the other.
const offloadWorkers = 16
