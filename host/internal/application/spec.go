package application

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/translate"
)

// Spec is a job as every process of its application runs it.
type Spec struct {
	// JobID and JobName are those the job server gave the submission.
	JobID, JobName string
	// Pipeline is the pipeline as submitted (environment dependencies point
	// at the submitting job server's staged files; Artifacts holds them).
	Pipeline *pipepb.Pipeline
	// RawOptions are the job's pipeline options, served to SDK workers.
	RawOptions *structpb.Struct
	// Options are the job's resolved options, in the host's encoding (this
	// package does not read them).
	Options []byte
	// Modules are the WASM modules the job's stage_wasm option names by a
	// file path or URL, by that reference (modules staged as artifacts
	// travel in Artifacts).
	Modules map[string][]byte
	// Artifacts are the environments' staged files, by their path in
	// Pipeline.
	Artifacts map[string][]byte
	// Topology is what, besides the pipeline, decides the job's topics and
	// stages (the host's job options that shape them), in a stable form; it
	// is part of the fingerprint.
	Topology string
	// Layout is the version of the layout rules the job's plan depends on
	// (translate.Plan.Layout): 0 and 1 are alike, the first rules. Above 1
	// it is part of the fingerprint, so that the same pipeline laid out by
	// other rules is another job; at 1 it is not, so that the fingerprints
	// of the applications it does not touch stay what the ksrunners before
	// layout versions computed.
	Layout int
}

// LayoutOf is layout version l with 0 (a Spec or Manifest written before
// layout versions) read as the first rules.
func LayoutOf(l int) int { return max(l, translate.LayoutFirst) }

// Fingerprint identifies the job's pipeline and topology (see the package
// invariants): equal for the same program submitted from anywhere.
func (s *Spec) Fingerprint() (string, error) {
	return s.fingerprintAt(s.Layout)
}

// fingerprintAt is the fingerprint s would have under layout version l.
func (s *Spec) fingerprintAt(l int) (string, error) {
	p := withoutSDKPlaces(s.Pipeline)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("pipeline fingerprint: %w", err)
	}
	h := sha256.New()
	h.Write(b)
	h.Write([]byte{0})
	h.Write([]byte(s.Topology))
	if LayoutOf(l) > translate.LayoutFirst {
		fmt.Fprintf(h, "\x00layout=%d", l)
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// specHeader is the start of an encoded Spec; the sections follow it in
// its order.
type specHeader struct {
	Format   int       `json:"format"`
	JobID    string    `json:"job_id"`
	JobName  string    `json:"job_name"`
	Options  []byte    `json:"options"`
	Topology string    `json:"topology"`
	Layout   int       `json:"layout,omitempty"`
	Sections []section `json:"sections"`
}

type section struct {
	Kind string `json:"kind"` // pipeline, raw_options, module, artifact
	Name string `json:"name,omitempty"`
	Size int    `json:"size"`
}

// specFormat is the format of a Spec of the first layout. A Spec of a
// later layout is written as specLayoutFormat, which ksrunners from before
// layout versions refuse ("a newer ksrunner wrote it?") rather than run on
// the first layout's plan.
const (
	specFormat       = 1
	specLayoutFormat = 2
)

// encode is uvarint(len(header)) | header (JSON) | sections.
func (s *Spec) encode() ([]byte, error) {
	pipe, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.Pipeline)
	if err != nil {
		return nil, fmt.Errorf("encoding the pipeline: %w", err)
	}
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(s.RawOptions)
	if err != nil {
		return nil, fmt.Errorf("encoding the pipeline options: %w", err)
	}
	h := specHeader{Format: specFormat, JobID: s.JobID, JobName: s.JobName, Options: s.Options, Topology: s.Topology, Layout: s.Layout}
	if LayoutOf(s.Layout) > translate.LayoutFirst {
		h.Format = specLayoutFormat
	}
	bodies := [][]byte{pipe, raw}
	h.Sections = append(h.Sections, section{Kind: "pipeline", Size: len(pipe)}, section{Kind: "raw_options", Size: len(raw)})
	for _, name := range slices.Sorted(maps.Keys(s.Modules)) {
		h.Sections = append(h.Sections, section{Kind: "module", Name: name, Size: len(s.Modules[name])})
		bodies = append(bodies, s.Modules[name])
	}
	for _, name := range slices.Sorted(maps.Keys(s.Artifacts)) {
		h.Sections = append(h.Sections, section{Kind: "artifact", Name: name, Size: len(s.Artifacts[name])})
		bodies = append(bodies, s.Artifacts[name])
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Write(binary.AppendUvarint(nil, uint64(len(hb))))
	buf.Write(hb)
	for _, b := range bodies {
		buf.Write(b)
	}
	return buf.Bytes(), nil
}

func decodeSpec(b []byte) (*Spec, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || uint64(len(b)-k) < n {
		return nil, errors.New("spec: bad header length")
	}
	var h specHeader
	if err := json.Unmarshal(b[k:k+int(n)], &h); err != nil {
		return nil, fmt.Errorf("spec header: %w", err)
	}
	if h.Format != specFormat && h.Format != specLayoutFormat {
		return nil, fmt.Errorf("spec format %d, this ksrunner reads formats %d and %d (a newer ksrunner wrote it?)", h.Format, specFormat, specLayoutFormat)
	}
	s := &Spec{JobID: h.JobID, JobName: h.JobName, Options: h.Options, Topology: h.Topology, Layout: h.Layout,
		Pipeline: &pipepb.Pipeline{}, RawOptions: &structpb.Struct{}, Modules: map[string][]byte{}, Artifacts: map[string][]byte{}}
	rest := b[k+int(n):]
	for _, sec := range h.Sections {
		if sec.Size < 0 || sec.Size > len(rest) {
			return nil, fmt.Errorf("spec section %s %q: %d bytes, %d left", sec.Kind, sec.Name, sec.Size, len(rest))
		}
		body := rest[:sec.Size:sec.Size]
		rest = rest[sec.Size:]
		switch sec.Kind {
		case "pipeline":
			if err := proto.Unmarshal(body, s.Pipeline); err != nil {
				return nil, fmt.Errorf("spec pipeline: %w", err)
			}
		case "raw_options":
			if err := proto.Unmarshal(body, s.RawOptions); err != nil {
				return nil, fmt.Errorf("spec pipeline options: %w", err)
			}
		case "module":
			s.Modules[sec.Name] = body
		case "artifact":
			s.Artifacts[sec.Name] = body
		default:
			return nil, fmt.Errorf("spec: unknown section kind %q", sec.Kind)
		}
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("spec: %d bytes after the last section", len(rest))
	}
	return s, nil
}

// StoredOrder makes p list its root transforms, and each composite's
// parts, in the order stored of the same pipeline lists them, when stored
// is p up to those orders and where SDKs run (what the fingerprint leaves
// out); it reports whether it did. A submission lists them in one order
// (host's canonicalOrder), but a pipeline stored by a ksrunner before that
// lists them as its SDK did, and the order decides the fingerprint and
// the plan's sub-topology numbering: a resubmission of it must keep the
// stored order to be the same job.
func StoredOrder(p, stored *pipepb.Pipeline) bool {
	if stored == nil || slices.Equal(p.GetRootTransformIds(), stored.GetRootTransformIds()) && sameParts(p, stored) {
		return false
	}
	a, b := orderFree(p), orderFree(stored)
	if !proto.Equal(a, b) {
		return false
	}
	p.RootTransformIds = slices.Clone(stored.GetRootTransformIds())
	for id, tr := range p.GetComponents().GetTransforms() {
		tr.Subtransforms = slices.Clone(stored.GetComponents().GetTransforms()[id].GetSubtransforms())
	}
	return true
}

// sameParts reports whether every composite of a lists its parts as b's
// does.
func sameParts(a, b *pipepb.Pipeline) bool {
	for id, tr := range a.GetComponents().GetTransforms() {
		if !slices.Equal(tr.GetSubtransforms(), b.GetComponents().GetTransforms()[id].GetSubtransforms()) {
			return false
		}
	}
	return true
}

// withoutSDKPlaces is a copy of p without where its SDKs run, which is not
// what the pipeline computes: the LOOPBACK pool's address and the staged
// files' paths differ per submission.
func withoutSDKPlaces(p *pipepb.Pipeline) *pipepb.Pipeline {
	c := proto.Clone(p).(*pipepb.Pipeline)
	for _, env := range c.GetComponents().GetEnvironments() {
		env.Payload = nil
		env.Dependencies = nil
	}
	return c
}

// orderFree is p as the fingerprint sees it, its lists of roots and parts
// sorted.
func orderFree(p *pipepb.Pipeline) *pipepb.Pipeline {
	c := withoutSDKPlaces(p)
	slices.Sort(c.RootTransformIds)
	for _, tr := range c.GetComponents().GetTransforms() {
		slices.Sort(tr.Subtransforms)
	}
	return c
}
