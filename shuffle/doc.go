// Package shuffle owns what ksrunner's internal records look like on the
// Kafka wire, shared by every task that writes or reads them:
//
//   - internal topic names: TopicName ("__beam_<application_id>_<name>")
//     and the status topic's name, StatusTopic;
//   - the record envelope: a kind byte (KindData, KindDataPacked,
//     KindWatermark, KindProcessingTime, KindGroupPiece, KindGroupEnd) before a windowed value, packed
//     windowed values (Pack, EachPacked, Position) or a report, the
//     watermark and processing-time reports (EncodeWatermark and
//     DecodeWatermark, EncodeProcessingTime and DecodeProcessingTime) and
//     the producer ids in them (ProducerID); a large group in pieces
//     (KindGroupPiece, KindGroupEnd: EncodeGroupPiece, DecodeGroupPiece);
//   - partitioning (Partitioner): a keyed record goes to the partition
//     Kafka's default partitioner picks for its key, any other to the
//     partition set on it; KeyPartition is the same choice for a record
//     that is packed instead;
//   - parsing the windowed values, keys and timers in the standard coders
//     the host reads (ElementCodec, TimerCodec, ValueLength);
//   - watermark report aggregation, in the subpackage watermark.
//
// Creating, purging and deleting a job's topics is not here: they need the
// Plan's layout (package translate, which imports shuffle), so
// host/internal/topics and host/internal/runtime do them.
package shuffle
