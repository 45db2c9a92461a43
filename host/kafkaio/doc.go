// Package kafkaio makes the Beam Go SDK's KafkaIO (io/xlang/kafkaio) expand
// through ksrunner, in-process: a program that imports it,
//
//	import (
//		"github.com/apache/beam/sdks/v2/go/pkg/beam/io/xlang/kafkaio"
//		_ "github.com/ksrunner/ksrunner/host/kafkaio"
//	)
//
//	records := kafkaio.Read(s, "", "broker:9092", []string{"in"})
//	kafkaio.Write(s, "", "broker:9092", "out", records)
//
// needs no expansion service address (and no Java): importing it registers
// an xlangx handler (namespace "ksrunner") and routes the KafkaIO URNs to
// it, whatever address a Read or Write names, so the pipeline holds
// ksrunner's Kafka primitives, which only ksrunner runs. To reach a Java
// expansion service anyway, name it with xlangx.Require(address).
package kafkaio
