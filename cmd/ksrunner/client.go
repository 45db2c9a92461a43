package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
)

// The client commands (jobs, cancel, drain) talk to a job server's Job API.

const defaultEndpoint = "localhost:8099"

// clientFlags are the client commands' flags, into endpoint.
func clientFlags(endpoint *string) *pflag.FlagSet {
	fs := newFlagSet("client")
	def := defaultEndpoint
	if v := os.Getenv(envPrefix + "ENDPOINT"); v != "" {
		def = v
	}
	fs.StringVar(endpoint, "endpoint", def, "the job server's job endpoint, HOST:PORT")
	return fs
}

// parseClient parses a client command's flags and its job id arguments
// (jobArgs of them), and connects to the job server.
func parseClient(name string, args []string, jobArgs int) (jobpb.JobServiceClient, []string, func(), error) {
	var endpoint string
	fs := clientFlags(&endpoint)
	// The job id may come before or after the flags.
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, nil, nil, err
		}
		return nil, nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if fs.NArg() != jobArgs {
		if jobArgs == 0 {
			return nil, nil, nil, fmt.Errorf("%s: unexpected arguments %q", name, fs.Args())
		}
		return nil, nil, nil, fmt.Errorf("%s: want one job id (`ksrunner jobs` lists them), got %q", name, fs.Args())
	}
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: job server %s: %w", name, endpoint, err)
	}
	return jobpb.NewJobServiceClient(conn), fs.Args(), func() { conn.Close() }, nil
}

// rpcError says which job server failed a call, and how.
func rpcError(cmd string, err error) error {
	if s, ok := status.FromError(err); ok {
		if s.Code() == codes.Unavailable {
			return fmt.Errorf("%s: the job server is not reachable: %s", cmd, s.Message())
		}
		return fmt.Errorf("%s: %s (%s)", cmd, s.Message(), s.Code())
	}
	return fmt.Errorf("%s: %w", cmd, err)
}

// runJobs lists the job server's jobs: id, state, name, application.
func runJobs(ctx context.Context, args []string, stdout io.Writer) error {
	client, _, closeConn, err := parseClient("jobs", args, 0)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := client.GetJobs(ctx, &jobpb.GetJobsRequest{})
	if err != nil {
		return rpcError("jobs", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tNAME\tAPPLICATION")
	for _, j := range resp.GetJobInfo() {
		app := pipelineOption(j.GetPipelineOptions(), "application_id")
		if app == "" {
			app = "-"
		}
		state := j.GetState().String()
		if j.GetState() == jobpb.JobState_DONE && wasDrained(ctx, client, j.GetJobId()) {
			state += " (drained)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", j.GetJobId(), state, j.GetJobName(), app)
	}
	return tw.Flush()
}

// wasDrained reports whether a job that ended went through DRAINING: ksrunner
// ends a drained job DONE (the state every SDK client takes as success), so
// its state history is what says it was drained. Any error says no.
func wasDrained(ctx context.Context, client jobpb.JobServiceClient, id string) bool {
	stream, err := client.GetStateStream(ctx, &jobpb.GetJobStateRequest{JobId: id})
	if err != nil {
		return false
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return false
		}
		if ev.GetState() == jobpb.JobState_DRAINING {
			return true
		}
	}
}

// pipelineOption reads a job's option as the SDKs send it (the Go SDK
// under beam:option:go_options:v1, the others as beam:option:NAME:v1).
func pipelineOption(opts *structpb.Struct, name string) string {
	f := opts.GetFields()
	if v := f["beam:option:go_options:v1"].GetStructValue().GetFields()["options"].GetStructValue().GetFields()[name]; v != nil {
		return v.GetStringValue()
	}
	return f["beam:option:"+name+":v1"].GetStringValue()
}

// runCancel cancels a job and waits for it to end.
func runCancel(ctx context.Context, args []string, stdout io.Writer) error {
	client, ids, closeConn, err := parseClient("cancel", args, 1)
	if err != nil {
		return err
	}
	defer closeConn()
	id := ids[0]
	if _, err := client.Cancel(ctx, &jobpb.CancelJobRequest{JobId: id}); err != nil {
		return rpcError("cancel "+id, err)
	}
	fmt.Fprintf(stdout, "job %s: cancelling\n", id)
	return waitEnd(ctx, client, id, stdout, "cancel")
}

// runDrain drains a job and waits for it to end.
func runDrain(ctx context.Context, args []string, stdout io.Writer) error {
	client, ids, closeConn, err := parseClient("drain", args, 1)
	if err != nil {
		return err
	}
	defer closeConn()
	id := ids[0]
	if _, err := client.Drain(ctx, &jobpb.DrainJobRequest{JobId: id}); err != nil {
		if status.Code(err) == codes.Unimplemented {
			return fmt.Errorf("drain %s: this job server does not implement Drain (%s); `ksrunner cancel %s` stops the job without firing its windows", id, status.Convert(err).Message(), id)
		}
		return rpcError("drain "+id, err)
	}
	fmt.Fprintf(stdout, "job %s: draining\n", id)
	return waitEnd(ctx, client, id, stdout, "drain")
}

// waitEnd follows the job's states until it ends, printing each.
func waitEnd(ctx context.Context, client jobpb.JobServiceClient, id string, stdout io.Writer, cmd string) error {
	stream, err := client.GetStateStream(ctx, &jobpb.GetJobStateRequest{JobId: id})
	if err != nil {
		return rpcError(cmd+" "+id, err)
	}
	last := jobpb.JobState_UNSPECIFIED
	for {
		ev, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if last == jobpb.JobState_FAILED {
					return fmt.Errorf("%s %s: the job ended FAILED", cmd, id)
				}
				return nil
			}
			return rpcError(cmd+" "+id, err)
		}
		if ev.GetState() != last {
			last = ev.GetState()
			fmt.Fprintf(stdout, "job %s: %s\n", id, last)
		}
	}
}
