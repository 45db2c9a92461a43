//go:build race

package runtime

// raceDetector says the tests run under -race, which slows the restore
// path (Pebble, franz-go) several times: throughput figures mean nothing.
const raceDetector = true
