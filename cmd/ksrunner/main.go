// Command ksrunner is the Kafka Streams Runner for Apache Beam.
//
//	ksrunner jobserver [flags]   serve the Beam Job API and the KafkaIO expansion service (the default)
//	ksrunner worker --application_id X --bootstrap_servers B
//	                             join a running application: one more process of it
//	ksrunner broker --port N     run an in-memory development broker
//	ksrunner proxy --forward LOCAL=REMOTE --auth_token_file F --tls_ca_file CA
//	                             forward a loopback port to a guarded job or expansion endpoint, adding TLS and the token
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
	var err error
	switch cmd {
	case "jobserver":
		err = runJobServer(ctx, args, os.Stdout)
	case "worker":
		err = runWorker(ctx, args, os.Stdout)
	case "broker":
		err = runBroker(ctx, args, os.Stdout)
	case "proxy":
		err = runProxy(ctx, args, os.Stdout)
	case "bench":
		err = runBench(ctx, args, os.Stdout)
	case "help", "-h", "--help":
		fmt.Println("usage: ksrunner [jobserver|worker|broker|proxy|bench] [flags]; ksrunner <command> --help for flags")
		return
	default:
		err = fmt.Errorf("unknown command %q (want jobserver, worker, broker, proxy or bench)", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ksrunner:", err)
		os.Exit(1)
	}
}
