package runtime

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadIdentity: the first start creates the identity, a restart reads
// the same one back (and knows it is a restart), a damaged file is an error
// naming it, and a temporary store's identity is random and dynamic.
func TestLoadIdentity(t *testing.T) {
	dir := t.TempDir()
	first, err := loadIdentity(dir)
	if err != nil || !first.created || !first.stable || !validInstanceID(first.id) {
		t.Fatalf("first start: %+v, %v", first, err)
	}
	again, err := loadIdentity(dir)
	if err != nil || again.created || again.id != first.id {
		t.Fatalf("restart: %+v, %v; want id %s, not created", again, err, first.id)
	}
	if got := again.transactionalID("app"); got != "app-"+first.id {
		t.Errorf("transactional id %q", got)
	}
	if gid := again.groupInstanceID("app"); gid == nil || *gid != "app-"+first.id {
		t.Errorf("group.instance.id %v", gid)
	}
	if other, _ := loadIdentity(t.TempDir()); other.id == first.id {
		t.Errorf("two state dirs share identity %s", first.id)
	}
	os.WriteFile(filepath.Join(dir, identityFile), []byte("not-an-id\n"), 0o644)
	if _, err := loadIdentity(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, identityFile)) || !strings.Contains(err.Error(), `"not-an-id"`) {
		t.Errorf("damaged identity file: %v, want an error naming the file and its content", err)
	}
	r := randomIdentity()
	if r.stable || r.groupInstanceID("app") != nil || !validInstanceID(r.id) {
		t.Errorf("random identity %+v: want not stable, no group.instance.id", r)
	}
}
