package state

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"sync"
)

// SideCache keeps the pages of side input reads in memory, shared by every
// task of an instance, so that a stage looking up a map side input once
// per element does not open a store iterator per lookup (an iterator opens
// every level's files and, with the block cache churned by the stage's
// other reads, reads their index blocks from disk: 23 of the host's 72 CPU
// seconds of a 1M-lookup join).
//
// A side input's contents for a window are complete before any read of
// them, because a stage holds back its input until every side input's
// watermark has passed the input's windows (the runtime's gate). They can
// still grow: a late pane written after the watermark. Invariant: a cached
// page is what the store answered after the last side input write, because
// the side input reader calls Invalidate after each write it commits, and a
// page read before that (an older generation) is not kept.
//
// Eviction is random (Go's map order), as the Go SDK's own side input cache
// does: lookups of a map side input by element have no useful recency.
type SideCache struct {
	limit int
	nonce string // this cache's part of its tokens (Token)

	mu      sync.Mutex
	gen     uint64 // Invalidate's count
	entries map[string]sidePage
	bytes   int
	hits    uint64
	misses  uint64
}

type sidePage struct {
	page, next []byte
}

// sideEntryOverhead approximates a cached entry's memory besides its bytes
// (map slot, string and slice headers).
const sideEntryOverhead = 96

// NewSideCache is a cache that holds at most limit bytes of keys and pages;
// a single page larger than a quarter of that is not kept. limit <= 0: nil,
// which caches nothing.
func NewSideCache(limit int) *SideCache {
	if limit <= 0 {
		return nil
	}
	var n [8]byte
	rand.Read(n[:])
	return &SideCache{limit: limit, nonce: hex.EncodeToString(n[:]), entries: map[string]sidePage{}}
}

// Token is the Fn API cache token of the side inputs' contents as they are
// now: it changes with every side input write (Invalidate), and no other
// cache, of this instance or another, makes the same. A bundle sent with
// it lets the SDK keep what it reads of the side inputs and reuse that in
// the bundles that carry the same token (Python's state cache does when
// --max_cache_memory_usage_mb turns it on; the Go SDK's when a pipeline
// enables it). Nil for a nil cache: no caching.
func (c *SideCache) Token() []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return binary.BigEndian.AppendUint64([]byte(c.nonce), c.gen)
}

// get returns the cached page of key, if any, and the generation a page
// read from the store now must be put with.
func (c *SideCache) get(key []byte) (p sidePage, ok bool, gen uint64) {
	if c == nil {
		return sidePage{}, false, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	p, ok = c.entries[string(key)]
	if ok {
		c.hits++
	} else {
		c.misses++
	}
	return p, ok, c.gen
}

// put keeps page p of key, read from the store in generation gen (get's).
func (c *SideCache) put(key []byte, p sidePage, gen uint64) {
	if c == nil {
		return
	}
	size := len(key) + len(p.page) + len(p.next) + sideEntryOverhead
	if size > c.limit/4 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return // read before a side input write: it may lack what that wrote
	}
	if _, ok := c.entries[string(key)]; ok {
		return
	}
	for k, old := range c.entries {
		if c.bytes+size <= c.limit {
			break
		}
		delete(c.entries, k)
		c.bytes -= len(k) + len(old.page) + len(old.next) + sideEntryOverhead
	}
	c.entries[string(key)] = p
	c.bytes += size
}

// Invalidate drops every cached page: side input data was written to the
// store. Reads still in flight then do not keep what they read.
func (c *SideCache) Invalidate() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if len(c.entries) > 0 {
		c.entries = map[string]sidePage{}
		c.bytes = 0
	}
}

// Stats reports the cache's hits and misses so far, and the bytes it holds.
func (c *SideCache) Stats() (hits, misses uint64, bytes int) {
	if c == nil {
		return 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits, c.misses, c.bytes
}
