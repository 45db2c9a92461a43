"""A pytest plugin that does for Beam's ValidatesRunner tests what Beam's
own sdks/python/conftest.py does (it is not in the apache-beam wheel): the
--test-pipeline-options option TestPipeline reads, and Beam's test marks."""
from apache_beam.testing.test_pipeline import TestPipeline


def pytest_addoption(parser):
    parser.addoption('--test-pipeline-options', help='Options for test pipelines')


def pytest_configure(config):
    TestPipeline.pytest_test_pipeline_options = config.getoption('test_pipeline_options', default='')
    for mark in ('it_validatesrunner', 'no_sickbay_batch', 'no_sickbay_streaming',
                 'uses_java_expansion_service', 'uses_dill', 'no_xdist'):
        config.addinivalue_line('markers', mark + ': Beam test mark')
