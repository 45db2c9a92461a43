package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/pflag"
)

func newFlagSet(name string) *pflag.FlagSet { return pflag.NewFlagSet(name, pflag.ContinueOnError) }

func runBench(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 && args[0] == "wasm" {
		return runBenchWASM(ctx, args[1:], stdout)
	}
	return fmt.Errorf("bench: not built yet")
}
