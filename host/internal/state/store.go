package state

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/graph/mtime"
	"github.com/cockroachdb/pebble/v2"
)

// DeleteRange deletes the keys in [lower, upper) of an indexed batch one by
// one. A batch range deletion would be one record instead of several, but
// every later read of an indexed batch fragments all of its range
// deletions again, so a task that clears many windows or states in one
// commit interval would make each read cost as much as all its clears so
// far (measured: 90% of a custom-session GroupByKey's time went there).
func DeleteRange(b *pebble.Batch, lower, upper []byte) error {
	it, err := b.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return err
	}
	var keys [][]byte
	for it.First(); it.Valid(); it.Next() {
		keys = append(keys, append([]byte(nil), it.Key()...))
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Delete(k, nil); err != nil {
			return err
		}
	}
	return nil
}

// maxTime is the largest timestamp (Beam's end of time), in milliseconds.
const maxTime = int64(mtime.MaxTimestamp)
