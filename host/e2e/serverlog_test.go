package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime/pprof"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/ksrunner/ksrunner/shuffle"
)

// serverLog keeps the last lines of the shared job server's log (level
// debug, for the Kafka clients' own lines; jobLines leaves debug out), so that a test that fails can show what the runtime logged for
// its job besides the job's messages: aborted transactions, for one, are
// logged and not told to the client.
var serverLog = &logTail{max: 200_000}

// logTail is an io.Writer that keeps the last max lines written to it.
type logTail struct {
	mu      sync.Mutex
	max     int
	lines   []string
	partial []byte
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		l.lines = append(l.lines, string(l.partial[:i]))
		l.partial = l.partial[i+1:]
	}
	// Trimmed a tenth at a time: a copy per line once full was quadratic.
	if over := len(l.lines) - l.max; over > l.max/10 {
		l.lines = append(l.lines[:0:0], l.lines[over:]...)
	}
	return len(p), nil
}

// jobLines returns the last n kept lines of job id at level info or above.
func (l *logTail) jobLines(id string, n int) []string {
	return l.filter(func(line string) bool {
		return strings.Contains(line, "job="+id) && !strings.Contains(line, "level=DEBUG")
	}, n)
}

// kafkaClientLines returns the last n kept lines that job id's Kafka
// client logged (at debug and above: its group sessions, offset fetches,
// transactions).
func (l *logTail) kafkaClientLines(id string, n int) []string {
	repeats := map[string]int{}
	return l.filter(func(line string) bool {
		if !strings.Contains(line, "job="+id) || !strings.Contains(line, "kafka client: ") {
			return false
		}
		// Per-cycle lines and the offset fetch's retries (once a second
		// while it waits) would push the rest out: the first few of each.
		for _, m := range []string{"kafka client: flushing", "kafka client: beginning transaction", "kafka client: beginning transact session", "retryable partition error, waiting 1s and retrying"} {
			if strings.Contains(line, m) {
				repeats[m]++
				return repeats[m] <= 5
			}
		}
		return true
	}, n)
}

func (l *logTail) filter(keep func(string) bool, n int) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if keep(line) {
			out = append(out, line)
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// runtimeGoroutines is the stacks of this process's goroutines that run
// ksrunner's runtime (host/internal/runtime), with their wait reasons and
// how long they have waited.
func runtimeGoroutines() string {
	var b bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&b, 2); err != nil {
		return "goroutine dump: " + err.Error()
	}
	var out []string
	for _, g := range strings.Split(b.String(), "\n\n") {
		if strings.Contains(g, "ksrunner/host/internal/runtime.") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// jobStatus is the shared job server's status API's view of job id
// (api/jobs/{id}), indented: its tasks with their output watermarks, lags
// and records in and out, and the instance's commits and aborts, which
// tell an instance that stopped cycling from one whose watermark stopped.
func jobStatus(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, serverStatusURL+"api/jobs/"+id, nil)
	if err != nil {
		return err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err.Error()
	}
	var out bytes.Buffer
	if json.Indent(&out, b, "", " ") != nil {
		return resp.Status + " " + string(b)
	}
	return out.String()
}

// openTransactions describes, on the brokers at bootstrap, the producers
// with a transaction open on the partitions of __consumer_offsets and the
// transactions of the application's transactional ids: a transactional
// offset commit left pending keeps the group's offsets unstable, and these
// say whose it is and what its coordinator thinks of it.
func openTransactions(bootstrap, appID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var out []string
	md, err := adm.Metadata(ctx, "__consumer_offsets")
	if err != nil {
		return "metadata: " + err.Error()
	}
	set := kadm.TopicsSet{}
	for _, p := range md.Topics["__consumer_offsets"].Partitions {
		set.Add("__consumer_offsets", p.Partition)
	}
	producers, err := adm.DescribeProducers(ctx, set)
	if err != nil {
		out = append(out, "describe producers: "+err.Error())
	}
	for _, p := range producers.SortedProducers() {
		if p.CurrentTxnStartOffset >= 0 {
			out = append(out, fmt.Sprintf("open on %s/%d: producer %d epoch %d, coordinator epoch %d, transaction from offset %d, last timestamp %d",
				p.Topic, p.Partition, p.ProducerID, p.ProducerEpoch, p.CoordinatorEpoch, p.CurrentTxnStartOffset, p.LastTimestamp))
		}
	}
	listed, err := adm.ListTransactions(ctx, nil, nil)
	if err != nil {
		out = append(out, "list transactions: "+err.Error())
	}
	var ids []string
	for _, tx := range listed.Sorted() {
		if strings.HasPrefix(tx.TxnID, appID) {
			ids = append(ids, tx.TxnID)
		}
	}
	if len(ids) > 0 {
		described, err := adm.DescribeTransactions(ctx, ids...)
		if err != nil {
			out = append(out, "describe transactions: "+err.Error())
		}
		for _, d := range described.Sorted() {
			out = append(out, fmt.Sprintf("transactional id %s: state %s, producer %d epoch %d, timeout %d ms, started %d, topics %v",
				d.TxnID, d.State, d.ProducerID, d.ProducerEpoch, d.TimeoutMillis, d.StartTimestamp, d.Topics))
		}
	}
	if len(out) == 0 {
		return "none open"
	}
	return strings.Join(out, "\n")
}

// statusTopicOffsets is, on the brokers at bootstrap, the end offset and
// the last stable offset (what a read_committed reader reaches) of the
// application's status topic, and its records as read uncommitted: a done
// check that waits for a task's status either never got it produced, or
// cannot read past a transaction left open there.
func statusTopicOffsets(bootstrap, appID string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	topic := shuffle.TopicName(appID, shuffle.StatusTopic)
	cl, err := statusReader(bootstrap, topic, kgo.ReadUncommitted())
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var out []string
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return "end offsets: " + err.Error()
	}
	stable, err := adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return "stable offsets: " + err.Error()
	}
	var end int64
	ends.Each(func(o kadm.ListedOffset) {
		end = o.Offset
		s, _ := stable.Lookup(o.Topic, o.Partition)
		out = append(out, fmt.Sprintf("%s/%d: end %d, last stable %d", o.Topic, o.Partition, o.Offset, s.Offset))
	})
	keys := map[string]int{}
	var log []string // offset:task, or offset:COMMIT / offset:ABORT for a marker
	for n := int64(0); n < end; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			break
		}
		fs.EachRecord(func(r *kgo.Record) {
			n = r.Offset + 1
			if r.Attrs.IsControl() {
				kind := "ABORT"
				if len(r.Key) >= 4 && r.Key[3] == 1 {
					kind = "COMMIT"
				}
				log = append(log, fmt.Sprintf("%d:%s(pid %d epoch %d)", r.Offset, kind, r.ProducerID, r.ProducerEpoch))
				return
			}
			keys[string(r.Key)]++
			log = append(log, fmt.Sprintf("%d:%s(pid %d epoch %d)", r.Offset, r.Key, r.ProducerID, r.ProducerEpoch))
		})
	}
	out = append(out, fmt.Sprintf("status records by task, read uncommitted: %v", keys))
	out = append(out, "status topic, record by record: "+strings.Join(log, " "))
	out = append(out, "status records by task, read committed from the start: "+committedStatus(bootstrap, topic, end))
	return strings.Join(out, "\n")
}

// statusReader reads the status topic's one partition from its start.
func statusReader(bootstrap, topic string, iso kgo.IsolationLevel) (*kgo.Client, error) {
	return kgo.NewClient(kgo.SeedBrokers(strings.Split(bootstrap, ",")...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(iso))
}

// committedStatus counts the status records of topic below end by task, as
// a read_committed reader that starts now sees them: one that lacks what
// the job's done check lacked says the broker took those records as
// aborted; one that has them says the done check's reader missed them.
func committedStatus(bootstrap, topic string, end int64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, err := statusReader(bootstrap, topic, kgo.ReadCommitted())
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	keys := map[string]int{}
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		fs.EachRecord(func(r *kgo.Record) { keys[string(r.Key)]++ })
		var at int64 = -1
		fs.EachPartition(func(p kgo.FetchTopicPartition) {
			if p.HighWatermark >= 0 && len(p.Records) > 0 {
				at = p.Records[len(p.Records)-1].Offset
			}
		})
		if at >= end-2 { // the last record below end is its marker
			break
		}
	}
	return fmt.Sprint(keys)
}
