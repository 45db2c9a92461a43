"""Beam Python's portable-runner suite (PortableRunnerTest of
apache_beam/runners/portability/portable_runner_test.py, which inherits
FnApiRunnerTest's tests) against ksrunner's job server.

The suite starts its own job service (Beam's LocalJobServicer) and runs the
SDK harness in the job service's process (EMBEDDED_PYTHON). Here the job
endpoint is ksrunner's, from KSRUNNER_TEST_JOB_ENDPOINT, and the SDK harness is
LOOPBACK: a worker pool in this process that ksrunner's workers connect to
(ksrunner runs no harness in its own process).

KSRUNNER_TEST_TIMEOUT bounds each test (seconds, default 180): a test still
running then fails with a TimeoutError, and its jobs still running on the
job server are cancelled, so that one hanging test does not hang the suite
or leave its job running under the next tests.
"""
import os
import signal

import grpc

from apache_beam.options.pipeline_options import PortableOptions
from apache_beam.portability.api import beam_job_api_pb2
from apache_beam.portability.api import beam_job_api_pb2_grpc
from apache_beam.runners.portability import portable_runner_test

_TERMINAL = {
    beam_job_api_pb2.JobState.DONE, beam_job_api_pb2.JobState.FAILED,
    beam_job_api_pb2.JobState.CANCELLED, beam_job_api_pb2.JobState.UPDATED,
    beam_job_api_pb2.JobState.DRAINED
}


class KsrunnerPortableRunnerTest(portable_runner_test.PortableRunnerTest):
  _timeout = int(os.environ.get('KSRUNNER_TEST_TIMEOUT', '180'))

  @classmethod
  def _create_job_endpoint(cls):
    endpoint = os.environ.get('KSRUNNER_TEST_JOB_ENDPOINT')
    if not endpoint:
      raise RuntimeError(
          'KSRUNNER_TEST_JOB_ENDPOINT is not set: it names the ksrunner job '
          'server the suite runs against')
    return endpoint

  def create_options(self):
    options = super().create_options()
    options.view_as(PortableOptions).environment_type = 'LOOPBACK'
    return options

  def setUp(self):
    super().setUp()
    self._timed_out = False

    def on_alarm(signum, frame):
      self._timed_out = True
      raise TimeoutError(
          'test still running after %ds (KSRUNNER_TEST_TIMEOUT)' %
          self._timeout)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(self._timeout)

  def tearDown(self):
    signal.alarm(0)
    if self._timed_out:
      self._cancel_running_jobs()
    super().tearDown()

  def _cancel_running_jobs(self):
    with grpc.insecure_channel(self._get_job_endpoint()) as channel:
      jobs = beam_job_api_pb2_grpc.JobServiceStub(channel)
      for job in jobs.GetJobs(beam_job_api_pb2.GetJobsRequest(),
                              timeout=30).job_info:
        if job.state not in _TERMINAL:
          jobs.Cancel(
              beam_job_api_pb2.CancelJobRequest(job_id=job.job_id), timeout=30)
