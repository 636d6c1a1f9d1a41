"""Bad input: each case raises an InputError naming the file and the line or field."""

import pandas as pd
import pytest

from joulehouse.errors import IncompleteInputError, InputError
from joulehouse.gpu.energy import repetition_energy
from joulehouse.gpu.readers import read_repetition


def edit_lines(path, change):
    """Rewrite ``path`` as ``change(lines)``; lines keep their line ends (line 1 = header)."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(change(lines)))


def set_field(path, line, column, value):
    """Set ``column`` of 1-based ``line`` to ``value`` (a str)."""
    def change(lines):
        header = lines[0].decode().rstrip("\n").split(",")
        fields = lines[line - 1].decode().rstrip("\n").split(",")
        fields[header.index(column)] = value
        lines[line - 1] = (",".join(fields) + "\n").encode()
        return lines
    edit_lines(path, change)


def raises(ref, message, *, line=None, field=None, name="gpu-power.csv", kind=InputError):
    with pytest.raises(kind) as caught:
        read_repetition(ref)
    error = caught.value
    assert error.path == str(ref.path / name)
    assert error.line == line and error.field == field
    assert message in str(error)
    where = f"{ref.path / name}:{line}" if line else str(ref.path / name)
    assert str(error).startswith(where + ": ")
    return error


def test_last_line_cut_short(repetition):
    ref, _ = repetition
    path = ref.path / "gpu-power.csv"
    count = len(path.read_bytes().splitlines())
    path.write_bytes(path.read_bytes()[:-9])
    raises(ref, "cut short", line=count)


def test_line_with_missing_fields(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "gpu-power.csv",
               lambda lines: lines[:11] + [lines[11][:30] + b"\n"] + lines[12:])
    raises(ref, "fields where the header has 15", line=12)


def test_empty_file(repetition):
    ref, _ = repetition
    (ref.path / "power-external.csv").write_bytes(b"")
    raises(ref, "empty file", name="power-external.csv")


def test_bytes_that_are_not_utf8(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "gpu-power.csv",
               lambda lines: lines[:9] + [lines[9].replace(b"2020", b"20\xff\xfe")] + lines[10:])
    raises(ref, "not UTF-8", line=10)


def test_not_a_number(repetition):
    ref, _ = repetition
    set_field(ref.path / "gpu-power.csv", 20, "power", "12x")
    raises(ref, "invalid value '12x'", line=20, field="power")


@pytest.mark.parametrize(
    ("value", "check"),
    [("", "not_nullable"), ("-5000", "in_range(0, 5000.0)"),
     ("6000000", "in_range(0, 5000.0)")],
)
def test_nan_negative_or_absurd_gpu_power(repetition, value, check):
    ref, _ = repetition
    set_field(ref.path / "gpu-power.csv", 7, "power", value)
    raises(ref, f"{check} failed at line 7", line=7, field="power_w")


def test_negative_power_samples_listed_with_every_failing_line(repetition):
    ref, _ = repetition
    for line in (5, 9):
        set_field(ref.path / "total_power_samples.csv", line, "value", "-1")
    error = raises(ref, "line 5 (-0.001), 9 (-0.001)", line=5, field="power_w",
                   name="total_power_samples.csv")
    assert "in_range(0, 5000.0)" in str(error)


def test_timestamps_out_of_order(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "gpu-power.csv",
               lambda lines: lines[:4] + [lines[5], lines[4]] + lines[6:])
    raises(ref, "strictly_increasing failed at line 6", line=6, field="time")


def test_duplicated_timestamps(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "power-external.csv",
               lambda lines: lines[:8] + [lines[7]] + lines[8:])
    raises(ref, "strictly_increasing failed at line 9", line=9, field="time",
           name="power-external.csv")


def test_unparsable_timestamp(repetition):
    ref, _ = repetition
    set_field(ref.path / "gpu-power.csv", 15, "timestamp", "16.11.2020 13:49")
    raises(ref, "invalid value '16.11.2020 13:49'", line=15, field="timestamp")


def test_local_time_the_clock_skipped(repetition):
    ref, _ = repetition
    set_field(ref.path / "gpu-power.csv", 15, "timestamp", "2020-03-29 02:30:00")
    with pytest.raises(InputError, match="not valid in Europe/Berlin") as caught:
        read_repetition(ref, timezone="Europe/Berlin")
    assert caught.value.path == str(ref.path / "gpu-power.csv")
    assert caught.value.field == "timestamp"


def test_missing_required_column(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "gpu-power.csv",
               lambda lines: [lines[0].replace(b",power,", b",watts,")] + lines[1:])
    raises(ref, "missing column", line=1, field="power")


def test_missing_experiment_begin(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "timestamps.csv", lambda lines: [lines[0], *lines[2:]])
    raises(ref, "has_experiment_begin failed", name="timestamps.csv")


def test_no_experiment_end_is_incomplete(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "timestamps.csv", lambda lines: lines[:-1])
    raises(ref, "no experiment_end event yet", field="event", name="timestamps.csv",
           kind=IncompleteInputError)


def test_bad_json(repetition):
    ref, _ = repetition
    path = ref.path / "system_info.json"
    lines = path.read_text().splitlines(keepends=True)
    line = next(n for n, text in enumerate(lines, start=1) if "cuda_version" in text)
    lines[line - 1] = '  "cuda_version": 11.0.1,\n'
    path.write_text("".join(lines))
    raises(ref, "not JSON", line=line, name="system_info.json")


def test_unknown_extra_columns_are_kept(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "gpu-power.csv", lambda lines: [
        lines[0].rstrip(b"\n") + b",Fan Speed\n",
        *(line.rstrip(b"\n") + f",{i % 7}\n".encode() for i, line in enumerate(lines[1:]))])
    rep = read_repetition(ref)
    assert list(rep.gpu_power["fan_speed"][:3]) == [0, 1, 2]
    assert len(repetition_energy(rep)) == 5


def test_extra_column_that_would_shadow_another(repetition):
    ref, _ = repetition
    edit_lines(ref.path / "gpu-power.csv", lambda lines: [
        line.rstrip(b"\n") + (b",Power W\n" if number == 0 else b",1\n")
        for number, line in enumerate(lines)])
    raises(ref, "column would be kept as 'power_w', a name already taken", line=1,
           field="Power W")


def test_run_name_matching_no_pattern_keeps_label(make_repetition, tmp_path):
    ref, _ = make_repetition(tmp_path, key="power-limit/bert/default settings/0")
    energy = repetition_energy(read_repetition(ref))
    assert (energy["label"] == "default settings").all()
    assert energy[["power_limit_w", "memory_clock_mhz", "sm_clock_mhz"]].isna().all().all()


def test_counter_reset_is_not_an_error(make_repetition, tmp_path):
    ref, _ = make_repetition(tmp_path, counter_reset_at_s=30.0)
    energy = repetition_energy(read_repetition(ref))
    assert energy["counter_resets"].iloc[0] == 1
    assert pd.notna(energy["gpu_energy_counter_j"]).all()


def test_missing_samples_timestamp_names_its_line(repetition):
    ref, _ = repetition
    set_field(ref.path / "total_power_samples.csv", 8, "timestamp", "")
    raises(ref, "missing timestamp", line=8, field="timestamp", name="total_power_samples.csv")


def test_samples_file_with_only_its_header_is_no_samples(repetition):
    """NVML may return no sample in a window: an empty buffer is no error, and the
    samples method then has no energy while the counter's stands."""
    ref, _ = repetition
    edit_lines(ref.path / "total_power_samples.csv", lambda lines: lines[:1])
    frames = read_repetition(ref)
    assert len(frames.power_samples) == 0
    energy = repetition_energy(frames)
    experiment = energy[energy["phase"] == "experiment"].iloc[0]
    assert pd.isna(experiment["gpu_energy_samples_j"])
    assert experiment["gpu_energy_counter_j"] > 0
