"""The comparison of vLLM's own unit tests with and without the plugin (ci/gpu/vllm-unit-tests.sh)."""

from vllm_hotpaths.testing import upstream_tests


def junit(path, cases: dict[str, str]):
    """A JUnit report: test name -> passed | failed | skipped."""
    body = {"passed": "", "failed": '<failure message="AssertionError: rows differ"/>',
            "skipped": '<skipped message="needs two GPUs"/>'}
    rows = "".join(f'<testcase classname="tests.v1.worker.test_gpu_input_batch" name="{name}">{body[o]}</testcase>'
                   for name, o in cases.items())
    path.write_text(f'<testsuites><testsuite name="pytest">{rows}</testsuite></testsuites>')
    return str(path)


def test_a_test_lost_with_the_plugin_fails_the_comparison(tmp_path, capsys):
    upstream = junit(tmp_path / "upstream.xml", {"test_swap": "passed", "test_two_gpus": "skipped"})
    plugin = junit(tmp_path / "plugin.xml", {"test_swap": "failed", "test_two_gpus": "skipped"})
    assert upstream_tests.main([upstream, plugin]) == 1
    out = capsys.readouterr().out
    assert "REGRESSION plugin: tests.v1.worker.test_gpu_input_batch::test_swap passed in upstream, failed here" in out
    assert "skipped (1): needs two GPUs" in out


def test_the_same_outcomes_pass_and_a_missing_test_counts_as_lost(tmp_path, capsys):
    upstream = junit(tmp_path / "upstream.xml", {"test_swap": "passed", "test_condense": "passed"})
    same = junit(tmp_path / "plugin.xml", {"test_swap": "passed", "test_condense": "passed"})
    assert upstream_tests.main([upstream, same]) == 0
    assert "PASS: 0 of the 2 tests" in capsys.readouterr().out
    fewer = junit(tmp_path / "every-patch.xml", {"test_swap": "passed"})
    assert upstream_tests.main([upstream, same, fewer]) == 1
    assert "test_condense passed in upstream, missing here" in capsys.readouterr().out


def test_nothing_passing_without_the_plugin_is_no_comparison(tmp_path, capsys):
    upstream = junit(tmp_path / "upstream.xml", {"test_two_gpus": "skipped"})
    assert upstream_tests.main([upstream, upstream]) == 1
    assert "nothing to compare" in capsys.readouterr().out


def test_an_unreadable_report_is_named(tmp_path, capsys):
    (tmp_path / "broken.xml").write_text("<testsuites")
    assert upstream_tests.main([str(tmp_path / "broken.xml"), str(tmp_path / "missing.xml")]) == 2
    assert "cannot read a JUnit report" in capsys.readouterr().err


def test_a_folder_is_one_run_of_several_reports(tmp_path, capsys):
    for run in ("upstream", "plugin"):
        (tmp_path / run).mkdir()
        junit(tmp_path / run / "test_sampler.xml", {"test_sampler": "passed"})
    junit(tmp_path / "upstream" / "test_swap.xml", {"test_swap": "passed"})
    junit(tmp_path / "plugin" / "test_swap.xml", {"test_swap": "failed"})
    assert upstream_tests.main([str(tmp_path / "upstream"), str(tmp_path / "plugin")]) == 1
    out = capsys.readouterr().out
    assert "upstream: 2 passed, 0 failed" in out and "1 of the 2 tests" in out
