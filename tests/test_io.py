import pytest

from gspo.io import DataError, atomic_dir, atomic_write_text, read_jsonl, write_jsonl


def test_a_failed_directory_write_leaves_the_previous_complete_folder(tmp_path):
    dest = tmp_path / "model"
    with atomic_dir(dest) as tmp:
        (tmp / "weights").write_text("v1")
    with pytest.raises(RuntimeError):
        with atomic_dir(dest) as tmp:
            (tmp / "weights").write_text("v2-partial")
            raise RuntimeError("killed mid-write")
    assert (dest / "weights").read_text() == "v1"
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temp folder left behind


def test_a_failed_file_write_leaves_no_partial_file(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "ok")
    with pytest.raises(TypeError):
        atomic_write_text(tmp_path / "a.txt", 123)  # not text: fails inside the write
    assert (tmp_path / "a.txt").read_text() == "ok"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_a_malformed_jsonl_line_is_named_by_file_and_line(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"id": 1, "task": "aime"}\n{"id": 2,\n')
    with pytest.raises(DataError, match=r"d.jsonl:2: malformed JSON"):
        read_jsonl(p)
    with pytest.raises(DataError, match=r"d.jsonl:1: record is missing field 'prompt'"):
        read_jsonl(tmp_path / "d.jsonl", required=("prompt",))


def test_write_jsonl_writes_one_sorted_object_a_line_that_read_jsonl_reads_back(tmp_path):
    recs = [{"id": "b", "task": "aime", "answer": 3}, {"task": "lcb", "id": "a"}]
    path = tmp_path / "sub" / "d.jsonl"
    write_jsonl(recs, path)
    assert path.read_text().splitlines()[1] == '{"id": "a", "task": "lcb"}'
    assert read_jsonl(path) == recs
    with pytest.raises(TypeError):
        write_jsonl([{"id": object()}], path)  # not JSON: the old file stays whole
    assert read_jsonl(path) == recs
    assert [p.name for p in path.parent.iterdir()] == ["d.jsonl"]
