"""The runner choice's answers are kept in the environment and asked again when what they depend
on changes (vllm_hotpaths.testing.runner_choice)."""

from vllm_hotpaths.testing.runner_choice import kept_or_asked


def test_answers_are_kept_until_an_input_changes(tmp_path, monkeypatch):
    vllm = tmp_path / "vllm"
    (vllm / "config").mkdir(parents=True)
    (vllm / "config" / "model.py").write_text("A = 1\n")
    asked = []

    def ask(folder):
        asked.append(folder)
        return [{"configuration": "Qwen3 dense", "runner": f"answer {len(asked)}"}]

    def runner():
        return kept_or_asked(tmp_path, ask, tmp_path / "kept.json", vllm)[0]["runner"]

    monkeypatch.delenv("VLLM_USE_V2_MODEL_RUNNER", raising=False)
    assert [runner(), runner()] == ["answer 1", "answer 1"]
    (vllm / "config" / "model.py").write_text("A = 2\n")  # an edited file
    assert [runner(), runner()] == ["answer 2", "answer 2"]
    (vllm / "envs.py").write_text("")  # a new file
    assert runner() == "answer 3"
    monkeypatch.setenv("VLLM_USE_V2_MODEL_RUNNER", "1")
    assert [runner(), runner()] == ["answer 4", "answer 4"]
    (tmp_path / "kept.json").write_text("{not json")  # a damaged store: asked again, then kept
    assert [runner(), runner()] == ["answer 5", "answer 5"]
