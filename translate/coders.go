package translate

import (
	"bytes"
	"fmt"

	pipepb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/pipeline_v1"
)

// safeCoder returns the id of a coder the host can parse that encodes like
// cid: cid itself when it only uses host coders, else a copy in which every
// unknown coder is wrapped in a length prefix (new coders are added to the
// components). Length-prefixed coders are opaque: their component is kept.
func (t *translator) safeCoder(cid string) (string, error) {
	if s, ok := t.safeMemo[cid]; ok {
		return s, nil
	}
	c := t.comps.GetCoders()[cid]
	if c == nil {
		return "", fmt.Errorf("coder %q is not defined", cid)
	}
	urn := c.GetSpec().GetUrn()
	var out string
	switch {
	case urn == urnCoderTimer:
		// Key and window: the host reads both (timers are stored per key
		// and window), so only the key may need a length prefix.
		if len(c.GetComponentCoderIds()) != 2 {
			return "", fmt.Errorf("coder %q: %s needs 2 components, has %d", cid, urn, len(c.GetComponentCoderIds()))
		}
		key, err := t.safeCoder(c.GetComponentCoderIds()[0])
		if err != nil {
			return "", fmt.Errorf("coder %q: %w", cid, err)
		}
		out = cid
		if key != c.GetComponentCoderIds()[0] {
			out = t.addCoder(cid+"_safe", &pipepb.Coder{Spec: c.GetSpec(), ComponentCoderIds: []string{key, c.GetComponentCoderIds()[1]}})
		}
	case !hostCoderURNs[urn]:
		out = t.addCoder(cid+"_lp", &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderLengthPrefix}, ComponentCoderIds: []string{cid}})
	case urn == urnCoderLengthPrefix:
		if len(c.GetComponentCoderIds()) != 1 || t.comps.GetCoders()[c.GetComponentCoderIds()[0]] == nil {
			return "", fmt.Errorf("coder %q: length prefix needs one defined component", cid)
		}
		out = cid
	case urn == urnCoderKV || urn == urnCoderIterable || urn == urnCoderWindowedValue:
		want := 2
		if urn == urnCoderIterable {
			want = 1
		}
		if len(c.GetComponentCoderIds()) != want {
			return "", fmt.Errorf("coder %q: %s needs %d components, has %d", cid, urn, want, len(c.GetComponentCoderIds()))
		}
		changed := false
		var comps []string
		for _, cc := range c.GetComponentCoderIds() {
			s, err := t.safeCoder(cc)
			if err != nil {
				return "", fmt.Errorf("coder %q: %w", cid, err)
			}
			changed = changed || s != cc
			comps = append(comps, s)
		}
		out = cid
		if changed {
			out = t.addCoder(cid+"_safe", &pipepb.Coder{Spec: c.GetSpec(), ComponentCoderIds: comps})
		}
	default:
		out = cid
	}
	t.safeMemo[cid] = out
	return out, nil
}

// checkWindowCoder fails unless the PCollection's windows are global or
// interval windows, the ones the host can parse.
func (t *translator) checkWindowCoder(pc string) error {
	ws := t.comps.GetWindowingStrategies()[t.inWS(pc)]
	wc := t.comps.GetCoders()[ws.GetWindowCoderId()]
	if wc == nil {
		return fmt.Errorf("PCollection %q: window coder %q is not defined", pc, ws.GetWindowCoderId())
	}
	switch wc.GetSpec().GetUrn() {
	case urnCoderGlobalWindow, urnCoderIntervalWindow:
		return nil
	}
	return fmt.Errorf("PCollection %q: window coder %s is not supported yet (only global and interval windows)", pc, wc.GetSpec().GetUrn())
}

// wire returns (creating it when needed) the windowed_value coder of a
// PCollection wherever the host sees it, and records it in WireCoders.
func (t *translator) wire(pc string) (string, error) {
	if w, ok := t.wireCoders[pc]; ok {
		return w, nil
	}
	col := t.comps.GetPcollections()[pc]
	if col == nil {
		return "", fmt.Errorf("PCollection %q is not defined", pc)
	}
	if err := t.checkWindowCoder(pc); err != nil {
		return "", err
	}
	elem, err := t.safeCoder(col.GetCoderId())
	if err != nil {
		return "", fmt.Errorf("PCollection %q: %w", pc, err)
	}
	wc := t.comps.GetWindowingStrategies()[col.GetWindowingStrategyId()].GetWindowCoderId()
	key := elem + "\x00" + wc
	w, ok := t.wvMemo[key]
	if !ok {
		w = t.addCoder("wv_"+elem, &pipepb.Coder{Spec: &pipepb.FunctionSpec{Urn: urnCoderWindowedValue}, ComponentCoderIds: []string{elem, wc}})
		t.wvMemo[key] = w
	}
	t.wireCoders[pc] = w
	return w, nil
}

// coderEqual reports whether two coders are structurally identical (and so
// encode alike).
func (t *translator) coderEqual(a, b string) bool {
	if a == b {
		return true
	}
	ca, cb := t.comps.GetCoders()[a], t.comps.GetCoders()[b]
	if ca == nil || cb == nil {
		return false
	}
	if ca.GetSpec().GetUrn() != cb.GetSpec().GetUrn() || !bytes.Equal(ca.GetSpec().GetPayload(), cb.GetSpec().GetPayload()) {
		return false
	}
	if len(ca.GetComponentCoderIds()) != len(cb.GetComponentCoderIds()) {
		return false
	}
	for i := range ca.GetComponentCoderIds() {
		if !t.coderEqual(ca.GetComponentCoderIds()[i], cb.GetComponentCoderIds()[i]) {
			return false
		}
	}
	return true
}
