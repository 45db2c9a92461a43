package harness

// AbortedRemembered is how many aborted bundles' ids the workers of h keep
// for their data senders (worker.aborted and abortedOld).
func AbortedRemembered(h *Harness) int {
	h.mu.Lock()
	ws := make([]*worker, 0, len(h.workers))
	for _, w := range h.workers {
		ws = append(ws, w)
	}
	h.mu.Unlock()
	n := 0
	for _, w := range ws {
		w.mu.Lock()
		n += len(w.aborted) + len(w.abortedOld)
		w.mu.Unlock()
	}
	return n
}

// AbortedKeep is abortedKeep, for tests.
const AbortedKeep = abortedKeep
