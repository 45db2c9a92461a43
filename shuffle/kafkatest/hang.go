package kafkatest

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Hang is a transaction left open on a partition, as a transaction
// marker Kafka dropped leaves one: where its first record is, and its
// producer.
type Hang struct {
	Offset int64
	PID    int64
	Epoch  int16
}

// HangTransaction produces records (key, value pairs) to topic/partition
// in a transaction of txnID that never tells the coordinator of that
// partition: a raw Produce v11, which adds no partition, on a broker
// without transaction verification (OwnBroker with
// transaction.partition.verification.enable=false). The coordinator then
// has ended everything of that producer epoch, and the records stay open.
//
// end "" makes a transaction the coordinator never knew (the producer is
// initialized again after, which bumps its epoch). end "commit" or "abort"
// makes it a real transaction of txnID, which the coordinator knows by a
// record on topic+"-elsewhere" (created here if missing) and ends so: it logs that
// outcome and writes its marker there only.
func HangTransaction(ctx context.Context, t testing.TB, bootstrap, txnID, topic string, partition int32, records [][2][]byte, end string) Hang {
	t.Helper()
	v := kversion.Stable()
	v.SetMaxKeyVersion(kmsg.Produce.Int16(), 11)
	cl := Client(t, bootstrap, kgo.MaxVersions(v))
	var h Hang
	var txn *kgo.Client
	if end == "" {
		h.PID, h.Epoch = InitProducerID(ctx, t, cl, txnID)
	} else {
		elsewhere := topic + "-elsewhere"
		if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, 1, nil, elsewhere); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			t.Fatal(err)
		}
		txn = Client(t, bootstrap, kgo.TransactionalID(txnID), kgo.TransactionTimeout(10*time.Second), kgo.DefaultProduceTopic(elsewhere))
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		r, err := txn.ProduceSync(ctx, &kgo.Record{Value: []byte("elsewhere")}).First()
		if err != nil {
			t.Fatal(err)
		}
		h.PID, h.Epoch = r.ProducerID, r.ProducerEpoch
	}

	var recs []byte
	for n, kv := range records {
		r := kmsg.Record{OffsetDelta: int32(n), Key: kv[0], Value: kv[1]}
		r.Length = int32(len(r.AppendTo(nil)) - 1)
		recs = r.AppendTo(recs)
	}
	now := time.Now().UnixMilli()
	batch := kmsg.RecordBatch{
		PartitionLeaderEpoch: -1, Magic: 2, Attributes: 0x10, // transactional
		LastOffsetDelta: int32(len(records) - 1), FirstTimestamp: now, MaxTimestamp: now,
		ProducerID: h.PID, ProducerEpoch: h.Epoch, FirstSequence: 0, NumRecords: int32(len(records)), Records: recs,
	}
	raw := batch.AppendTo(nil)
	batch.Length = int32(len(raw) - 12) // what follows FirstOffset and Length
	raw = batch.AppendTo(nil)
	// The CRC covers what follows it: from Attributes on.
	binary.BigEndian.PutUint32(raw[17:21], crc32.Checksum(raw[21:], crc32.MakeTable(crc32.Castagnoli)))

	req := kmsg.NewPtrProduceRequest()
	req.TransactionID, req.Acks, req.TimeoutMillis = &txnID, -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = partition, raw
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		p := resp.Topics[0].Partitions[0]
		err = kerr.ErrorForCode(p.ErrorCode)
		if err == nil {
			h.Offset = p.BaseOffset
			break
		}
		if !kerr.IsRetriable(err) {
			t.Fatalf("producing to %s/%d in a transaction the coordinator does not know: %v", topic, partition, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if txn == nil {
		InitProducerID(ctx, t, cl, txnID)
	} else {
		if err := txn.EndTransaction(ctx, kgo.TransactionEndTry(end == "commit")); err != nil {
			t.Fatal(err)
		}
		txn.Close()
	}
	return h
}

// InitProducerID initializes txnID's producer (InitProducerId), which
// bumps its epoch and ends its open transaction, if any.
func InitProducerID(ctx context.Context, t testing.TB, cl *kgo.Client, txnID string) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = 10000
	for {
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			t.Fatal(err)
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err == nil {
			return resp.ProducerID, resp.ProducerEpoch
		} else if !kerr.IsRetriable(err) {
			t.Fatalf("InitProducerID %s: %v", txnID, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
