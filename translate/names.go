package translate

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
)

// maxTopicBase bounds the sanitized part of a topic name. Kafka allows 249
// characters in all, and shuffle prefixes "__beam_<application_id>_" and we
// append a suffix such as "-repartition".
const maxTopicBase = 160

// sanitizeTopicName maps a transform unique name to characters valid in a
// Kafka topic name. The mapping is injective: letters, digits and '-' are
// kept, '_' becomes "__" and every other byte (including '.', so that names
// never collide under Kafka's '.'/'_' metric-name rule) becomes '_' followed
// by two lowercase hex digits. Names whose encoding exceeds maxTopicBase are
// truncated and suffixed with a hash of the full name (injective up to hash
// collisions, which Translate would report as a duplicate topic).
func sanitizeTopicName(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-':
			b.WriteByte(c)
		case c == '_':
			b.WriteString("__")
		default:
			const hexdigits = "0123456789abcdef"
			b.WriteByte('_')
			b.WriteByte(hexdigits[c>>4])
			b.WriteByte(hexdigits[c&0xf])
		}
	}
	s := b.String()
	if len(s) <= maxTopicBase {
		return s
	}
	sum := sha256.Sum256([]byte(name))
	// Truncate on a code boundary is not needed for uniqueness: the hash
	// suffix distinguishes names, and "-" only ever appears literally.
	return s[:maxTopicBase-17] + "-" + hex.EncodeToString(sum[:8])
}

// validTopicName reports whether s only uses Kafka's topic name characters.
func validTopicName(s string) bool {
	if s == "" || len(s) > 249 || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// uniqueID returns base if taken(base) is false, else base with the smallest
// numeric suffix that is free.
func uniqueID(base string, taken func(string) bool) string {
	if !taken(base) {
		return base
	}
	for i := 1; ; i++ {
		id := base + "_" + strconv.Itoa(i)
		if !taken(id) {
			return id
		}
	}
}
