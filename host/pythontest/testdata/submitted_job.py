"""The end of the Kafka test scripts: submit a pipeline, publish its job id
for the Go test (which cancels or awaits it), wait for it to end, and exit 0
only if it ended in the expected state."""

import os

from apache_beam.runners.runner import PipelineState
from script_exit import exit_now


def run_and_await(p, jobid_file, expect=PipelineState.CANCELLED):
    """Runs p, writes its job id to jobid_file (whole, by a rename), waits
    until the job ends and exits 0 if it ended in state expect, else 1. A
    job expected DONE that fails ends the script at once."""
    result = p.run()
    with open(jobid_file + '.tmp', 'w') as f:
        f.write(result._job_id)
    os.rename(jobid_file + '.tmp', jobid_file)
    print('submitted job', result._job_id, flush=True)
    try:
        result.wait_until_finish()
    except RuntimeError as e:
        print('wait_until_finish:', e, flush=True)
        if expect == PipelineState.DONE:
            exit_now(1)
    state = result.state
    print('job ended', state, flush=True)
    exit_now(0 if state == expect else 1)
