// Command ksrunner is the Kafka Streams Runner for Apache Beam.
//
//	ksrunner jobserver [flags]   serve the Beam Job API and the KafkaIO expansion service (the default)
//	ksrunner worker --application_id X --bootstrap_servers B
//	                             join a running application: one more process of it
//	ksrunner broker --port N     run an in-memory development broker
//	ksrunner proxy --forward LOCAL=REMOTE --auth_token_file F --tls_ca_file CA
//	                             forward a loopback port to a guarded job or expansion endpoint, adding TLS and the token
//	ksrunner jobs                list a job server's jobs
//	ksrunner cancel JOB          cancel a job
//	ksrunner drain JOB           drain a job: its sources stop, every window fires, it ends DONE
//	ksrunner reset --application_id X --bootstrap_servers B
//	                             reset an application: its internal topics and state go, its reads' offsets stay
//	ksrunner version             the build's version
//	ksrunner help [COMMAND]      the commands, or a command's flags
//
// The benchmarks are a binary of their own, cmd/ksrunner-bench (they link
// Prism, which ksrunner does not need).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/ksrunner/ksrunner/cmd/internal/profile"
	"github.com/spf13/pflag"
)

// command is one of ksrunner's commands.
type command struct {
	name, args, summary string
	// about says more, in `ksrunner help NAME`.
	about string
	// flags are the command's flags, for help (nil: none).
	flags func() *pflag.FlagSet
	run   func(ctx context.Context, args []string, stdout io.Writer) error
}

var commands []command

func init() {
	commands = []command{
		{name: "jobserver", args: "[flags]", summary: "serve the Beam Job API and the KafkaIO expansion service (the default command)",
			about: "Runs Beam pipelines submitted to its job endpoint (job_port, default 8099) and serves the\n" +
				"KafkaIO expansion service (expansion_port, default 8097). The job options are defaults that\n" +
				"a job's pipeline options override.",
			flags: jobServerFlags, run: runJobServer},
		{name: "worker", args: "--application_id ID --bootstrap_servers BROKERS [flags]", summary: "join a running application: one more process of it",
			about: "Reads the application's job from its pipeline topic and takes a share of its tasks.",
			flags: func() *pflag.FlagSet { return workerFlagSet(new(workerFlags)) }, run: runWorker},
		{name: "broker", args: "[--port N]", summary: "run an in-memory Kafka broker for development (data in memory only)",
			flags: brokerFlags, run: runBroker},
		{name: "proxy", args: "--forward LOCAL=REMOTE [--auth_token_file F] [--tls_ca_file CA]", summary: "forward a loopback port to a guarded job, expansion or status endpoint, adding TLS and the bearer token",
			about: "For Beam SDKs that can send neither TLS nor a token (Go and Python 2.77): submit to LOCAL,\n" +
				"and the proxy calls REMOTE over TLS with the token.",
			flags: func() *pflag.FlagSet { return proxyFlagSet(new(proxyFlags)) }, run: runProxy},
		{name: "jobs", args: "[--endpoint HOST:PORT]", summary: "list the jobs of a job server",
			flags: func() *pflag.FlagSet { return clientFlags(new(string)) }, run: runJobs},
		{name: "cancel", args: "JOB [--endpoint HOST:PORT]", summary: "cancel a job, in every process of its application",
			about: "The job ends CANCELLED; its application's processes stop it and nothing resumes it.",
			flags: func() *pflag.FlagSet { return clientFlags(new(string)) }, run: runCancel},
		{name: "drain", args: "JOB [--endpoint HOST:PORT]", summary: "drain a job: its sources stop where they are, every window fires, it ends DONE",
			about: "The job's Kafka reads stop at their current positions (committed, so a later job under the\n" +
				"same application_id goes on from there), its watermark goes to +inf, firing every window\n" +
				"and timer, and the job ends DONE once all it read is written (DONE, not Beam's DRAINED, which\n" +
				"Python's portable runner reports as a failure; `ksrunner jobs` shows it as DONE (drained)).",
			flags: func() *pflag.FlagSet { return clientFlags(new(string)) }, run: runDrain},
		{name: "reset", args: "--application_id ID --bootstrap_servers BROKERS [flags]", summary: "reset an application no process runs: its internal topics and state go, its Kafka reads' offsets stay",
			about: "As Kafka Streams' application reset tool: deletes the application's internal topics (pipeline,\n" +
				"status, changelog, repartition, side-input and impulse topics; the dead-letter topic stays) and\n" +
				"its consumer group's offsets of them, keeping those of the user's topics, so that the next job\n" +
				"under the application id, whatever its pipeline, starts with empty state and its Kafka reads go\n" +
				"on where the last job's stopped. Drain the job first (ksrunner drain); a job that did not end on\n" +
				"purpose is refused unless --force. Processes' state_dirs empty themselves at their next start.",
			flags: func() *pflag.FlagSet { return resetFlagSet(new(resetFlags)) }, run: runReset},
		{name: "version", summary: "print the build's version (module, VCS revision, Go, Beam SDK)", run: runVersion},
		{name: "help", args: "[COMMAND]", summary: "list the commands, or show a command's flags", run: runHelp},
	}
}

func findCommand(name string) *command {
	for i := range commands {
		if commands[i].name == name {
			return &commands[i]
		}
	}
	return nil
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command of args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	name := "jobserver"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	} else if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		name, args = "help", nil
	}
	cmd := findCommand(name)
	if cmd == nil {
		if name == "bench" {
			fmt.Fprintln(stderr, "ksrunner: the benchmarks moved to their own binary, which links Prism: go run github.com/ksrunner/ksrunner/cmd/ksrunner-bench "+strings.Join(args, " "))
			return 2
		}
		fmt.Fprintf(stderr, "ksrunner: unknown command %q%s; `ksrunner help` lists the commands\n", name, didYouMean(name, commandNames(), ""))
		return 2
	}
	stopProfile, err := profile.FromEnv(name)
	if err != nil {
		fmt.Fprintln(stderr, "ksrunner:", err)
		return 1
	}
	err = cmd.run(ctx, args, stdout)
	if stopProfile != nil {
		stopProfile()
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, pflag.ErrHelp):
		printCommandHelp(stdout, cmd)
		return 0
	}
	fmt.Fprintln(stderr, "ksrunner:", err)
	return 1
}

func commandNames() []string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	return names
}

// runHelp prints the commands, or one command's flags.
func runHelp(_ context.Context, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		cmd := findCommand(args[0])
		if cmd == nil {
			if args[0] == "bench" {
				fmt.Fprintln(stdout, "The benchmarks are a binary of their own: go run github.com/ksrunner/ksrunner/cmd/ksrunner-bench gbk|wasm|kafka|rescale")
				return nil
			}
			return fmt.Errorf("help: unknown command %q%s", args[0], didYouMean(args[0], commandNames(), ""))
		}
		printCommandHelp(stdout, cmd)
		return nil
	}
	fmt.Fprint(stdout, "ksrunner is the Kafka Streams Runner for Apache Beam.\n\nUsage:\n  ksrunner [COMMAND] [flags]\n\nCommands:\n")
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, c := range commands {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(stdout, "\n"+configHelp+"\n"+
		"`ksrunner help COMMAND` (or `ksrunner COMMAND --help`) lists a command's flags.\n"+
		"The benchmarks are a binary of their own: go run github.com/ksrunner/ksrunner/cmd/ksrunner-bench gbk|wasm|kafka|rescale\n")
	return nil
}

// configHelp says how configuration merges.
const configHelp = `Configuration: options merge, lowest first: built-in defaults < --config FILE (YAML, jobserver;
or KSRUNNER_CONFIG=FILE) < KSRUNNER_* environment variables < flags. Every option has all three
forms: internal_parallelism: 8 in the file, KSRUNNER_INTERNAL_PARALLELISM=8, --internal_parallelism=8.
An unknown name in a flag, the file or a KSRUNNER_* variable is an error that names it; a bad value
says where it came from. (KSRUNNER_TEST_*, KSRUNNER_KAFKA_*, KSRUNNER_DEBUG and a few more are the
tests' and tools' own, not options.)
`

func printCommandHelp(w io.Writer, c *command) {
	fmt.Fprintf(w, "Usage: ksrunner %s %s\n\n%s.\n", c.name, c.args, strings.ToUpper(c.summary[:1])+c.summary[1:])
	if c.about != "" {
		fmt.Fprintf(w, "%s\n", c.about)
	}
	if c.flags != nil {
		fmt.Fprintf(w, "\nFlags:\n%s", c.flags().FlagUsages())
		if c.name == "jobserver" || c.name == "worker" {
			fmt.Fprint(w, "\n"+configHelp)
		}
		if c.name == "jobs" || c.name == "cancel" || c.name == "drain" {
			fmt.Fprintf(w, "\nKSRUNNER_ENDPOINT=HOST:PORT sets the default of --endpoint.\n")
		}
	}
}

// newFlagSet is a flag set whose errors the caller reports.
func newFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.SortFlags = false
	return fs
}

// parseFlags parses args, with no positional arguments allowed. A help
// flag returns pflag.ErrHelp (the command's help is printed, exit 0); an
// unknown flag is an error naming the flag it may be a misspelling of.
func parseFlags(fs *pflag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return err
		}
		var name string
		if rest, ok := strings.CutPrefix(err.Error(), "unknown flag: --"); ok {
			name = rest
		}
		if name != "" {
			return fmt.Errorf("%s: unknown flag --%s%s", fs.Name(), name, didYouMean(name, optionNames(fs), "--"))
		}
		return fmt.Errorf("%s: %w", fs.Name(), err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}
