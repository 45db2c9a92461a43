package kafkatest

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// SwitchedBroker is an in-process one-broker kfake cluster that a test can
// put out of reach and back: while Off is set, it closes the connection at
// every request, as a stopped broker's clients see it (a dial refused or a
// connection reset). Refused counts the requests it refused.
type SwitchedBroker struct {
	Addr    string
	Off     atomic.Bool
	Refused atomic.Int64
}

// NewSwitchedBroker starts a SwitchedBroker with the cluster options opts
// (after one broker), closed by t.Cleanup.
func NewSwitchedBroker(t testing.TB, opts ...kfake.Opt) *SwitchedBroker {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatalf("kafkatest: starting kfake: %v", err)
	}
	t.Cleanup(c.Close)
	b := &SwitchedBroker{Addr: c.ListenAddrs()[0]}
	c.Control(func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if b.Off.Load() {
			b.Refused.Add(1)
			return nil, errors.New("switched off by the test"), true
		}
		return nil, nil, false
	})
	return b
}
