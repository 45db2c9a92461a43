package state

import (
	"context"
	"testing"
)

// BenchmarkValueStateWrite is the Go and Python SDKs' value state as they
// drive it: a bag read, cleared and appended to once per element, here on
// one key (a counter per key), with a commit every 10,000 elements as a
// commit cycle would.
func BenchmarkValueStateWrite(b *testing.B) {
	db := memDB(b)
	u := newUser(b, db, testPrefix)
	h := NewStageHandler(u, nil, nil)
	base, _ := cells(b)
	key := base.bag()
	ctx := context.Background()
	v := str(b, "v")
	b.ResetTimer()
	for i := range b.N {
		if _, _, err := h.Get(ctx, key, nil); err != nil {
			b.Fatal(err)
		}
		if err := h.Clear(ctx, key); err != nil {
			b.Fatal(err)
		}
		if err := h.Append(ctx, key, v); err != nil {
			b.Fatal(err)
		}
		if i%10000 == 9999 {
			if err := u.Commit(); err != nil {
				b.Fatal(err)
			}
		}
	}
}
