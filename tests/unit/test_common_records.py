"""common/records.py: the one record store (load, durable save, remove) and its error for a record it cannot read."""

import json
import os
import stat

import pytest

from ansible_collections.xdpfleet.fabric.plugins.module_utils.common import records


def test_no_record_loads_as_none_and_a_saved_one_loads_back(tmp_path):
    record = records.Record(str(tmp_path / "state"), "thing.json")
    assert record.load() is None
    record.save({"version": 1, "b": [1, 2], "a": {"x": "y"}})
    assert record.load() == {"version": 1, "b": [1, 2], "a": {"x": "y"}}


def test_a_record_is_private_and_its_missing_directories_are_made_0700(tmp_path):
    state_dir = tmp_path / "var" / "state"
    records.Record(str(state_dir), "thing.json").save({"a": 1})
    assert stat.S_IMODE(os.stat(state_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "var").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(state_dir / "thing.json").st_mode) == 0o600
    assert os.listdir(state_dir) == ["thing.json"], "no temporary file left behind"


def test_the_file_is_sorted_indented_json_ending_in_a_newline(tmp_path):
    """The format records written before this store had: they must go on loading, and this one is the same."""
    records.Record(str(tmp_path), "thing.json").save({"b": 1, "a": {"d": 2, "c": 3}})
    text = (tmp_path / "thing.json").read_text()
    assert text == json.dumps({"a": {"c": 3, "d": 2}, "b": 1}, indent=2, sort_keys=True) + "\n"


def test_a_record_written_by_hand_in_any_json_layout_loads(tmp_path):
    (tmp_path / "thing.json").write_text('{"status":"up","hosts":{}}')
    assert records.Record(str(tmp_path), "thing.json").load() == {"status": "up", "hosts": {}}


def test_save_replaces_the_whole_record(tmp_path):
    record = records.Record(str(tmp_path), "thing.json")
    record.save({"a": 1, "b": 2})
    record.save({"c": 3})
    assert record.load() == {"c": 3}


def test_remove_says_whether_there_was_a_record(tmp_path):
    record = records.Record(str(tmp_path), "thing.json")
    assert record.remove() is False
    record.save({"a": 1})
    assert record.remove() is True
    assert not (tmp_path / "thing.json").exists()
    assert record.load() is None


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "is corrupt (not JSON: "),
        ('{"a": 1', "is corrupt (not JSON: "),
        ("[1, 2]", "is corrupt (a JSON list, not an object)"),
        ("null", "is corrupt (a JSON NoneType, not an object)"),
    ],
)
def test_a_corrupt_record_raises_naming_the_field_and_the_file(tmp_path, content, says):
    path = tmp_path / "thing.json"
    path.write_text(content)
    with pytest.raises(records.RecordError) as raised:
        records.Record(str(tmp_path), "thing.json", field="lab_dir").load()
    assert str(raised.value).startswith(f"lab_dir: the record {path} {says}")


def test_an_unreadable_record_raises_naming_the_file(tmp_path):
    (tmp_path / "thing.json").mkdir()  # there, but no file to read (as root a mode would not stop the read)
    with pytest.raises(records.RecordError, match=f"^state_dir: the record {tmp_path}/thing.json cannot be read: "):
        records.Record(str(tmp_path), "thing.json").load()


def test_a_record_that_is_not_utf8_is_unreadable_not_a_crash(tmp_path):
    (tmp_path / "thing.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(records.RecordError, match="cannot be read"):
        records.Record(str(tmp_path), "thing.json").load()


def test_the_error_is_a_value_error(tmp_path):
    """Callers that counted a corrupt JSON file (a ValueError) as their own error keep doing so."""
    assert issubclass(records.RecordError, ValueError)
