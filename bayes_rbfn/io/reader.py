"""Reading a user's CSV file for the CLI, with a clear :class:`InputError` for every bad input.

``bayes-rbfn fit DATA.csv --x COL [COL…] --y COL`` reads its data through :func:`read_xy_csv`. Each
check names the file, the column and the problem, so the CLI can print the message as it is and exit
without a traceback.

The file may be comma-, semicolon-, tab- or pipe-separated (the delimiter is taken from the header line),
UTF-8 (with or without a byte-order mark), UTF-16 with a byte-order mark, or Latin-1.
"""

from __future__ import annotations

import codecs
import csv
import difflib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_rbfn.io.datasets import Dataset

__all__ = ["InputError", "read_xy_csv"]

#: Bytes read to recognise the encoding, binary content and the header line.
_SNIFF_BYTES = 64 * 1024
_DELIMITERS = (",", ";", "\t", "|")
#: More than this fraction of control characters (other than tab/CR/LF/FF) means the file is not text.
_MAX_CONTROL_FRACTION = 0.01


class InputError(ValueError):
    """Bad user input (file, columns, values or output folder); the message says what and where."""


def read_xy_csv(
    path: str | os.PathLike[str],
    x_cols: Sequence[str],
    y_col: str,
    group_col: str | None = None,
    strict: bool = False,
    min_rows: int = 3,
) -> Dataset:
    """Read inputs, a target and optionally a group label from a CSV file.

    Rows with a missing (empty, ``NA``, ``NaN``, …) or infinite value in a chosen column are dropped and
    counted in ``Dataset.dropped`` and ``Dataset.notes``; with ``strict=True`` they are an error instead.
    Values that are present but not numbers (``"abc"``, ``"3,5"``) are always an error.

    Args:
        path: the CSV file; its first non-blank line is the header naming the columns.
        x_cols: D ≥ 1 input column names.
        y_col: the target column name.
        group_col: optional column of group labels (strings or numbers), mapped to codes 0..G−1 in
            sorted order (numerically when every label is a number).
        strict: raise on rows with missing or non-finite values instead of dropping them.
        min_rows: fewest usable rows accepted.

    Returns:
        A :class:`~bayes_rbfn.io.datasets.Dataset` with ``X`` (N, D) and ``y`` (N,) float64, ``group`` (N,)
        and ``group_names`` when ``group_col`` is given, ``name`` the file's stem.

    Raises:
        InputError: missing or unreadable file, not a CSV text file, empty file, unknown or repeated
            column, non-numeric value, missing values with ``strict``, fewer than ``min_rows`` rows, or
            a constant target.
    """
    path = Path(path).expanduser()
    x_cols = [x_cols] if isinstance(x_cols, str) else list(x_cols)
    _check_column_choice(path, x_cols, y_col, group_col)
    if min_rows < 1:
        raise ValueError(f"min_rows must be ≥ 1, got {min_rows}")

    encoding, delimiter, header = _sniff(path)
    _check_columns_exist(path, header, [*x_cols, y_col, *([group_col] if group_col else [])])

    frame = _read_frame(path, encoding, delimiter, [*x_cols, y_col, *([group_col] if group_col else [])])
    n_read = len(frame)
    if n_read == 0:
        raise InputError(f"{path}: has a header but no data rows")

    numeric = {col: _to_numeric(path, frame[col], col) for col in dict.fromkeys([*x_cols, y_col])}
    X = np.column_stack([numeric[col] for col in x_cols])
    y = numeric[y_col]

    bad_per_col = {col: ~np.isfinite(values) for col, values in numeric.items()}
    if group_col is not None:
        labels = frame[group_col].str.strip()
        bad_per_col[group_col] = (labels.isna() | (labels == "")).to_numpy()
    bad = np.logical_or.reduce(list(bad_per_col.values()))
    n_bad = int(bad.sum())
    notes = ""
    if n_bad:
        by_col = ", ".join(f"{col!r}: {int(m.sum())}" for col, m in bad_per_col.items() if m.any())
        first = int(np.flatnonzero(bad)[0]) + 1
        what = (
            f"{n_bad} of {n_read} rows have a missing or non-finite value "
            f"(by column: {by_col}; first at data row {first})"
        )
        if strict:
            raise InputError(
                f"{path}: {what}; in strict mode no rows are dropped, so fix or remove these rows"
            )
        notes = f"Dropped {what}."

    keep = ~bad
    X, y = X[keep], y[keep]
    n = int(y.shape[0])
    if n < min_rows:
        raise InputError(
            f"{path}: only {n} usable row(s) after dropping {n_bad} with missing or non-finite values; "
            f"need at least {min_rows}"
        )
    if np.all(y == y[0]):
        raise InputError(
            f"{path}: the target column {y_col!r} is constant (every usable value is {y[0]:g}); "
            "there is nothing to fit"
        )
    constant_x = [col for j, col in enumerate(x_cols) if np.all(X[:, j] == X[0, j])]
    if constant_x:
        notes += (" " if notes else "") + (
            f"Input column(s) {', '.join(map(repr, constant_x))} are constant; their lengthscale is "
            "determined by the prior alone."
        )

    group = group_names = None
    if group_col is not None:
        group, group_names = _group_codes(frame[group_col].str.strip().to_numpy()[keep])

    return Dataset(
        name=path.stem,
        X=X,
        y=y,
        x_names=tuple(x_cols),
        y_name=y_col,
        description=f"{path.name}: {y_col} against {', '.join(x_cols)}"
        + (f", grouped by {group_col}" if group_col else ""),
        group=group,
        group_names=group_names,
        dropped=n_bad,
        notes=notes,
    )


def _check_column_choice(path: Path, x_cols: list[str], y_col: str, group_col: str | None) -> None:
    if not x_cols:
        raise InputError(f"{path}: give at least one input column (--x)")
    repeated = sorted({c for c in x_cols if x_cols.count(c) > 1})
    if repeated:
        raise InputError(
            f"{path}: input column(s) {', '.join(map(repr, repeated))} given more than once (--x)"
        )
    if y_col in x_cols:
        raise InputError(f"{path}: column {y_col!r} is both an input (--x) and the target (--y)")
    if group_col is not None and group_col in (*x_cols, y_col):
        raise InputError(f"{path}: the group column {group_col!r} is also an input or the target")


def _sniff(path: Path) -> tuple[str, str, list[str]]:
    """Encoding, delimiter and header fields of a CSV file, or an InputError saying why it is not one."""
    if not path.exists():
        hint = ""
        if path.parent.is_dir():
            close = difflib.get_close_matches(
                path.name, [p.name for p in path.parent.iterdir()], n=3, cutoff=0.8
            )
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InputError(f"{path}: file not found{hint}")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a CSV file")
    try:
        with path.open("rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except PermissionError as err:
        raise InputError(f"{path}: cannot be read (permission denied)") from err
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror or err})") from err
    if not head:
        raise InputError(f"{path}: is empty (0 bytes)")

    text, encoding = _decode_head(path, head)
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise InputError(f"{path}: is empty (only blank lines)")
    header_line = lines[0]
    # The delimiter that splits the header into the most fields; csv.reader honours quoted fields.
    fields_by_delim = {
        d: next(csv.reader([header_line], delimiter=d, skipinitialspace=True)) for d in _DELIMITERS
    }
    delimiter = max(_DELIMITERS, key=lambda d: len(fields_by_delim[d]))
    header = [f.strip() for f in fields_by_delim[delimiter]]
    if len(header) < 2:
        shown = header_line if len(header_line) <= 60 else header_line[:57] + "..."
        raise InputError(
            f"{path}: does not look like a CSV file: the first line {shown!r} is not a header of "
            "comma-, semicolon- or tab-separated column names (at least two columns are needed)"
        )
    return encoding, delimiter, header


def _decode_head(path: Path, head: bytes) -> tuple[str, str]:
    """The first bytes decoded, and the encoding to read the whole file with."""
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return head.decode("utf-16", errors="replace"), "utf-16"
    if b"\x00" in head:
        raise InputError(f"{path}: is not a CSV text file (it contains binary data, e.g. NUL bytes)")
    try:
        # An incremental decoder, so a multi-byte character cut at the end of the sample is no error.
        return codecs.getincrementaldecoder("utf-8-sig")().decode(head, final=False), "utf-8-sig"
    except UnicodeDecodeError:
        text = head.decode("latin-1")
    control = sum(1 for ch in text if (ord(ch) < 32 and ch not in "\t\r\n\f") or 0x7F <= ord(ch) < 0xA0)
    if control > _MAX_CONTROL_FRACTION * len(text):
        raise InputError(f"{path}: is not a CSV text file (it contains binary data)")
    return text, "latin-1"


def _check_columns_exist(path: Path, header: list[str], wanted: list[str]) -> None:
    for col in wanted:
        count = header.count(col)
        if count == 1:
            continue
        if count > 1:
            raise InputError(f"{path}: column {col!r} appears {count} times in the header; rename the copies")
        shown = ", ".join(repr(h) for h in header[:30]) + (
            f", … ({len(header)} in all)" if len(header) > 30 else ""
        )
        close = difflib.get_close_matches(col, header, n=3, cutoff=0.6)
        close += [h for h in header if h.lower() == col.lower() and h not in close]
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise InputError(f"{path}: no column {col!r}.{hint} The columns are: {shown}")


def _read_frame(path: Path, encoding: str, delimiter: str, usecols: list[str]) -> pd.DataFrame:
    """The chosen columns as strings (missing markers such as "", NA, NaN become NaN)."""
    try:
        with warnings.catch_warnings():
            # Rows longer than the header: pandas would either take the first column as the index or
            # (index_col=False) cut the row with a ParserWarning; both misread the file, so refuse it.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(
                path,
                sep=delimiter,
                encoding=encoding,
                dtype=str,
                index_col=False,
                skipinitialspace=True,
                skip_blank_lines=True,
            )
    except pd.errors.ParserWarning as err:
        raise InputError(
            f"{path}: is not a well-formed CSV file (some rows have more fields than the header)"
        ) from err
    except pd.errors.EmptyDataError as err:
        raise InputError(f"{path}: is empty") from err
    except pd.errors.ParserError as err:
        raise InputError(f"{path}: is not a well-formed CSV file ({str(err).strip()})") from err
    except UnicodeDecodeError as err:
        raise InputError(
            f"{path}: is not a text file in {encoding} ({err.reason} at byte {err.start})"
        ) from err
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror or err})") from err
    frame.columns = [str(c).strip() for c in frame.columns]
    return frame[usecols]


def _to_numeric(path: Path, column: pd.Series, name: str) -> np.ndarray:
    """Column as float64, NaN where missing; a value that is present but not a number is an error."""
    text = column.str.strip()
    values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    not_number = text.notna().to_numpy() & (text != "").to_numpy() & np.isnan(values)
    if not_number.any():
        rows = np.flatnonzero(not_number)
        example = text.iloc[rows[0]]
        hint = ""
        if isinstance(example, str) and example.replace(",", "", 1).lstrip("+-").isdigit() and "," in example:
            hint = " (decimal commas are not supported: use a point, e.g. 3.5)"
        raise InputError(
            f"{path}: column {name!r} has {len(rows)} non-numeric value(s), e.g. {example!r} at data row "
            f"{rows[0] + 1} (the header not counted){hint}"
        )
    return values


def _group_codes(labels: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes 0..G−1 for the labels, in sorted label order (numeric order when all labels are numbers)."""
    unique = sorted(set(labels.tolist()))
    as_numbers = pd.to_numeric(pd.Series(unique), errors="coerce")
    if len(unique) and as_numbers.notna().all():
        unique = [u for _, u in sorted(zip(as_numbers.tolist(), unique, strict=True))]
    index = {label: g for g, label in enumerate(unique)}
    return np.array([index[v] for v in labels], dtype=np.int64), tuple(unique)
