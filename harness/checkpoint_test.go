package harness_test

import (
	"context"
	"strings"
	"testing"
	"time"

	fnpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/fnexecution_v1"

	"github.com/ksrunner/ksrunner/harness"
)

// checkpointing is a FinishCheckpointing running in its own goroutine.
type checkpointing struct {
	finished chan error
	res      *harness.Result
}

// startCheckpointing starts a bundle of stage with the input "ab", whose
// ProcessBundle the fake SDK fw receives (req) and whose input it reads,
// and finishes it checkpointing after after, telling the SDK it was sent
// elements elements.
func startCheckpointing(t *testing.T, stage *harness.Stage, fw *fakeWorker, after time.Duration, elements int) (*fnpb.InstructionRequest, *checkpointing) {
	t.Helper()
	b, err := stage.StartBundle(context.Background(), func(string, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	req := fw.recvInstruction()
	if err := b.Process([]byte("ab")); err != nil {
		t.Fatal(err)
	}
	cp := &checkpointing{finished: make(chan error, 1)}
	go func() {
		var err error
		cp.res, err = b.FinishCheckpointing(time.Now().Add(after), elements)
		cp.finished <- err
	}()
	if got := fw.readInput(); got != "ab" {
		t.Errorf("SDK got input %q", got)
	}
	return req, cp
}

// result waits for the FinishCheckpointing's Result.
func (cp *checkpointing) result(t *testing.T) *harness.Result {
	t.Helper()
	if err := <-cp.finished; err != nil {
		t.Fatalf("FinishCheckpointing: %v", err)
	}
	return cp.res
}

// splitDeclined is the Go SDK's answer to a split it cannot make.
func splitDeclined(id string) *fnpb.InstructionResponse {
	return &fnpb.InstructionResponse{InstructionId: id, Response: &fnpb.InstructionResponse_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitResponse{}}}
}

// TestFinishCheckpointing drives a bundle past its checkpoint time: the
// SDK is sent a ProcessBundleSplitRequest at fraction 0 for the stage's
// data source, and the Result carries the split's residuals (before the
// bundle's own) and the channel split's first unprocessed element. An SDK
// that declines (with an error, as the Go SDK answers a split that
// overtakes its ProcessBundle, or with an empty answer) is asked again
// until it splits or the bundle ends; a bundle done in time is never
// split.
func TestFinishCheckpointing(t *testing.T) {
	_, stage, fw := startFake(t)
	type answer = func(id string) *fnpb.InstructionResponse
	declineErr := func(id string) *fnpb.InstructionResponse {
		return &fnpb.InstructionResponse{InstructionId: id, Error: "failed to return split: instruction inst-1 not active"}
	}
	split := func(id string) *fnpb.InstructionResponse {
		return &fnpb.InstructionResponse{InstructionId: id, Response: &fnpb.InstructionResponse_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitResponse{
			ResidualRoots: []*fnpb.DelayedBundleApplication{{Application: &fnpb.BundleApplication{TransformId: "t", InputId: "i", Element: []byte("rest")}}},
			ChannelSplits: []*fnpb.ProcessBundleSplitResponse_ChannelSplit{{TransformId: "in", LastPrimaryElement: 0, FirstResidualElement: 1}},
		}}}
	}
	for _, tc := range []struct {
		name    string
		answers []answer // to the split requests, in order
		want    string   // residual elements, comma-separated
		unproc  int
	}{
		{name: "split", answers: []answer{split}, want: "rest,self", unproc: 1},
		{name: "declined, asked again", answers: []answer{declineErr, splitDeclined, split}, want: "rest,self", unproc: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, cp := startCheckpointing(t, stage, fw, 50*time.Millisecond, 2)
			for _, answer := range tc.answers {
				split := fw.recvInstructionWithin(10*time.Second, "a split request")
				sr := split.GetProcessBundleSplit()
				if sr.GetInstructionId() != req.GetInstructionId() {
					t.Fatalf("after the checkpoint time the SDK got %v, want a split of bundle %s", split, req.GetInstructionId())
				}
				ds := sr.GetDesiredSplits()["in"]
				if len(sr.GetDesiredSplits()) != 1 || ds == nil || ds.GetFractionOfRemainder() != 0 || ds.GetEstimatedInputElements() != 2 {
					t.Errorf("desired splits %v, want fraction 0 of the data source \"in\" of 2 elements", sr.GetDesiredSplits())
				}
				fw.respond(answer(split.GetInstructionId()))
			}
			fw.sendOutput(req.GetInstructionId(), "", true)
			fw.respond(&fnpb.InstructionResponse{InstructionId: req.GetInstructionId(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{
				ResidualRoots: []*fnpb.DelayedBundleApplication{{Application: &fnpb.BundleApplication{TransformId: "t", InputId: "i", Element: []byte("self")}}},
			}}})
			res := cp.result(t)
			var got []string
			for _, r := range res.Residuals {
				got = append(got, string(r.Element))
			}
			if strings.Join(got, ",") != tc.want || res.Unprocessed != tc.unproc || !res.Checkpointed {
				t.Errorf("residuals %q, unprocessed from %d, checkpointed %v; want %q, %d, true", got, res.Unprocessed, res.Checkpointed, tc.want, tc.unproc)
			}
		})
	}
	t.Run("in time", func(t *testing.T) {
		b, err := stage.StartBundle(context.Background(), func(string, []byte) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		req := fw.recvInstruction()
		finished := make(chan error, 1)
		go func() {
			res, err := b.FinishCheckpointing(time.Now().Add(time.Hour), 0)
			if err == nil && (res.Checkpointed || res.Unprocessed != -1) {
				t.Errorf("a bundle done in time: checkpointed %v, unprocessed from %d", res.Checkpointed, res.Unprocessed)
			}
			finished <- err
		}()
		fw.readInput()
		fw.sendOutput(req.GetInstructionId(), "", true)
		fw.respond(&fnpb.InstructionResponse{InstructionId: req.GetInstructionId(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{}}})
		if err := <-finished; err != nil {
			t.Fatal(err)
		}
		// The next instruction is the next bundle's, not a split.
		if _, err := stage.StartBundle(context.Background(), func(string, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if next := fw.recvInstruction(); next.GetProcessBundle() == nil {
			t.Errorf("after a bundle done in time the SDK got %v, want the next ProcessBundle", next)
		}
	})
}

// TestCheckpointDeclinedToTheEnd: an SDK that declines every checkpoint is
// asked again until the bundle ends, which then completes unsplit with its
// own residuals.
func TestCheckpointDeclinedToTheEnd(t *testing.T) {
	_, stage, fw := startFake(t)
	req, cp := startCheckpointing(t, stage, fw, 20*time.Millisecond, 1)
	first := fw.recvInstructionWithin(10*time.Second, "a split request")
	fw.respond(splitDeclined(first.GetInstructionId()))
	again := fw.recvInstructionWithin(10*time.Second, "the split asked again")
	if again.GetProcessBundleSplit().GetInstructionId() != req.GetInstructionId() {
		t.Fatalf("after a declined checkpoint the SDK got %v, want a split of bundle %s", again, req.GetInstructionId())
	}
	// The bundle ends while the split is asked again; that split, and any
	// the harness sends before it sees the end, are declined.
	fw.sendOutput(req.GetInstructionId(), "", true)
	fw.respond(&fnpb.InstructionResponse{InstructionId: req.GetInstructionId(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{
		ResidualRoots: []*fnpb.DelayedBundleApplication{{Application: &fnpb.BundleApplication{TransformId: "t", InputId: "i", Element: []byte("self")}}},
	}}})
	fw.respond(splitDeclined(again.GetInstructionId()))
	go func() { // ends with the worker's streams, at the test's cleanup
		for {
			req, err := fw.control.Recv()
			if err != nil {
				return
			}
			if req.GetProcessBundleSplit() != nil {
				if fw.control.Send(splitDeclined(req.GetInstructionId())) != nil {
					return
				}
			}
		}
	}()
	res := cp.result(t)
	if len(res.Residuals) != 1 || string(res.Residuals[0].Element) != "self" || res.Checkpointed || res.Unprocessed != -1 {
		t.Errorf("residuals %v, checkpointed %v, unprocessed from %d; want only the bundle's own, not checkpointed, -1", res.Residuals, res.Checkpointed, res.Unprocessed)
	}
}

// TestSplit: a split asked for while FinishCheckpointing waits gives its
// rest to the caller, not to the bundle's Result; a declined one (an error
// or an empty answer) moves nothing.
func TestSplit(t *testing.T) {
	_, stage, fw := startFake(t)
	for _, tc := range []struct {
		name   string
		answer func(id string) *fnpb.InstructionResponse
		ok     bool
		want   string // residual elements, comma-separated
		unproc int
	}{
		{"split", func(id string) *fnpb.InstructionResponse {
			return &fnpb.InstructionResponse{InstructionId: id, Response: &fnpb.InstructionResponse_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitResponse{
				ResidualRoots: []*fnpb.DelayedBundleApplication{{Application: &fnpb.BundleApplication{TransformId: "t", InputId: "i", Element: []byte("half")}}},
				ChannelSplits: []*fnpb.ProcessBundleSplitResponse_ChannelSplit{{TransformId: "in", LastPrimaryElement: 0, FirstResidualElement: 1}},
			}}}
		}, true, "half", -1},
		{"not begun", func(id string) *fnpb.InstructionResponse {
			return &fnpb.InstructionResponse{InstructionId: id, Response: &fnpb.InstructionResponse_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitResponse{
				ChannelSplits: []*fnpb.ProcessBundleSplitResponse_ChannelSplit{{TransformId: "in", LastPrimaryElement: -1, FirstResidualElement: 0}},
			}}}
		}, true, "", 0},
		{"declined with an error", func(id string) *fnpb.InstructionResponse {
			return &fnpb.InstructionResponse{InstructionId: id, Error: "nothing to split"}
		}, false, "", -1},
		{"declined empty", func(id string) *fnpb.InstructionResponse {
			return &fnpb.InstructionResponse{InstructionId: id, Response: &fnpb.InstructionResponse_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitResponse{}}}
		}, false, "", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := stage.StartBundle(context.Background(), func(string, []byte) error { return nil })
			if err != nil {
				t.Fatal(err)
			}
			req := fw.recvInstruction()
			if err := b.Process([]byte("a")); err != nil {
				t.Fatal(err)
			}
			finished := make(chan error, 1)
			var res *harness.Result
			go func() {
				var err error
				res, err = b.FinishCheckpointing(time.Now().Add(time.Hour), 1)
				finished <- err
			}()
			if got := fw.readInput(); got != "a" {
				t.Errorf("SDK got input %q", got)
			}
			type splitResult struct {
				rs     []harness.Residual
				unproc int
				ok     bool
				err    error
			}
			split := make(chan splitResult, 1)
			go func() {
				var r splitResult
				r.rs, r.unproc, r.ok, r.err = b.Split(0.5, 1)
				split <- r
			}()
			sreq := fw.recvInstruction()
			ds := sreq.GetProcessBundleSplit().GetDesiredSplits()["in"]
			if sreq.GetProcessBundleSplit().GetInstructionId() != req.GetInstructionId() || ds.GetFractionOfRemainder() != 0.5 || ds.GetEstimatedInputElements() != 1 {
				t.Fatalf("the SDK got %v, want a split of bundle %s at 0.5 of its 1 element", sreq, req.GetInstructionId())
			}
			fw.respond(tc.answer(sreq.GetInstructionId()))
			got := <-split
			if got.err != nil {
				t.Fatalf("Split: %v", got.err)
			}
			var elems []string
			for _, r := range got.rs {
				elems = append(elems, string(r.Element))
			}
			if got.ok != tc.ok || strings.Join(elems, ",") != tc.want || got.unproc != tc.unproc {
				t.Errorf("split: ok %v, residuals %q, unprocessed from %d; want %v, %q, %d", got.ok, elems, got.unproc, tc.ok, tc.want, tc.unproc)
			}
			fw.sendOutput(req.GetInstructionId(), "", true)
			fw.respond(&fnpb.InstructionResponse{InstructionId: req.GetInstructionId(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{}}})
			if err := <-finished; err != nil {
				t.Fatalf("FinishCheckpointing: %v", err)
			}
			if len(res.Residuals) != 0 || res.Checkpointed || res.Unprocessed != -1 {
				t.Errorf("the bundle's result holds residuals %d, checkpointed %v, unprocessed from %d; want none of the split", len(res.Residuals), res.Checkpointed, res.Unprocessed)
			}
		})
	}
}

// TestSplitGivesInputOnce: an SDK that answers two splits of a bundle
// (Split's, then the checkpoint's) that it did not begin its element
// gives the element to the first caller only: the checkpoint's Result
// does not hand it back too.
func TestSplitGivesInputOnce(t *testing.T) {
	_, stage, fw := startFake(t)
	b, err := stage.StartBundle(context.Background(), func(string, []byte) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	req := fw.recvInstruction()
	if err := b.Process([]byte("a")); err != nil {
		t.Fatal(err)
	}
	notBegun := func(id string) *fnpb.InstructionResponse {
		return &fnpb.InstructionResponse{InstructionId: id, Response: &fnpb.InstructionResponse_ProcessBundleSplit{ProcessBundleSplit: &fnpb.ProcessBundleSplitResponse{
			ChannelSplits: []*fnpb.ProcessBundleSplitResponse_ChannelSplit{{TransformId: "in", LastPrimaryElement: -1, FirstResidualElement: 0}},
		}}}
	}
	finished := make(chan error, 1)
	var res *harness.Result
	go func() {
		var err error
		res, err = b.FinishCheckpointing(time.Now().Add(200*time.Millisecond), 1)
		finished <- err
	}()
	fw.readInput()
	split := make(chan int, 1)
	go func() {
		_, unprocessed, ok, err := b.Split(0.5, 1)
		if err != nil || !ok {
			t.Errorf("Split: ok %v, %v", ok, err)
		}
		split <- unprocessed
	}()
	fw.respond(notBegun(fw.recvInstruction().GetInstructionId()))
	if got := <-split; got != 0 {
		t.Fatalf("Split gave input from %d, want 0", got)
	}
	fw.respond(notBegun(fw.recvInstruction().GetInstructionId())) // the checkpoint's
	fw.sendOutput(req.GetInstructionId(), "", true)
	fw.respond(&fnpb.InstructionResponse{InstructionId: req.GetInstructionId(), Response: &fnpb.InstructionResponse_ProcessBundle{ProcessBundle: &fnpb.ProcessBundleResponse{}}})
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if res.Unprocessed != -1 {
		t.Errorf("the checkpoint's Result gives input from %d, want -1: Split gave it already", res.Unprocessed)
	}
}
