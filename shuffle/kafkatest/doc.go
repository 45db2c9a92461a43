// Package kafkatest gives tests a Kafka broker.
//
// [Broker] returns the bootstrap address of the broker a test should use: the real
// Apache Kafka broker named by the environment variable KSRUNNER_TEST_BOOTSTRAP when it
// is set (CI sets it from .ci/kafka-broker.sh), otherwise a fresh in-process franz-go
// kfake cluster that is closed when the test ends. [IsReal] tells which one it is.
//
// A real broker is shared by every test of a run (and possibly by runs before it), so
// a test must name its topics, consumer groups, transactional ids and application ids
// with [UniqueName] and must not assume an empty cluster.
//
// Both brokers are configured alike: one broker, automatic topic creation off (the runner
// creates its topics explicitly), KIP-848 consumer-group heartbeats every second, and no
// initial rebalance delay.
//
//	func TestX(t *testing.T) {
//		bootstrap := kafkatest.Broker(t)
//		topic := kafkatest.UniqueName(t, "in")
//		kafkatest.CreateTopic(t, bootstrap, topic, 4)
//		cl := kafkatest.Client(t, bootstrap, kgo.ConsumeTopics(topic))
//		...
//	}
//
// [NewSwitchedBroker] is an in-process broker that a test puts out of reach and back,
// for what clients do while no broker answers.
//
// To run a package's tests against a real broker:
//
//	export KSRUNNER_TEST_BOOTSTRAP=$(.ci/kafka-broker.sh up)
//	go test ./...
//	.ci/kafka-broker.sh stop
package kafkatest
