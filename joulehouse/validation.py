"""Applying a pandera schema to a frame, and turning its failures into an InputError.

pandera is the contract: every frame is described by a pandera
``DataFrameSchema``, and pandera writes every failure report. Its cost is
mostly fixed, about 0.1 ms per column and per check whatever the rows (the
bookkeeping around each check: result frames, failure cases, error
handling), which dominates the validation of the readers' narrow frames.

So :func:`validate` first runs :func:`passes`: the schema's own pieces, the
same calls pandera makes (its dtype comparison, the null test, each check's
function with its arguments, the same ``ignore_na`` preprocessing), reduced
to one bool without the bookkeeping. A frame it proves valid is returned as
is; anything else (a failure, an exception, a schema option it does not
evaluate, a check output it does not expect) goes to pandera, which decides
and reports. The proof may be stricter than pandera, never looser:
``tests/gpu/test_validation.py`` checks it on every schema of the project
against frames broken every way those schemas describe, and on schemas built
to probe pandera's edge rules.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import pandas as pd
import pandera.pandas as pa
from pandera.api.hypotheses import Hypothesis
from pandera.engines import pandas_engine
from pandera.errors import SchemaErrors

from joulehouse.errors import InputError

#: Failing rows named in an error message, per column and check.
_MAX_ROWS_SHOWN = 5


def validate(
    schema: pa.DataFrameSchema, frame: pd.DataFrame, path: str | os.PathLike[str]
) -> pd.DataFrame:
    """Return ``frame`` (in place, no copy) if it passes ``schema``.

    Otherwise raise InputError naming ``path`` and the failing rows, from
    pandera's lazy validation.
    """
    if passes(schema, frame):
        return frame
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            return schema.validate(frame, lazy=True, inplace=True)
    except SchemaErrors as err:
        raise schema_errors_to_input_error(err, path) from None


def validate_each(schema: pa.DataFrameSchema, frames: Mapping[str, pd.DataFrame]
                  ) -> dict[str, pd.DataFrame | InputError]:
    """:func:`validate` of each frame, its key as the path of its error: by key, the frame
    (no copy) or the ``InputError`` that rejects it.

    For a schema whose checks judge each row alone (element-wise checks, nulls, a check
    giving one boolean per row, uniqueness), as the energy schemas' do: frames of the same
    columns and dtypes then each pass when their concatenation does, and they are proved
    valid in ONE pass (the cost is per column and check, not per row: see the module
    docstring). A check giving one boolean
    for the whole frame is not taken as proof for the parts (``rows_only``); a check
    giving a boolean per row that is computed from other rows is beyond what this can
    tell: do not pass such a schema. When the concatenation is not proved valid, each
    frame is validated alone, so each error is its own."""
    if len(frames) > 1:
        first = next(iter(frames.values()))
        if (all(frame.columns.equals(first.columns) and frame.dtypes.equals(first.dtypes)
                for frame in frames.values())
                and passes(schema, pd.concat(frames.values(), ignore_index=True),
                           rows_only=True)):
            return dict(frames)
    checked: dict[str, pd.DataFrame | InputError] = {}
    for key, frame in frames.items():
        try:
            checked[key] = validate(schema, frame, key)
        except InputError as err:
            checked[key] = err
    return checked


def passes(schema: pa.DataFrameSchema, frame: pd.DataFrame, rows_only: bool = False) -> bool:
    """True only if pandera would accept ``frame`` unchanged; False when unsure, and with
    ``rows_only`` when a check gives one boolean for a whole column or frame."""
    if (not _plain_schema(schema) or isinstance(frame.columns, pd.MultiIndex)
            or not frame.columns.is_unique):
        return False
    schema.register_default_backends(type(frame))  # the built-in checks' pandas functions
    try:
        if schema.ordered and list(frame.columns) != list(schema.columns):
            return False  # pandera's order rule also allows gaps: pandera decides those
        described = set()
        for spec in schema.columns.values():
            names = _matching(spec, frame.columns)
            if spec.required and not names:
                return False
            if not all(_column_passes(spec, frame[name], rows_only) for name in names):
                return False
            described.update(names)
        if schema.strict and len(described) < len(frame.columns):
            return False
        if schema.unique and frame.duplicated(list(schema.unique)).any():
            return False
        return all(_check_passes(check, frame, rows_only) for check in schema.checks)
    except Exception:  # noqa: BLE001 - any doubt is pandera's to decide and report
        return False


def _plain_schema(schema: pa.DataFrameSchema) -> bool:
    """No option that changes the frame, or that :func:`passes` does not evaluate."""
    return (schema.index is None and schema.dtype is None and not schema.coerce
            and schema.strict in (False, True) and not schema.unique_column_names
            and not schema.add_missing_columns and not schema.drop_invalid_rows
            and not schema.parsers and schema.on_missing_columns is None
            and all(not spec.coerce and not spec.parsers and spec.default is None
                    and not spec.drop_invalid_rows and spec.on_missing is None
                    and isinstance(spec.name, str) for spec in schema.columns.values()))


def _matching(spec: pa.Column, columns: pd.Index) -> list[Any]:
    """The frame's columns ``spec`` applies to (a regex matches labels as text, as pandera)."""
    if not spec.regex:
        return [spec.name] if spec.name in columns else []
    return [label for label in columns if re.match(spec.name, str(label))]


def _column_passes(spec: pa.Column, series: pd.Series, rows_only: bool) -> bool:
    if spec.dtype is not None and not _all_true(
            spec.dtype.check(_pandera_dtype(series.dtype), series), series):
        return False
    has_nulls = series.hasnans
    if has_nulls and not spec.nullable:
        return False
    if spec.unique and series.duplicated().any():
        return False
    values = series.dropna() if has_nulls else series
    return all(_check_passes(check, values if check.ignore_na else series, rows_only)
               for check in spec.checks)


@functools.lru_cache(maxsize=64)
def _pandera_dtype(dtype: Any) -> Any:
    """pandera's data type for a frame's dtype (cached: the lookup is slow for some)."""
    return pandas_engine.Engine.dtype(dtype)


def _check_passes(check: pa.Check, data: pd.Series | pd.DataFrame, rows_only: bool) -> bool:
    """Run the check's own function as pandera does; True if every value passes.

    A column's nulls are already dropped when the check ignores them (pandera's
    ``ignore_na``); a frame is checked whole, as pandera checks it.
    """
    if isinstance(check, Hypothesis) or check.element_wise or check.groupby is not None:
        return False
    function: Callable[..., Any] = check._check_fn
    builtin = getattr(function, "__name__", None)
    if builtin is not None and check.is_builtin_check(builtin):
        function = check.get_builtin_check_fn(builtin)  # as Check.__call__: the live dispatcher
    result = function(data, **check._check_kwargs)
    if rows_only and isinstance(result, bool | np.bool_):
        return False
    return _all_true(result, data)


def _all_true(result: Any, data: pd.Series | pd.DataFrame) -> bool:
    """True if a check's output is a True bool, or booleans shaped as pandera expects, all True.

    A Series must have one value per row of ``data``, a frame the shape of the
    checked frame; anything else (an array, another shape, NA) is left to
    pandera.
    """
    if isinstance(result, bool | np.bool_):
        return bool(result)
    if isinstance(result, pd.DataFrame):
        if not isinstance(data, pd.DataFrame) or result.shape != data.shape:
            return False
        return all(_all_true(result[column], data) for column in result.columns)
    if not isinstance(result, pd.Series) or (data is not None and len(result) != len(data)):
        return False
    values = result.array
    if isinstance(values, pd.arrays.BooleanArray):  # from nullable columns: no NA allowed
        return not values.isna().any() and bool(values.all())
    values = result.to_numpy()
    return values.dtype == np.bool_ and bool(values.all())


def schema_errors_to_input_error(err: SchemaErrors, path: str | os.PathLike[str]) -> InputError:
    """One InputError listing every failed check with its lines (index + 2) and values.

    The error's ``line`` and ``field`` are those of the earliest failing row
    (or of a missing column, or a frame-wide check, when no row is named).
    """
    failures = []  # (first line or None, field or None, text)
    for (context, column, check), group in err.failure_cases.groupby(
        ["schema_context", "column", "check"], dropna=False, sort=False
    ):
        field = str(column) if context == "Column" else None  # else the schema's name
        rows = group[group["index"].notna()]
        values = group["failure_case"].astype(str).tolist()
        if rows.empty:
            if check == "column_in_dataframe":
                field, text = values[0], "missing column"
            else:
                text = f"{check} failed"
            failures.append((None, field, text))
            continue
        lines = (rows["index"].astype("int64") + 2).tolist()
        pairs = zip(lines, rows["failure_case"].astype(str), strict=True)
        shown = ", ".join(f"{line} ({value})" for line, value in list(pairs)[:_MAX_ROWS_SHOWN])
        more = f" and {len(lines) - _MAX_ROWS_SHOWN} more" if len(lines) > _MAX_ROWS_SHOWN else ""
        failures.append((min(lines), field, f"{check} failed at line {shown}{more}"))
    failures.sort(key=lambda f: (f[0] is None, f[0] or 0))
    line, field, text = failures[0]
    if len(failures) > 1:
        text = "; ".join(f"{f}: {t}" if f else t for _, f, t in failures)
        text = text.removeprefix(f"{field}: ") if field else text
    return InputError(path, text, line=line, field=field)


def all_str(series: pd.Series) -> bool:
    """Every value a str (nulls and an empty column pass): one vectorised pass.

    For a ``pa.Check(all_str, name="str")`` on an ``object`` column, where
    pandera's ``str`` dtype would map every value (0.2 s per 100k values);
    pandera drops nulls before a check, and ``nullable`` rules them.
    """
    return pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty")


def empty_frame(schema: pa.DataFrameSchema) -> pd.DataFrame:
    """A frame with no rows and ``schema``'s columns and dtypes (it passes the schema)."""
    return pd.DataFrame({name: pd.Series(dtype=column.dtype.type)
                         for name, column in schema.columns.items()})
