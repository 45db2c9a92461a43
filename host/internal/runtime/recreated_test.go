package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// TestRestoreFromRecreatedChangelog: a store whose position is beyond its
// changelog's end followed an earlier topic of that name (the application
// id reused on the same state_dir after a bounded job deleted its topics);
// the restore drops its state and replays the new changelog, rather than
// taking the stale state for up to date.
func TestRestoreFromRecreatedChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	a := newChangelogApp(t, bootstrap, 1)
	dir := t.TempDir()
	w := newChangelogWriter(t, a, 0)
	for range 4 {
		if err := w.txn(ctx, 64<<10, 50, false); err != nil {
			t.Fatal(err)
		}
	}
	i := a.instance(t, dir, nil)
	restoreTimed(t, i, 0)
	if d := diffState(taskState(t, i.db, 0), w.model); d != "" {
		t.Fatalf("first restore: %s", d)
	}

	// The topics are deleted and made again; a smaller changelog is written.
	adm := topics.AdminOf(a.admin)
	if err := a.topics.Delete(ctx, adm); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if err := a.topics.Create(ctx, adm); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("recreating the topics: %v", err)
		}
	}
	w2 := newChangelogWriter(t, a, 0)
	if err := w2.txn(ctx, 8<<10, 5, false); err != nil {
		t.Fatal(err)
	}
	var replayed int
	i.cfg.Hooks.Restored = func(_ int, _ int32, n int) { replayed = n }
	restoreTimed(t, i, 0)
	if d := diffState(taskState(t, i.db, 0), w2.model); d != "" {
		t.Fatalf("restore from the recreated changelog (replayed %d records): %s", replayed, d)
	}
}
