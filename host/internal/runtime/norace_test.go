//go:build !race

package runtime

// raceDetector says the tests run under -race (see race_test.go).
const raceDetector = false
