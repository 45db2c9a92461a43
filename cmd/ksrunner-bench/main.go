// Command ksrunner-bench runs ksrunner's benchmarks. It is a binary of its
// own, apart from ksrunner, because it links what only benchmarks need
// (Prism, the SDK's in-process runner, to compare with):
//
//	ksrunner-bench gbk        compare a GroupByKey pipeline with Prism
//	ksrunner-bench wasm       compare the WASM executor with the harness and plain Go
//	ksrunner-bench kafka      Kafka -> map -> Kafka, exactly once: WASM, harness and a plain copy loop
//	ksrunner-bench rescale    windowed counts at a fixed rate while ksrunner instances are added and killed
//	ksrunner-bench scaling    what a second core gives allocation-heavy Go code (a Go SDK worker's) here
//
// From the repository: go run ./cmd/ksrunner-bench gbk (the README's
// Benchmarks section says what each one measures). `ksrunner-bench bench
// gbk` works too, as `ksrunner bench gbk` did.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/ksrunner/ksrunner/cmd/internal/profile"
	"github.com/spf13/pflag"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "bench" {
		args = args[1:]
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Println("usage: ksrunner-bench gbk|wasm|kafka|rescale|scaling [flags]; ksrunner-bench COMMAND --help for its flags")
		return
	}
	stopProfile, err := profile.FromEnv("bench-" + args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "ksrunner-bench:", err)
		os.Exit(1)
	}
	err = runBench(ctx, args, os.Stdout)
	if stopProfile != nil {
		stopProfile()
	}
	if err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "ksrunner-bench:", err)
		os.Exit(1)
	}
}
