// Package testkit holds what the tests of several host packages share and
// no production code uses: small helpers that were copied from test file to
// test file. What a test needs of a Kafka broker (a broker, unique names,
// count topics, a broker that goes out of reach) is in shuffle/kafkatest.
package testkit
