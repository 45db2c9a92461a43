package application

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/host/internal/kafkaconn"
	"github.com/ksrunner/ksrunner/host/internal/topics"
	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
)

// State is an application's state as its Manifest records it.
type State string

const (
	// Running: the job runs, or is to run, in every process of the
	// application; a restarted one resumes it.
	Running State = "running"
	// Cancelled: cancelled on purpose; nothing resumes it, and the same
	// or another pipeline may be submitted under the application id.
	Cancelled State = "cancelled"
	// Done: the job finished (a bounded job whose topics were kept).
	Done State = "done"
	// Draining: the job drains (the Job API's Drain) in the process that
	// was asked to; the application's other processes stop it, so that
	// their tasks move to that process and drain there. Drained: it
	// drained; nothing resumes it.
	Draining State = "draining"
	Drained  State = "drained"
)

// Manifest is the pipeline topic's latest word: which Spec (by its
// fingerprint and pieces) and in what state.
type Manifest struct {
	Format      int       `json:"format"`
	Fingerprint string    `json:"fingerprint"`
	JobID       string    `json:"job_id"`
	JobName     string    `json:"job_name"`
	State       State     `json:"state"`
	Pieces      int       `json:"pieces"`
	Size        int       `json:"size"`
	SHA256      string    `json:"sha256"`
	Written     time.Time `json:"written"`
	// By is the host and process that wrote it, for messages.
	By string `json:"by"`
	// Layout is the Spec's layout version (0: written before layout
	// versions, the first rules).
	Layout int `json:"layout,omitempty"`
}

const (
	manifestKey = "manifest"
	// pieceBytes keeps a piece with its key and headers far below Kafka's
	// default record limit (max.message.bytes, 1 MiB).
	pieceBytes = 512 << 10
	// readTimeout bounds reading the whole topic.
	readTimeout = 60 * time.Second
)

func pieceKey(fingerprint string, n int) string {
	return fmt.Sprintf("piece/%s/%06d", fingerprint, n)
}

// Topic is an application's pipeline topic on its cluster.
type Topic struct {
	appID    string
	name     string // the Kafka name
	brokers  string
	security *kafkaconn.Security
	adm      *kadm.Client
	raw      *kgo.Client // under adm

	// The manifest as of end offset cachedEnd (Manifest); a Topic is used
	// by one goroutine at a time.
	cached         bool
	cachedEnd      int64
	cachedManifest *Manifest
}

// Open opens the pipeline topic of application appID on brokers (a
// comma-separated list). With create, a missing topic is created
// (compacted, one partition, replication as given, -1: the broker's
// default); an instance that loses a creation race waits for the winner's.
// Its clients connect per sec (nil: PLAINTEXT).
func Open(ctx context.Context, brokers string, sec *kafkaconn.Security, appID string, replication int, create bool) (*Topic, error) {
	cl, err := kafkaconn.NewClient(brokers, sec)
	if err != nil {
		return nil, fmt.Errorf("kafka client for %s: %w", brokers, err)
	}
	t := &Topic{appID: appID, name: shuffle.TopicName(appID, shuffle.PipelineTopic), brokers: brokers, security: sec, adm: kadm.NewClient(cl), raw: cl}
	if create {
		if err := t.create(ctx, replication); err != nil {
			t.Close()
			return nil, kafkaconn.Explain(err, brokers, sec)
		}
	}
	return t, nil
}

// Name is the topic's Kafka name.
func (t *Topic) Name() string { return t.name }

// Close releases the topic's clients.
func (t *Topic) Close() { t.adm.Close() }

func (t *Topic) create(ctx context.Context, replication int) error {
	compact := "compact"
	resp, err := t.adm.CreateTopic(ctx, 1, int16(replication), map[string]*string{"cleanup.policy": &compact}, t.name)
	if err == nil {
		err = resp.Err
	}
	if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		return fmt.Errorf("creating the pipeline topic %s: %w", t.name, err)
	}
	// Created here or by another instance a moment ago: until the
	// partition has a leader, producing to it fails.
	partitions, err := topics.WaitForLeaders(ctx, t.raw, t.name)
	if err != nil {
		return fmt.Errorf("pipeline topic %s: %w", t.name, err)
	}
	if n := partitions[t.name]; n != 1 {
		return fmt.Errorf("pipeline topic %s has %d partitions, want 1 (made by something other than ksrunner? use a new application_id)", t.name, n)
	}
	return nil
}

// readAll returns the latest value of every key on the topic (a nil value:
// a tombstone), or nil for a missing or empty topic.
func (t *Topic) readAll(ctx context.Context) (map[string][]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	endOffset, err := t.endOffset(ctx)
	if err != nil || endOffset <= 0 {
		return nil, err
	}
	return t.readTo(ctx, endOffset)
}

// readTo reads the topic from its start up to endOffset, and returns the
// latest value of every key.
//
// endOffset is where the topic ended when it was listed. By the time the
// consumer reads, it may be out of reach: a bounded job's end deletes the
// pipeline topic, and its application's next job creates it again under
// the same name; listed while the broker still answered for the old topic,
// the end offset belongs to a topic the consumer no longer sees. Kafka's
// client delivers no empty fetches, so a read that waits for records
// below such an end offset would wait until it times out. Whenever a poll
// brings nothing for idleRecheck, the end offset is listed again and
// becomes the target: a topic that ends where the read is, is read.
func (t *Topic) readTo(ctx context.Context, endOffset int64) (map[string][]byte, error) {
	// The client retries what Kafka calls retriable out of sight; its last
	// warning says why a read that times out made no progress.
	var warned lastWarning
	cl, err := kafkaconn.NewClient(t.brokers, t.security,
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.name: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.FetchMaxBytes(16<<20),
		// A transaction's marker may end the topic: kept, it moves
		// the read past itself.
		kgo.KeepControlRecords(),
		kgo.WithLogger(&warned),
	)
	if err != nil {
		return nil, fmt.Errorf("pipeline topic %s: %w", t.name, err)
	}
	defer cl.Close()
	latest := map[string][]byte{}
	next := int64(0)
	for next < endOffset {
		pctx, cancel := context.WithTimeout(ctx, idleRecheck)
		fetches := cl.PollFetches(pctx)
		idle := pctx.Err() != nil && fetches.NumRecords() == 0
		cancel()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("pipeline topic %s: reading up to offset %d (at %d; %s; the client's last warning: %s): %w",
				t.name, endOffset, next, t.stableOffset(), warned.String(), context.Cause(ctx))
		}
		if idle {
			end, err := t.endOffset(ctx)
			if err != nil {
				return nil, err
			}
			endOffset = end
			continue
		}
		if err := fetches.Err0(); err != nil {
			return nil, fmt.Errorf("pipeline topic %s: %w", t.name, err)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if !r.Attrs.IsControl() {
				latest[string(r.Key)] = r.Value
			}
			next = r.Offset + 1
		})
	}
	return latest, nil
}

// idleRecheck is how long readTo waits for records before it lists the
// topic's end offset again.
const idleRecheck = time.Second

// Manifest returns the topic's manifest, or nil when there is none (no
// application, or its topics were deleted). The topic is read again only
// when its end offset moved: a worker asks every second, and the pieces
// (artifacts, modules) can be large.
func (t *Topic) Manifest(ctx context.Context) (*Manifest, error) {
	end, err := t.endOffset(ctx)
	if err != nil {
		return nil, err
	}
	if t.cached && end == t.cachedEnd {
		return t.cachedManifest, nil
	}
	all, err := t.readAll(ctx)
	if err != nil {
		return nil, err
	}
	m, err := manifestOf(t.name, all)
	if err != nil {
		return nil, err
	}
	t.cached, t.cachedEnd, t.cachedManifest = true, end, m
	return m, nil
}

// endOffset is the topic's end offset (-1: no topic).
func (t *Topic) endOffset(ctx context.Context) (int64, error) {
	ends, err := t.adm.ListEndOffsets(ctx, t.name)
	if err != nil {
		return 0, fmt.Errorf("pipeline topic %s: end offset: %w", t.name, err)
	}
	end, ok := ends.Lookup(t.name, 0)
	if !ok || errors.Is(end.Err, kerr.UnknownTopicOrPartition) {
		return -1, nil
	}
	if end.Err != nil {
		return 0, fmt.Errorf("pipeline topic %s: end offset: %w", t.name, end.Err)
	}
	return end.Offset, nil
}

func manifestOf(topic string, all map[string][]byte) (*Manifest, error) {
	b := all[manifestKey]
	if b == nil {
		return nil, nil
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("pipeline topic %s: manifest: %w", topic, err)
	}
	return &m, nil
}

// Load reads the manifest and the Spec it names; both nil when there is no
// manifest.
func (t *Topic) Load(ctx context.Context) (*Manifest, *Spec, error) {
	all, err := t.readAll(ctx)
	if err != nil {
		return nil, nil, err
	}
	m, err := manifestOf(t.name, all)
	if m == nil || err != nil {
		return nil, nil, err
	}
	blob := make([]byte, 0, m.Size)
	for n := range m.Pieces {
		p, ok := all[pieceKey(m.Fingerprint, n)]
		if !ok || p == nil {
			return nil, nil, fmt.Errorf("pipeline topic %s: piece %d of %d of pipeline %s (job %s) is missing", t.name, n, m.Pieces, m.Fingerprint, m.JobID)
		}
		blob = append(blob, p...)
	}
	if sum := sha256.Sum256(blob); hex.EncodeToString(sum[:]) != m.SHA256 || len(blob) != m.Size {
		return nil, nil, fmt.Errorf("pipeline topic %s: the pieces of pipeline %s (job %s) do not match its checksum (%d bytes, want %d)", t.name, m.Fingerprint, m.JobID, len(blob), m.Size)
	}
	s, err := decodeSpec(blob)
	if err != nil {
		return nil, nil, fmt.Errorf("pipeline topic %s: %w", t.name, err)
	}
	return m, s, nil
}

// Outcome is what Publish did.
type Outcome int

const (
	// Published: the Spec is now the application's (a new application, or
	// one that was cancelled, done, or left by all its processes).
	Published Outcome = iota
	// Joined: the application already runs this pipeline.
	Joined
)

// Publish makes spec the application's job, unless the application is live
// with another pipeline, or live and draining (any pipeline, this one too:
// written over the drain's manifest, it would have the drained job resumed
// as running by the next restart, or the drain's end recorded over it):
// those are refused, naming the application id and the job. live reports
// whether the application's consumer group has members (GroupLive); a
// drain whose process is gone is replaced as a stopped job is. replaced,
// when Publish replaced another pipeline, is that pipeline's manifest.
func (t *Topic) Publish(ctx context.Context, spec *Spec) (out Outcome, replaced *Manifest, err error) {
	fp, err := spec.Fingerprint()
	if err != nil {
		return 0, nil, err
	}
	m, err := t.Manifest(ctx)
	if err != nil {
		return 0, nil, err
	}
	if err := t.sameLayout(spec, m); err != nil {
		return 0, nil, err
	}
	if m != nil && m.State == Running {
		if m.Fingerprint == fp {
			return Joined, nil, nil
		}
		live, err := GroupLive(ctx, t.adm, t.appID)
		if err != nil {
			return 0, nil, err
		}
		if live {
			return 0, nil, fmt.Errorf("application_id %q is running another pipeline (job %s, %q, submitted %s by %s; fingerprint %s, this one %s): cancel that job first, or submit this pipeline under another application_id",
				t.appID, m.JobID, m.JobName, m.Written.Format(time.RFC3339), m.By, m.Fingerprint, fp)
		}
	}
	if m != nil && m.State == Draining {
		live, err := GroupLive(ctx, t.adm, t.appID)
		if err != nil {
			return 0, nil, err
		}
		if live {
			return 0, nil, fmt.Errorf("application_id %q is draining job %s (%q; the drain was recorded at %s by %s): submit when that job has ended (DONE: the application then records drained), or submit under another application_id",
				t.appID, m.JobID, m.JobName, m.Written.Format(time.RFC3339), m.By)
		}
	}
	if err := t.write(ctx, spec, fp, m); err != nil {
		return 0, nil, err
	}
	if m != nil && m.Fingerprint != fp {
		replaced = m
	}
	return Published, replaced, nil
}

// sameLayout refuses spec when the application's manifest m is the same
// pipeline laid out by other rules (an application started by another
// ksrunner version), whatever its state: its changelogs, internal topics
// and committed offsets are those of the other layout's sub-topologies,
// which this one numbers and feeds differently, so its state and the
// records in flight would not carry over (a cancelled or drained job too
// leaves state: global windows, kept topics). Another pipeline is not
// this function's business (Publish decides).
func (t *Topic) sameLayout(spec *Spec, m *Manifest) error {
	if m == nil || LayoutOf(m.Layout) == LayoutOf(spec.Layout) {
		return nil
	}
	fp, err := spec.fingerprintAt(m.Layout)
	if err != nil || fp != m.Fingerprint {
		return err
	}
	return &LayoutError{AppID: t.appID, JobID: m.JobID, JobName: m.JobName, State: m.State, Have: LayoutOf(m.Layout), Want: LayoutOf(spec.Layout)}
}

// LayoutError is the refusal of a job whose application was laid out by
// another version of ksrunner's layout rules (see Spec.Layout).
type LayoutError struct {
	AppID, JobID, JobName string
	State                 State
	// Have is the application's layout, Want this ksrunner's for the
	// pipeline.
	Have, Want int
}

func (e *LayoutError) Error() string {
	return fmt.Sprintf("application_id %q holds this pipeline (job %s, %q, %s) as another ksrunner version laid it out (layout %d); this version lays it out differently (layout %d: %s), so the application's state and the records in flight on its internal topics would not carry over. "+
		"Run it with the ksrunner version that started it, or drain it there, reset the application (`ksrunner reset --application_id %[1]s`: its state goes, its Kafka reads' offsets stay) and submit the pipeline again",
		e.AppID, e.JobID, e.JobName, e.State, e.Have, e.Want, translate.LayoutChange(max(e.Have, e.Want)))
}

// write produces spec's pieces, then its manifest (state Running), then
// tombstones for the pieces of old, if it was another pipeline.
func (t *Topic) write(ctx context.Context, spec *Spec, fp string, old *Manifest) error {
	blob, err := spec.encode()
	if err != nil {
		return err
	}
	sum := sha256.Sum256(blob)
	m := Manifest{Format: specFormat, Fingerprint: fp, JobID: spec.JobID, JobName: spec.JobName, State: Running, Layout: spec.Layout,
		Size: len(blob), SHA256: hex.EncodeToString(sum[:]), Written: time.Now().UTC(), By: processName()}
	var recs []*kgo.Record
	for off := 0; off < len(blob) || off == 0; off += pieceBytes {
		piece := blob[off:min(off+pieceBytes, len(blob))]
		recs = append(recs, &kgo.Record{Topic: t.name, Key: []byte(pieceKey(fp, m.Pieces)), Value: piece})
		m.Pieces++
		if len(blob) == 0 {
			break
		}
	}
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	recs = append(recs, &kgo.Record{Topic: t.name, Key: []byte(manifestKey), Value: mb})
	if old != nil && old.Fingerprint != fp {
		for n := range old.Pieces {
			recs = append(recs, &kgo.Record{Topic: t.name, Key: []byte(pieceKey(old.Fingerprint, n))})
		}
	}
	return t.produce(ctx, recs...)
}

// produce writes recs in order and waits for all of them. One producer
// with one partition keeps them in order (idempotence keeps retries from
// reordering them).
func (t *Topic) produce(ctx context.Context, recs ...*kgo.Record) error {
	cl, err := kafkaconn.NewClient(t.brokers, t.security, kgo.ProducerBatchMaxBytes(1<<20), kgo.ProducerLinger(0))
	if err != nil {
		return fmt.Errorf("pipeline topic %s: %w", t.name, err)
	}
	defer cl.Close()
	for _, r := range recs {
		r.Partition = 0
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("writing the pipeline topic %s: %w", t.name, err)
	}
	return nil
}

// SetState records state for the pipeline of fingerprint fp, if it is still
// the application's (a job that ends does not overwrite its replacement's
// manifest).
func (t *Topic) SetState(ctx context.Context, fp string, state State) error {
	m, err := t.Manifest(ctx)
	if err != nil || m == nil || m.Fingerprint != fp || m.State == state {
		return err
	}
	m.State, m.Written, m.By = state, time.Now().UTC(), processName()
	mb, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return t.produce(ctx, &kgo.Record{Topic: t.name, Key: []byte(manifestKey), Value: mb})
}

// GroupLive reports whether consumer group group has members: a group that
// does not exist, is empty or dead has none.
func GroupLive(ctx context.Context, adm *kadm.Client, group string) (bool, error) {
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		return false, fmt.Errorf("consumer group %s: listing groups: %w", group, err)
	}
	g, ok := listed[group]
	if !ok {
		return false, nil
	}
	switch g.State {
	case "Empty", "Dead":
		return false, nil
	}
	return true, nil
}

func processName() string {
	h, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", h, os.Getpid())
}

// stableOffset says where the partition's last stable offset is, which a
// read_committed read cannot pass: a transaction left open on the topic
// holds it.
func (t *Topic) stableOffset() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ends, err := t.adm.ListCommittedOffsets(ctx, t.name)
	if err == nil {
		err = ends.Error()
	}
	if err != nil {
		return fmt.Sprintf("its last stable offset unknown: %v", err)
	}
	end, _ := ends.Lookup(t.name, 0)
	return fmt.Sprintf("its last stable offset %d", end.Offset)
}

// lastWarning is a kgo.Logger that keeps the client's last warning or
// error, for the message of an operation that timed out.
type lastWarning struct {
	mu  sync.Mutex
	msg string
}

func (l *lastWarning) Level() kgo.LogLevel { return kgo.LogLevelWarn }

func (l *lastWarning) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	s := msg
	for i := 0; i+1 < len(keyvals); i += 2 {
		s += fmt.Sprintf(" %v=%v", keyvals[i], keyvals[i+1])
	}
	l.mu.Lock()
	l.msg = s
	l.mu.Unlock()
}

func (l *lastWarning) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.msg == "" {
		return "none"
	}
	return l.msg
}
