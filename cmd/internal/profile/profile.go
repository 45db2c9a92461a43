// Package profile is the CPU profiling every ksrunner binary does when
// KSRUNNER_CPUPROFILE is set (the runner and the benchmarks, whose
// instances and SDK worker pools inherit the variable).
package profile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// FromEnv starts a CPU profile of this process when
// KSRUNNER_CPUPROFILE is set, to the file $KSRUNNER_CPUPROFILE.<command>.<pid>:
// the processes a bench starts (instances, SDK worker pools) inherit the
// variable, so one setting profiles each of them until it exits (SIGTERM
// included; not SIGKILL). The returned function stops it; nil if unset.
func FromEnv(cmd string) (func() error, error) {
	base := os.Getenv("KSRUNNER_CPUPROFILE")
	if base == "" {
		return nil, nil
	}
	stop, err := Start(fmt.Sprintf("%s.%s.%d", base, cmd, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("KSRUNNER_CPUPROFILE: %w", err)
	}
	return stop, nil
}

// Start writes a CPU profile of this process to path until the returned
// function is called.
func Start(path string) (func() error, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}
