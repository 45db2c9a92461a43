package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
)

// The incarnation of an application's topics.
//
// A local store (a state_dir) follows its application's changelogs by
// offset. When the topics are deleted and made again (`ksrunner reset`, a
// bounded job done with its topics deleted), offsets start over and a
// store can no longer tell old state from new: one behind the new
// changelog's end would be restored onto (restoreTask only catches a store
// ahead of it). So the store records which incarnation of the topics it
// follows, the status topic's id (every application has one, made with the
// others, and Kafka gives a topic made again a new id), in the file
// incarnationFile beside it. An instance opening a store of another
// incarnation empties it first.
//
// Invariants:
//   - The file is written after the store is emptied, and only once the
//     store holds nothing of another incarnation: a crash in between
//     empties it again.
//   - A store without the file (written before incarnations, or new) is
//     taken as is, then marked: only a store known to follow other topics
//     is emptied.

// incarnationFile holds the status topic id the store follows.
const incarnationFile = "topics-incarnation"

// topicsIncarnation is the status topic's id: the incarnation of the
// application's topics (setUpTopics made or found them).
func topicsIncarnation(ctx context.Context, adm *topics.Admin, ts *topics.Set) (string, error) {
	name := ts.Full(shuffle.StatusTopic)
	td, err := adm.ListTopics(ctx, name)
	if err != nil {
		return "", fmt.Errorf("topic %s: its id: %w", name, err)
	}
	d, ok := td[name]
	if !ok || d.Err != nil {
		return "", fmt.Errorf("topic %s: its id: not listed (%v)", name, d.Err)
	}
	if d.ID == (kadm.TopicID{}) {
		return "", nil // a broker without topic ids: nothing to tell apart
	}
	return d.ID.String(), nil
}

// checkIncarnation empties db, the store in dir, if it followed another
// incarnation of the topics than id, and marks it as following id. It
// reports whether it emptied it.
func checkIncarnation(db *pebble.DB, dir, id string) (bool, error) {
	if id == "" {
		return false, nil
	}
	file := filepath.Join(dir, incarnationFile)
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return false, fmt.Errorf("state store %s: %w", dir, err)
	}
	prev := strings.TrimSpace(string(b))
	emptied := prev != "" && prev != id
	if emptied {
		if err := emptyStore(db); err != nil {
			return false, fmt.Errorf("state store %s: emptying the state of the application's earlier topics: %w", dir, err)
		}
	}
	if prev != id {
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err != nil {
			return false, fmt.Errorf("state store %s: %w", dir, err)
		}
		if err := os.Rename(tmp, file); err != nil {
			return false, fmt.Errorf("state store %s: %w", dir, err)
		}
	}
	return emptied, nil
}

// emptyStore deletes every key of db, durably.
func emptyStore(db *pebble.DB) error {
	it, err := db.NewIter(nil)
	if err != nil {
		return err
	}
	var first, last []byte
	if it.First() {
		first = append([]byte(nil), it.Key()...)
		it.Last()
		last = append([]byte(nil), it.Key()...)
	}
	if err := it.Close(); err != nil {
		return err
	}
	if first == nil {
		return nil
	}
	return db.DeleteRange(first, append(last, 0), pebble.Sync)
}
