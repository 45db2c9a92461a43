package application

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/ksrunner/ksrunner/shuffle/kafkatest"
)

// followed runs Follow on application app of b with a job that runs until
// its context ends; running receives true when the job starts and false
// when it ends, done Follow's result.
func followed(t *testing.T, ctx context.Context, b *kafkatest.SwitchedBroker, app string, unavailable time.Duration) (running chan bool, done chan error) {
	t.Helper()
	tp := openTopic(ctx, t, b.Addr, app)
	spec := &Spec{JobID: "count-1", JobName: "count", Pipeline: testPipeline("Count", "localhost:1"), RawOptions: &structpb.Struct{}, Topology: "p=1"}
	if _, _, err := tp.Publish(ctx, spec); err != nil {
		t.Fatal(err)
	}
	running, done = make(chan bool, 2), make(chan error, 1)
	go func() {
		done <- Follow(ctx, tp, FollowConfig{
			Poll:        100 * time.Millisecond,
			Unavailable: unavailable,
			Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
			Run: func(ctx context.Context, _ *Manifest, _ *Spec) error {
				running <- true
				<-ctx.Done()
				running <- false
				return nil
			},
		})
	}()
	select {
	case <-running:
	case err := <-done:
		t.Fatalf("Follow returned before it ran the job: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the job did not start within 30s")
	}
	return running, done
}

// TestFollowGivesUpOnBrokers: a worker whose brokers stay out of reach for
// broker_unavailable_timeout_ms fails then (not at franz-go's 30 s retry
// limit, nor never), with an error naming the pipeline topic, the brokers
// and the option, after stopping the job it ran.
func TestFollowGivesUpOnBrokers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := kafkatest.NewSwitchedBroker(t)
	const unavailable = 2 * time.Second
	running, done := followed(t, ctx, b, "app-gives-up", unavailable)
	b.Off.Store(true)
	off := time.Now()
	var err error
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("Follow still runs 20s into an outage (broker_unavailable_timeout_ms %d)", unavailable.Milliseconds())
	}
	took := time.Since(off)
	for _, want := range []string{"pipeline topic __beam_app-gives-up_pipeline", "Kafka brokers " + b.Addr, "broker_unavailable_timeout_ms 2000"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Follow's error: %v, want it to say %q", err, want)
		}
	}
	// The last read that succeeded was at most a poll before the switch.
	if took < unavailable-100*time.Millisecond {
		t.Errorf("Follow gave up %v into the outage, before broker_unavailable_timeout_ms (%v)", took, unavailable)
	}
	select {
	case r := <-running:
		if r {
			t.Error("the job started again")
		}
	default:
		t.Error("Follow returned with its job still running")
	}
	t.Logf("Follow gave up %v into the outage: %v", took.Round(time.Millisecond), err)
}

// TestFollowRidesOutAnOutage: an outage shorter than
// broker_unavailable_timeout_ms leaves the worker and its job running, and
// Follow sees the manifest change once the brokers answer again.
func TestFollowRidesOutAnOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := kafkatest.NewSwitchedBroker(t)
	running, done := followed(t, ctx, b, "app-rides-out", 20*time.Second)
	b.Off.Store(true)
	// Out of reach until Follow's reads have been refused for a while.
	for start := time.Now(); b.Refused.Load() < 20 || time.Since(start) < time.Second; {
		select {
		case err := <-done:
			t.Fatalf("Follow returned %v into an outage shorter than broker_unavailable_timeout_ms: %v", time.Since(start).Round(time.Millisecond), err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Since(start) > 20*time.Second {
			t.Fatalf("Follow tried the broker %d times in 20s of outage", b.Refused.Load())
		}
	}
	b.Off.Store(false)
	select {
	case err := <-done:
		t.Fatalf("Follow returned during an outage shorter than broker_unavailable_timeout_ms: %v", err)
	case <-running:
		t.Fatal("the job stopped during the outage")
	default:
	}
	tp := openTopic(ctx, t, b.Addr, "app-rides-out")
	fp, err := (&Spec{Pipeline: testPipeline("Count", "localhost:1"), Topology: "p=1"}).Fingerprint()
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.SetState(ctx, fp, Cancelled); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-running:
		if r {
			t.Fatal("the job started again")
		}
	case err := <-done:
		t.Fatalf("Follow returned: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the cancel on the pipeline topic did not stop the job within 30s of the brokers' return")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Follow, its context ended: %v", err)
	}
}

// TestFollowRefusedLayout: a job this ksrunner refuses for its layout
// (LayoutError) is not run again and again, as a failed one is, until the
// manifest names another pipeline.
func TestFollowRefusedLayout(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bootstrap := kafkatest.Broker(t)
	app := kafkatest.UniqueName(t, "refused")
	tp := openTopic(ctx, t, bootstrap, app)
	first := &Spec{JobID: "count-1", JobName: "count", Pipeline: testPipeline("Count", "localhost:1"), RawOptions: &structpb.Struct{}, Topology: "p=1"}
	if _, _, err := tp.Publish(ctx, first); err != nil {
		t.Fatal(err)
	}
	runs := make(chan string, 100)
	done := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	go func() {
		done <- Follow(fctx, tp, FollowConfig{
			Poll:   20 * time.Millisecond,
			Retry:  20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Run: func(ctx context.Context, m *Manifest, _ *Spec) error {
				runs <- m.JobID
				if m.JobID == "count-1" {
					return &LayoutError{AppID: app, JobID: m.JobID, Have: 1, Want: 2}
				}
				<-ctx.Done()
				return nil
			},
		})
	}()
	defer func() { stop(); <-done }()
	if id := <-runs; id != "count-1" {
		t.Fatalf("first run: job %s", id)
	}
	// Fifty retry intervals: a failed job would have run again by now.
	select {
	case id := <-runs:
		t.Fatalf("the refused job ran again (job %s)", id)
	case <-time.After(50 * 20 * time.Millisecond):
	}
	other := &Spec{JobID: "sum-2", JobName: "sum", Pipeline: testPipeline("Sum", "localhost:2"), RawOptions: &structpb.Struct{}, Topology: "p=1"}
	if _, _, err := tp.Publish(ctx, other); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-runs:
		if id != "sum-2" {
			t.Fatalf("after the replacement: job %s ran, want sum-2", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the pipeline that replaced the refused one did not run within 30s")
	}
}
