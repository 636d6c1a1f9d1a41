"""``validate``'s shortcut is sound: it never accepts a frame pandera rejects.

Every schema the GPU pipeline applies is tried on real frames (a generated
repetition, its energy, the setting, benchmark and facts tables) and on
copies broken one way at a time: a null, a negative, an infinite value, a
value of the wrong type, a column dropped, rows out of order or duplicated
(each in one column of every kind the schema judges differently).
Wherever :func:`passes` says yes, pandera must accept too; on the intact
frames it must say yes (else the shortcut is never taken). Schemas unlike
the project's (regex on labels that are not text, checks returning arrays
or other shapes) are tried on their own.
"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest
from pandera.errors import SchemaError

from joulehouse import validation
from joulehouse.errors import InputError
from joulehouse.facts import ENERGY_FACTS_SCHEMA
from joulehouse.gpu import schemas
from joulehouse.gpu.aggregate import benchmark_table, setting_table
from joulehouse.gpu.energy import energy_facts_rows, repetition_energy
from joulehouse.gpu.generator import RepetitionSpec, write_repetition
from joulehouse.gpu.layout import RepetitionRef
from joulehouse.gpu.readers import read_repetition
from joulehouse.validation import passes, validate, validate_each


@pytest.fixture(scope="module")
def frames(tmp_path_factory) -> dict[str, tuple[pa.DataFrameSchema, pd.DataFrame]]:
    """Every schema with an intact frame it describes."""
    root = tmp_path_factory.mktemp("validation")
    energies = []
    for number, run in enumerate(["150W", "200W", "250W"]):
        ref = RepetitionRef.from_key(root, f"power-limit/bert/{run}/0")
        write_repetition(ref.path, RepetitionSpec(), seed=number)
        rep = read_repetition(ref, timezone="Europe/Berlin")
        energies.append(repetition_energy(rep))
    energy = pd.concat(energies, ignore_index=True)
    setting = setting_table(energy)
    head = 50  # rows of each file's frame: enough to break, fast to report
    return {
        "timestamps": (schemas.TIMESTAMPS_SCHEMA, rep.timestamps),
        "gpu-power": (schemas.GPU_POWER_SCHEMA, rep.gpu_power[:head]),
        "power-external": (schemas.EXTERNAL_POWER_SCHEMA, rep.external_power[:head]),
        "total_power_samples": (schemas.POWER_SAMPLES_SCHEMA, rep.power_samples[:head]),
        "samples": (schemas.SAMPLES_SCHEMA, rep.samples["gpu_utilization"][:head]),
        "repetition_energy": (schemas.REPETITION_ENERGY_SCHEMA, energy),
        "setting_energy": (schemas.SETTING_SCHEMA, setting),
        "benchmark_energy": (schemas.BENCHMARK_SCHEMA, benchmark_table(setting)),
        "energy_facts": (ENERGY_FACTS_SCHEMA, energy_facts_rows(energy)),
    }


def _pandera_accepts(schema: pa.DataFrameSchema, frame: pd.DataFrame) -> bool:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            schema.validate(frame.copy())  # eager: the first failure decides
    except SchemaError:
        return False
    return True


def _set(frame: pd.DataFrame, column: str, row: int, value) -> pd.DataFrame:
    broken = frame.copy()
    values = broken[column].astype(object)
    values.iloc[row] = value
    try:
        broken[column] = values.astype(frame[column].dtype)
    except (TypeError, ValueError, OverflowError):
        broken[column] = values  # the value does not fit the dtype: an object column
    return broken


def _kind(schema: pa.DataFrameSchema, frame: pd.DataFrame, column) -> tuple:
    """What decides how ``schema`` judges ``column``: its dtype in the frame, and the
    rules of the schema's column that describes it (dtype, nulls, uniqueness, required,
    regex, each check with its arguments), and whether it is in the schema's ``unique``.
    A time column of a schema with checks of the whole frame is a kind of its own: those
    checks compare time columns (``window_ordered``: ``window_end >= window_start``)."""
    specs = [spec for spec in schema.columns.values()
             if (re.match(spec.name, str(column)) if spec.regex else spec.name == column)]
    rules = tuple((str(spec.dtype), spec.nullable, spec.unique, spec.required, spec.regex,
                   tuple((check.name, repr(check.statistics), check.ignore_na,
                          check.element_wise, check._check_fn) for check in spec.checks))
                  for spec in specs)
    own = column if schema.checks and isinstance(frame[column].dtype, pd.DatetimeTZDtype) \
        else None
    return str(frame[column].dtype), rules, column in (schema.unique or []), own


def _broken(schema: pa.DataFrameSchema, frame: pd.DataFrame):
    """(description, frame) for each way of breaking ``frame`` once: every way, in the
    first column of each kind (:func:`_kind`): the others of its kind are judged by the
    same rules (the energy tables have up to 25 columns of one kind)."""
    row = len(frame) // 2
    kinds = set()
    for column in frame.columns:
        kind = _kind(schema, frame, column)
        if kind in kinds:
            continue
        kinds.add(kind)
        dtype = frame[column].dtype
        if pd.api.types.is_numeric_dtype(dtype) and not pd.api.types.is_bool_dtype(dtype):
            for value in (np.nan, -1, np.inf):  # inf: above any maximum
                yield f"{column} = {value}", _set(frame, column, row, value)
        elif isinstance(dtype, pd.DatetimeTZDtype):
            yield f"{column} = NaT", _set(frame, column, row, pd.NaT)
            yield f"{column} repeated", _set(frame, column, row, frame[column].iloc[row - 1])
            yield f"{column} backwards", _set(frame, column, row, frame[column].iloc[0])
        else:
            yield f"{column} = None", _set(frame, column, row, None)
            yield f"{column} = 5", _set(frame, column, row, 5)
        yield f"{column} as text", frame.assign(**{column: frame[column].astype(str)})
        yield f"without {column}", frame.drop(columns=column)
    yield "first row twice", pd.concat([frame.iloc[:1], frame], ignore_index=True)
    yield "rows reversed", frame.iloc[::-1].reset_index(drop=True)
    yield "no rows", frame.iloc[:0]


def test_intact_frames_take_the_shortcut(frames):
    for name, (schema, frame) in frames.items():
        assert len(frame) > 0, name
        assert passes(schema, frame), name
        assert _pandera_accepts(schema, frame), name


def test_the_shortcut_never_accepts_what_pandera_rejects(frames):
    rejected = 0
    for name, (schema, frame) in frames.items():
        for change, broken in _broken(schema, frame):
            accepted = _pandera_accepts(schema, broken)
            rejected += not accepted
            if not accepted:
                assert not passes(schema, broken), f"{name}: {change}"
    assert rejected > 150  # 177: the broken frames do exercise the checks


def _odd_cases():
    """Schemas and frames outside the project's own, where pandera's rules are subtle."""
    number = pa.DataFrameSchema({r"^\d+$": pa.Column(float, pa.Check.ge(0), regex=True)})
    two = pd.DataFrame({"a": [1.0], "b": [-1.0]})
    yield "regex on a label that is not text", number, pd.DataFrame({"7": [1.0], 8: [-1.0]})
    yield "only such labels", number, pd.DataFrame({1: [-1.0]})
    yield "check returns an array", pa.DataFrameSchema(
        {"a": pa.Column(float, pa.Check(lambda s: s.to_numpy() >= 0))}), two
    yield "check returns a 0-d array", pa.DataFrameSchema(
        {"a": pa.Column(float, pa.Check(lambda s: np.array(True)))}), two
    yield "frame check returns a narrower frame", pa.DataFrameSchema(
        {"a": pa.Column(float), "b": pa.Column(float)},
        checks=pa.Check(lambda df: df[["a"]] >= 0)), two
    yield "frame check returns an array", pa.DataFrameSchema(
        {"a": pa.Column(float)}, checks=pa.Check(lambda df: (df >= 0).to_numpy())), two
    yield "regex column, columns a MultiIndex", pa.DataFrameSchema(
        {"^x": pa.Column(float, regex=True, required=False)}),  pd.DataFrame(
        [[1.0]], columns=pd.MultiIndex.from_tuples([("x", "y")]))
    yield "unique given as one name", pa.DataFrameSchema(
        {"ab": pa.Column(float), "a": pa.Column(float)}, unique="ab"), pd.DataFrame(
        {"ab": [1.0, 1.0], "a": [1.0, 2.0]})
    yield "checked nulls", pa.DataFrameSchema(
        {"a": pa.Column(float, pa.Check.ge(0, ignore_na=False), nullable=True)}), pd.DataFrame(
        {"a": [1.0, np.nan]})


@pytest.mark.parametrize(("case", "schema", "frame"), list(_odd_cases()))
def test_odd_schemas_are_never_accepted_where_pandera_refuses(case, schema, frame):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            schema.validate(frame.copy(), lazy=True)
        accepted = True
    except Exception:  # noqa: BLE001 - a refusal of any kind, as pandera words it
        accepted = False
    assert accepted or not passes(schema, frame), case


def test_options_it_does_not_evaluate_go_to_pandera(frames):
    schema, frame = frames["gpu-power"]
    for option in ({"strict": "filter"}, {"coerce": True}, {"add_missing_columns": True}):
        assert not passes(pa.DataFrameSchema(schema.columns, **option), frame), option


def test_a_rejected_frame_is_reported_by_pandera_with_its_line(frames):
    schema, frame = frames["gpu-power"]
    broken = _set(frame, "util_gpu_pct", 7, 250.0)
    with pytest.raises(InputError) as error:
        validate(schema, broken, "gpu-power.csv")
    assert error.value.line == 9  # frame row 7 + header + 1-based
    assert error.value.field == "util_gpu_pct"
    assert "in_range" in str(error.value)


def _alone(schema: pa.DataFrameSchema, frame: pd.DataFrame, key: str):
    """What :func:`validate` gives ``frame`` alone: the frame, or its error's text."""
    try:
        return validate(schema, frame, key)
    except InputError as err:
        return str(err)


def test_each_frame_validated_together_is_judged_as_alone(frames, monkeypatch):
    """The energy of three repetitions, one of them broken every way: validated together,
    each gets what it gets alone (the intact ones unchanged, the broken one its own error
    naming its key); all intact, they are returned as they are."""
    schema, energy = frames["repetition_energy"]
    parts = {key: part.reset_index(drop=True)
             for key, (_, part) in zip("abc", energy.groupby("run", sort=False), strict=True)}
    proofs = []
    monkeypatch.setattr(validation, "passes", lambda *args, **kwargs: proofs.append(
        len(args[1])) or passes(*args, **kwargs))
    intact = validate_each(schema, parts)
    assert all(intact[key] is parts[key] for key in parts)
    assert proofs == [len(energy)]  # one pass over the three together
    judged = 0
    intact_alone = {key: _alone(schema, part, key) for key, part in parts.items()}
    for how, broken in _broken(schema, parts["b"]):
        given = {**parts, "b": broken}
        together = validate_each(schema, given)
        assert list(together) == ["a", "b", "c"], how
        for key, frame in given.items():
            # a and c are the same frames in every case: what they get alone, once
            alone = _alone(schema, frame, key) if key == "b" else intact_alone[key]
            got = together[key]
            if isinstance(alone, str):
                assert isinstance(got, InputError) and str(got) == alone, how
                assert str(got).startswith("b"), how
                judged += 1
            else:
                assert got is frame, how
    assert judged > 35  # 44 rejections of b


def test_a_check_of_the_whole_frame_is_no_proof_for_its_parts(frames):
    """The timestamps' check that the file has an experiment_begin event gives one boolean
    for the whole frame: two files together have one, the file without it still fails."""
    schema, timestamps = frames["timestamps"]
    without = timestamps[timestamps["event"] != "experiment_begin"].reset_index(drop=True)
    without["time"] += pd.Timedelta(days=1)  # after the first file's: in order together
    together = pd.concat([timestamps, without], ignore_index=True)
    assert passes(schema, together) and not passes(schema, together, rows_only=True)
    checked = validate_each(schema, {"with": timestamps, "without": without})
    assert checked["with"] is timestamps
    assert isinstance(checked["without"], InputError)
    assert str(checked["without"]).startswith("without")
