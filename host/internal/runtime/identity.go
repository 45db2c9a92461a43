package runtime

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// identityFile is the file, in an instance's store directory (next to the
// Pebble files, which Pebble ignores), that holds the instance's identity.
const identityFile = "instance-id"

// identity is who an instance is to the broker. A stable identity (one kept
// in an explicit state_dir) is the same across restarts of the process that
// owns the directory, so:
//   - its transactional id is the same: the restarted process's
//     InitProducerID aborts the open transaction its predecessor left
//     (killed inside a cycle), at once, instead of read_committed readers
//     (the changelog restore among them) waiting out the transaction
//     timeout;
//   - its group.instance.id is the same: the group hands the restarted
//     member its predecessor's assignment without waiting for the dead
//     member's session to expire.
//
// An instance without an explicit state_dir has a temporary store that dies
// with it, so nothing survives to restart from: its identity is random, it
// joins the group as a dynamic member (which leaves the group when it
// closes) and a crash inside a transaction holds readers up to the
// transaction timeout.
type identity struct {
	id     string // the instance's id, unique per store directory
	stable bool   // kept in the store directory (static membership)
	// created reports that this process made the id (a first start), not
	// read it (a restart, whose predecessor's transaction it fences).
	created bool
	file    string // where it is kept; "" when not stable
}

// transactionalID is the producer's transactional id.
func (id identity) transactionalID(appID string) string { return appID + "-" + id.id }

// groupInstanceID is the member's group.instance.id (static membership), or
// nil for a dynamic member.
func (id identity) groupInstanceID(appID string) *string {
	if !id.stable {
		return nil
	}
	s := appID + "-" + id.id
	return &s
}

// loadIdentity reads the identity kept in dir, creating it on the first
// start. The caller holds dir's Pebble lock, so no other process reads or
// writes the file meanwhile.
func loadIdentity(dir string) (identity, error) {
	file := filepath.Join(dir, identityFile)
	b, err := os.ReadFile(file)
	switch {
	case err == nil:
		id := strings.TrimSpace(string(b))
		if !validInstanceID(id) {
			return identity{}, fmt.Errorf("instance identity %s: %q is not an instance id (16 hex digits); remove the file to give this state_dir a new identity", file, id)
		}
		return identity{id: id, stable: true, file: file}, nil
	case !errors.Is(err, fs.ErrNotExist):
		return identity{}, fmt.Errorf("instance identity: %w", err)
	}
	id := newInstanceID()
	// Written to a temporary file and renamed, so a crash leaves either no
	// identity (the next start makes one) or a whole one, never a torn one.
	tmp := file + ".tmp"
	if err := writeSynced(tmp, []byte(id+"\n")); err != nil {
		return identity{}, fmt.Errorf("instance identity %s: %w", file, err)
	}
	if err := os.Rename(tmp, file); err != nil {
		return identity{}, fmt.Errorf("instance identity %s: %w", file, err)
	}
	return identity{id: id, stable: true, created: true, file: file}, nil
}

// randomIdentity is the identity of an instance with a temporary store.
func randomIdentity() identity { return identity{id: newInstanceID(), created: true} }

func newInstanceID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func validInstanceID(s string) bool {
	if len(s) != 16 {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

func writeSynced(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// HasIdentity reports whether dir, an instance's store directory, holds a
// stable identity: a process ran an application there with an explicit
// state_dir.
func HasIdentity(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, identityFile))
	return err == nil
}
