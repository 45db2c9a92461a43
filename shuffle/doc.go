// Package shuffle owns everything on the Kafka wire: internal topic names,
// their creation and purge, the record envelope (DATA and WATERMARK records),
// partitioning by key, and watermark report aggregation.
package shuffle
