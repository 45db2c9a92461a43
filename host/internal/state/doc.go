// Package state owns the layout of an instance's Pebble store: the one
// registry of store-key kinds (keys.go), the key encodings every writer
// shares, the helpers that keep indexed batches cheap, and the stores built
// on them that the Fn API reads and writes: user state and timers of
// stateful stages (user.go), with the expiry of a window's state once the
// watermark passes it (expiry.go), and side inputs (side.go).
//
// Layout: every key of a task starts with TaskPrefix(sub-topology,
// partition) followed by one Kind byte; side inputs, which belong to the
// instance rather than a task, start with SidePrefix. The kinds are declared
// only in keys.go, where a test checks that they are distinct; since every
// kind is one byte after a fixed-length prefix, distinct kinds are
// prefix-free.
//
// Writes of a commit cycle go into indexed batches (reads see them) that the
// task applies only after the cycle committed; this package never commits a
// batch on its own except User.Commit, which the task calls then.
package state
