package task

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/ksrunner/ksrunner/host/internal/state"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"
	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"

	"github.com/ksrunner/ksrunner/shuffle"
	"github.com/ksrunner/ksrunner/translate"
	"github.com/ksrunner/ksrunner/translate/windowing"
)

// testStreamRoot runs a TestStream (translate.RootTestStream). Its topic
// holds one record, like an impulse's; when it arrives the task runs every
// event in order within one commit interval (so the whole TestStream commits
// at once, and a restart after the commit does not replay it):
//
//   - element batches: each element in the global window at its timestamp,
//     with the no-firing pane, routed to the root's consumers;
//   - watermark advances: the stages' bundles close, then the new watermark
//     is reported downstream (after the elements it covers);
//   - processing-time advances: the bundles close, then the synthetic clock
//     goes downstream in a PROCESSING_TIME record (see eventTime).
//
// The synthetic clock starts at the wall-clock time the TestStream starts
// (absolute only for aligned processing-time triggers) and is sent before
// the first event. After the last event the watermark goes to +inf.
type testStreamRoot struct {
	payload   *pipepb.TestStreamPayload
	triggered bool  // the topic's record arrived
	done      bool  // every event ran (stored)
	clock     int64 // the synthetic processing time
	wm        int64 // the output watermark so far
	started   bool
	// tagWM is each output's watermark (several outputs only).
	tagWM map[string]int64
	// nest appends an element given in its coder's outer context in the
	// nested form (Root.TestStreamOuterContext); nil: elements are nested.
	nest func(dst, elem []byte) ([]byte, error)
}

// outerToNested returns the conversion of values of coder id from Beam's
// outer context (the whole value is the buffer: bytes and strings carry no
// length) to the nested one, or nil when both encode alike. Only bytes and
// strings differ, at the top or as the last component of a KV (whose key is
// nested either way); the other coders the host parses encode alike in
// both contexts.
func outerToNested(coders map[string]*pipepb.Coder, id string) (func(dst, elem []byte) ([]byte, error), error) {
	c := coders[id]
	switch c.GetSpec().GetUrn() {
	case "beam:coder:bytes:v1", "beam:coder:string_utf8:v1":
		return func(dst, elem []byte) ([]byte, error) {
			return append(binary.AppendUvarint(dst, uint64(len(elem))), elem...), nil
		}, nil
	case "beam:coder:kv:v1":
		if len(c.GetComponentCoderIds()) != 2 {
			return nil, fmt.Errorf("coder %q: a KV needs 2 components", id)
		}
		value, err := outerToNested(coders, c.GetComponentCoderIds()[1])
		if err != nil || value == nil {
			return nil, err
		}
		keyLen, err := shuffle.ValueLength(coders, c.GetComponentCoderIds()[0])
		if err != nil {
			return nil, fmt.Errorf("coder %q: key: %w", id, err)
		}
		return func(dst, elem []byte) ([]byte, error) {
			n, err := keyLen(elem)
			if err != nil {
				return nil, fmt.Errorf("key: %w", err)
			}
			return value(append(dst, elem[:n]...), elem[n:])
		}, nil
	}
	return nil, nil
}

// output is the PCollection of an event's tag.
func (r *testStreamRoot) output(root translate.Root, tag string) string {
	if pc, ok := root.TestStreamOutputs[tag]; ok {
		return pc
	}
	return root.Output
}

func (r *testStreamRoot) watermark() int64 {
	if r.done {
		return maxWatermark
	}
	if !r.started {
		return minWatermark
	}
	return r.wm
}

// noFiringPane is the encoded pane of TestStream elements.
var noFiringPane = func() []byte {
	b, err := windowing.EncodePane(typex.NoFiringPane())
	if err != nil {
		panic(err)
	}
	return b
}()

// runTestStream runs the events once the topic's record has arrived.
func (e *eventTime) runTestStream(ctx context.Context) error {
	r, t := e.ts, e.t
	if !r.triggered || r.done {
		return nil
	}
	r.started, r.wm = true, minWatermark
	r.clock = time.Now().UnixMilli()
	sendClock := func() {
		e.sentPT = r.clock
		t.broadcast(shuffle.EncodeProcessingTime(t.producer, r.clock))
	}
	sendClock()
	for _, ev := range r.payload.GetEvents() {
		switch x := ev.GetEvent().(type) {
		case *pipepb.TestStreamPayload_Event_ElementEvent:
			for _, el := range x.ElementEvent.GetElements() {
				b := binary.BigEndian.AppendUint64(make([]byte, 0, 16+len(el.GetEncodedElement())), state.EventTimeBits(el.GetTimestamp()))
				b = binary.BigEndian.AppendUint32(b, 1) // the global window, encoded as nothing
				b = append(b, noFiringPane...)
				switch {
				case t.sub.Root.TestStreamLengthPrefix:
					b = binary.AppendUvarint(b, uint64(len(el.GetEncodedElement())))
					b = append(b, el.GetEncodedElement()...)
				case r.nest != nil:
					var err error
					if b, err = r.nest(b, el.GetEncodedElement()); err != nil {
						return fmt.Errorf("TestStream %s: element %x: %w", t.sub.Root.TransformID, el.GetEncodedElement(), err)
					}
				default:
					b = append(b, el.GetEncodedElement()...)
				}
				if err := t.route(r.output(t.sub.Root, x.ElementEvent.GetTag()), b); err != nil {
					return err
				}
			}
		case *pipepb.TestStreamPayload_Event_WatermarkEvent:
			wm := min(max(x.WatermarkEvent.GetNewWatermark(), minWatermark), maxWatermark)
			if outs := t.sub.Root.TestStreamOutputs; len(outs) > 1 {
				// One watermark per output; the task has one: the least.
				if r.tagWM == nil {
					r.tagWM = map[string]int64{}
				}
				tag := x.WatermarkEvent.GetTag()
				if old, ok := r.tagWM[tag]; !ok || wm > old {
					r.tagWM[tag] = wm
				}
				wm = maxWatermark
				for tag := range outs {
					w, ok := r.tagWM[tag]
					if !ok {
						w = minWatermark // no watermark event for this output yet
					}
					wm = min(wm, w)
				}
			}
			if wm <= r.wm {
				continue
			}
			if err := t.flushStages(ctx, true); err != nil {
				return err
			}
			r.wm = wm
			// Through outputWatermark: holds of the sub-topology's stages
			// (side input gates, user timers) still apply.
			out, err := t.outputWatermark(t.inputWatermark())
			if err != nil {
				return err
			}
			if out > t.reportedWM {
				t.reportWatermark(out)
			}
		case *pipepb.TestStreamPayload_Event_ProcessingTimeEvent:
			d := x.ProcessingTimeEvent.GetAdvanceDuration()
			if d <= 0 {
				continue
			}
			if err := t.flushStages(ctx, true); err != nil {
				return err
			}
			if d >= maxWatermark-r.clock {
				r.clock = maxWatermark
			} else {
				r.clock += d
			}
			sendClock()
		}
	}
	if err := t.flushStages(ctx, true); err != nil {
		return err
	}
	r.done = true
	return t.batch.Set(t.key(state.TestStreamDone), binary.BigEndian.AppendUint64(nil, uint64(r.clock)), nil)
}
