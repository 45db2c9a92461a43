package kafkastreams

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	jobpb "github.com/apache/beam/sdks/v2/go/pkg/beam/model/jobmanagement_v1"
)

// follow shows the job's message stream on out until the job ends: each
// state change and each message once, a message at the level of its
// importance. Unlike the SDK's universal runner it does not log them with
// the SDK's logger: in a LOOPBACK program that logger is the SDK harness's,
// which sends its lines to the job server (whose log would have each line
// twice, and the terminal none).
//
// It returns nil when the job is DONE, DRAINED or CANCELLED, and an error
// with the job's last error message when it FAILED.
func follow(ctx context.Context, client jobpb.JobServiceClient, jobID string, out *slog.Logger) error {
	stream, err := client.GetMessageStream(ctx, &jobpb.JobMessagesRequest{JobId: jobID})
	if err != nil {
		return fmt.Errorf("ksrunner: following job %s: %w", jobID, err)
	}
	lastError := ""
	failed := false
	for {
		msg, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if failed {
					return jobFailed(jobID, lastError)
				}
				return fmt.Errorf("ksrunner: job %s: the job server ended the message stream before the job ended", jobID)
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("ksrunner: following job %s: %w", jobID, err)
		}
		if st := msg.GetStateResponse(); st != nil {
			state := st.GetState()
			level := slog.LevelInfo
			if state == jobpb.JobState_FAILED {
				level = slog.LevelError
			}
			out.Log(ctx, level, fmt.Sprintf("job %s: %s", jobID, state))
			switch state {
			case jobpb.JobState_DONE, jobpb.JobState_DRAINED, jobpb.JobState_CANCELLED, jobpb.JobState_UPDATED:
				return nil
			case jobpb.JobState_FAILED:
				failed = true
				if lastError != "" {
					return jobFailed(jobID, lastError)
				}
				// The error message, if any, follows.
			}
			continue
		}
		m := msg.GetMessageResponse()
		if m == nil {
			continue
		}
		out.Log(ctx, messageLevel(m.GetImportance()), fmt.Sprintf("job %s: %s", jobID, m.GetMessageText()))
		if m.GetImportance() >= jobpb.JobMessage_JOB_MESSAGE_ERROR {
			lastError = m.GetMessageText()
			if failed {
				return jobFailed(jobID, lastError)
			}
		}
	}
}

func jobFailed(jobID, msg string) error {
	if msg == "" {
		msg = "(the job server sent no error message)"
	}
	return fmt.Errorf("job %s failed: %s", jobID, msg)
}

// messageLevel is the slog level of a job message's importance.
func messageLevel(i jobpb.JobMessage_MessageImportance) slog.Level {
	switch i {
	case jobpb.JobMessage_JOB_MESSAGE_ERROR:
		return slog.LevelError
	case jobpb.JobMessage_JOB_MESSAGE_WARNING:
		return slog.LevelWarn
	case jobpb.JobMessage_JOB_MESSAGE_DEBUG, jobpb.JobMessage_JOB_MESSAGE_DETAILED:
		return slog.LevelDebug
	}
	return slog.LevelInfo
}
