// Package wc is the wordcount pipeline shared by the example and the
// end-to-end tests.
package wc

import (
	"fmt"
	"regexp"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/transforms/stats"
)

var wordRE = regexp.MustCompile(`[a-zA-Z']+`)

func init() {
	register.Function2x0(extractWords)
	register.Emitter1[string]()
	register.Function2x1(formatCount)
}

func extractWords(line string, emit func(string)) {
	for _, w := range wordRE.FindAllString(line, -1) {
		emit(w)
	}
}

func formatCount(w string, c int) string { return fmt.Sprintf("%s: %d", w, c) }

// CountWords returns "word: count" lines for the words of lines.
func CountWords(s beam.Scope, lines beam.PCollection) beam.PCollection {
	s = s.Scope("CountWords")
	words := beam.ParDo(s, extractWords, lines)
	counted := stats.Count(s, words)
	return beam.ParDo(s, formatCount, counted)
}

// Text is the built-in input: the opening of Shakespeare's sonnet 18.
var Text = []string{
	"Shall I compare thee to a summer's day?",
	"Thou art more lovely and more temperate:",
	"Rough winds do shake the darling buds of May,",
	"And summer's lease hath all too short a date;",
	"Sometime too hot the eye of heaven shines,",
	"And often is his gold complexion dimm'd;",
	"And every fair from fair sometime declines,",
	"By chance or nature's changing course untrimm'd;",
	"But thy eternal summer shall not fade,",
	"Nor lose possession of that fair thou ow'st;",
	"Nor shall death brag thou wander'st in his shade,",
	"When in eternal lines to time thou grow'st:",
	"So long as men can see or eyes can see,",
	"So long lives this, and this gives life to thee.",
}
