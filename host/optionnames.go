package host

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"google.golang.org/protobuf/types/known/structpb"
)

// PipelineOptionDescriptors are the job-scoped options a job's pipeline
// options may set (what DescribePipelineOptions answers): their names,
// descriptions, types and defaults. The Go runner package
// (host/kafkastreams) defines a flag for each.
func PipelineOptionDescriptors() []*jobpb.PipelineOptionDescriptor { return optionDescriptors() }

// optionNames are the names of the job-scoped options.
func optionNames() []string {
	var names []string
	for _, d := range optionDescriptors() {
		names = append(names, d.GetName())
	}
	return names
}

// SuggestOption returns the option of known that name is a likely
// misspelling of (at most maxEdits edits away, a swap of two neighbours
// counting as one), or "" if none is.
func SuggestOption(name string, known []string, maxEdits int) string {
	best, bestD := "", maxEdits+1
	for _, k := range known {
		if k == name {
			return ""
		}
		if d := editDistance(name, k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance of a and b:
// insertions, deletions, substitutions and swaps of adjacent characters.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// pipelineOptionNames lists the names of the options a job's pipeline
// options carry, in every form the SDKs send them (see pipelineOption).
func pipelineOptionNames(opts *structpb.Struct) []string {
	seen := map[string]bool{}
	f := opts.GetFields()
	for k := range f["beam:option:go_options:v1"].GetStructValue().GetFields()["options"].GetStructValue().GetFields() {
		seen[k] = true
	}
	for k := range f["options"].GetStructValue().GetFields() {
		seen[k] = true
	}
	for k := range f {
		if name, ok := strings.CutPrefix(k, "beam:option:"); ok {
			if name, ok = strings.CutSuffix(name, ":v1"); ok && name != "go_options" {
				seen[name] = true
			}
		} else if k != "options" {
			seen[k] = true
		}
	}
	names := make([]string, 0, len(seen))
	for k := range seen {
		names = append(names, k)
	}
	slices.Sort(names)
	return names
}

// optionTypos warns of the job's pipeline options that are one edit away
// from a ksrunner option: ksrunner ignores an option it does not know, so a
// misspelt one would silently change nothing.
func optionTypos(opts *structpb.Struct) []string {
	known := optionNames()
	var out []string
	for _, name := range pipelineOptionNames(opts) {
		if s := SuggestOption(name, known, 1); s != "" {
			out = append(out, fmt.Sprintf("pipeline option %s is not a ksrunner option and is ignored: did you mean %s?", name, s))
		}
	}
	return out
}

// describe prints the options as name=value pairs, in their declared
// order, for the log line of a job's start (application_id, a field of its
// own there, left out).
func (o Options) describe() string {
	var b strings.Builder
	v := reflect.ValueOf(o)
	for i := range v.NumField() {
		name := v.Type().Field(i).Tag.Get("koanf")
		if name == "" || name == "application_id" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		var val string
		switch f := v.Field(i).Interface().(type) {
		case []string:
			val = strings.Join(f, ",")
		case time.Duration:
			val = f.String()
		default:
			val = fmt.Sprint(f)
		}
		if val == "" {
			val = `""`
		}
		b.WriteString(name + "=" + val)
	}
	return b.String()
}

// String names how a process got a job, for the log.
func (o jobOrigin) String() string {
	switch o {
	case originSubmitted:
		return "submitted"
	case originResumed:
		return "resumed"
	case originWorker:
		return "worker"
	}
	return fmt.Sprintf("origin %d", int(o))
}
