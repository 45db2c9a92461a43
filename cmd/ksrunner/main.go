// Command ksrunner is the Kafka Streams Runner for Apache Beam.
//
//	ksrunner jobserver [flags]   serve the Beam Job API and the KafkaIO expansion service (the default)
//	ksrunner worker --application_id X --bootstrap_servers B
//	                             join a running application: one more process of it
//	ksrunner broker --port N     run an in-memory development broker
//	ksrunner bench gbk           compare a GroupByKey pipeline with Prism
//	ksrunner bench wasm          compare the WASM executor with the harness and plain Go
//	ksrunner bench kafka         Kafka -> map -> Kafka, exactly once: WASM, harness and a plain copy loop
//	ksrunner bench rescale       windowed counts at a fixed rate while instances are added and killed
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	args := os.Args[1:]
	cmd := "jobserver"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	stopProfile, err := profileFromEnv(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ksrunner:", err)
		os.Exit(1)
	}
	switch cmd {
	case "jobserver":
		err = runJobServer(ctx, args, os.Stdout)
	case "worker":
		err = runWorker(ctx, args, os.Stdout)
	case "broker":
		err = runBroker(ctx, args, os.Stdout)
	case "bench":
		err = runBench(ctx, args, os.Stdout)
	case "help", "-h", "--help":
		fmt.Println("usage: ksrunner [jobserver|worker|broker|bench] [flags]; ksrunner <command> --help for flags")
		return
	default:
		err = fmt.Errorf("unknown command %q (want jobserver, worker, broker or bench)", cmd)
	}
	if stopProfile != nil {
		stopProfile()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ksrunner:", err)
		os.Exit(1)
	}
}

// profileFromEnv starts a CPU profile of this process when
// KSRUNNER_CPUPROFILE is set, to the file $KSRUNNER_CPUPROFILE.<command>.<pid>:
// the processes a bench starts (instances, SDK worker pools) inherit the
// variable, so one setting profiles each of them until it exits (SIGTERM
// included; not SIGKILL). The returned function stops it; nil if unset.
func profileFromEnv(cmd string) (func() error, error) {
	base := os.Getenv("KSRUNNER_CPUPROFILE")
	if base == "" {
		return nil, nil
	}
	if len(os.Args) > 2 && cmd == "bench" {
		cmd += "-" + os.Args[2]
	}
	return startCPUProfile(fmt.Sprintf("%s.%s.%d", base, cmd, os.Getpid()))
}
