"""Reading a user's CSV file for the CLI, with a clear :class:`InputError` for every bad input.

``bayes-rbfn fit DATA.csv --x COL [COL…] --y COL`` reads its data through :func:`read_xy_csv`. Each
check names the file, the column and the problem, so the CLI can print the message as it is and exit
without a traceback.

The file is read once, whole, into memory, so a pipe, a ``<(…)`` process substitution or a named pipe
(FIFO) is read as a file is; nothing is rewound or opened twice. Its encoding is decided for all of it:
UTF-16 when it starts with a UTF-16 byte-order mark; UTF-8 (with or without a byte-order mark) when every
byte of it is valid UTF-8; otherwise Windows-1252, the usual "Latin-1" of spreadsheet exports (Latin-1
itself where a byte has no Windows-1252 character). Other NUL bytes mean binary data, or UTF-16 without a
byte-order mark when every other byte is NUL: refused, with a message that says which.

Lines end with LF, CRLF or CR. Blank lines, and comment lines whose first non-blank character is ``#``
(as in NOAA's data files), are skipped wherever they are, except inside a quoted field; a ``#`` later in
a line is data, and so is a line starting with a spreadsheet's error cell (``#N/A``, ``#DIV/0!``). The
header is the first other line, however long. Its delimiter is comma, semicolon, tab or pipe: of those
that split the header into two or more fields, the one that splits the most of the first data rows into
as many fields, then the one giving the most fields. When the delimiter is not a comma, numbers may use a
decimal comma (``x;y`` / ``1,5;2,25``), but not mixed with decimal points in the same file.

pandas tokenises the rows (quotes, delimiter, missing-value markers). Comments and decimal commas are
handled here rather than by its ``comment=`` and ``decimal=``: ``comment="#"`` also cuts a line at a
``#`` in its middle (a label ``site#1`` would lose ``#1``), and ``decimal=`` cannot tell the reader that a
file mixes both marks. Numbers are Python's correctly rounded ``float`` of the text.
"""

from __future__ import annotations

import codecs
import contextlib
import csv
import difflib
import io
import itertools
import os
import re
import stat
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bayes_rbfn.io.datasets import Dataset

__all__ = ["InputError", "read_xy_csv"]

_DELIMITERS = (",", ";", "\t", "|")
#: More than this fraction of control characters (other than tab/CR/LF/FF) means the file is not text.
_MAX_CONTROL_FRACTION = 0.01
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f]")
_LINE_END = re.compile(r"\r\n|\r|\n")
_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)
#: Bytes inspected for UTF-16 without a byte-order mark, and the share of 2-byte units whose high byte
#: must be NUL (ASCII text: digits, delimiters, a header; a few non-ASCII letters may not be).
_UTF16_SNIFF_BYTES = 4096
_UTF16_NUL_SHARE = 0.9
#: Data lines that help choose the delimiter.
_DELIMITER_SAMPLE = 20
#: Bytes asked of a pipe or device per read.
_STREAM_CHUNK = 64 * 1024
#: Seconds a pipe or device may take to deliver its first bytes before ``on_wait`` is told of the wait.
_WAIT_GRACE_S = 0.2
_DECIMAL_COMMA = r"[+-]?(?:\d+,\d*|,\d+)(?:[eE][+-]?\d+)?"
_DECIMAL_POINT = r"[+-]?(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?"
_THOUSANDS = re.compile(r"[+-]?\d{1,3}([,.' \u00a0\u202f])\d{3}(?:\1\d{3})*(?:[.,]\d+)?")
#: What spreadsheets write in a cell they could not compute: a line starting with one is a data row
#: (its value missing or not a number), not a comment.
_SPREADSHEET_MARKERS = frozenset(
    {"#N/A", "#NA", "#N/A N/A", "#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#NUM!", "#NULL!"}
)


class InputError(ValueError):
    """Bad user input (file, columns, values or output folder); the message says what and where."""


def read_xy_csv(
    path: str | os.PathLike[str],
    x_cols: Sequence[str],
    y_col: str,
    group_col: str | None = None,
    strict: bool = False,
    min_rows: int = 3,
    on_wait: Callable[[str], None] | None = None,
    training: bool = True,
) -> Dataset:
    """Read inputs, a target and optionally a group label from a CSV file.

    Rows with a missing (empty, ``NA``, ``NaN``, …) or infinite value in a chosen column are dropped and
    counted in ``Dataset.dropped`` and ``Dataset.notes``; with ``strict=True`` they are an error instead.
    Comment lines among the rows are skipped and counted in ``Dataset.notes``. Messages about a row give
    its line in the file as well as its place among the data rows.
    Values that are present but not numbers (``"abc"``, ``"1.2.3"``) are always an error. A decimal
    comma (``"3,5"``) is read as 3.5 when the delimiter is not a comma and no number in the chosen
    columns has a decimal point; in a comma-separated file, or mixed with decimal points, it is an error
    (a comma between digits could then be a decimal mark or a thousands separator).

    Args:
        path: the CSV file, or a pipe, FIFO or device to read it from; its first line that is neither
            blank nor a ``#`` comment is the header naming the columns.
        x_cols: D ≥ 1 input column names.
        y_col: the target column name.
        group_col: optional column of group labels (strings or numbers), mapped to codes 0..G−1 in
            sorted order (numerically when every label is a number).
        strict: raise on rows with missing or non-finite values instead of dropping them.
        min_rows: fewest usable rows accepted.
        on_wait: called with a one-line message when ``path`` is a pipe or device that has delivered no
            data within 0.2 s of being opened (a FIFO with no writer blocks until one comes), so the
            caller can say what it is waiting for. Not called for regular files.
        training: the data a model is fitted to; False for held-out test data, where a constant target
            is accepted and constant input columns get no note.

    Returns:
        A :class:`~bayes_rbfn.io.datasets.Dataset` with ``X`` (N, D) and ``y`` (N,) float64, ``group`` (N,)
        and ``group_names`` when ``group_col`` is given, ``name`` the file's stem.

    Raises:
        InputError: missing or unreadable file, not a CSV text file, empty file, unknown or repeated
            column, non-numeric value, ambiguous decimal marks, missing values with ``strict``, fewer
            than ``min_rows`` rows, or a constant target (with ``training``).
    """
    path = Path(path).expanduser()
    x_cols = [x_cols] if isinstance(x_cols, str) else list(x_cols)
    _check_column_choice(path, x_cols, y_col, group_col)
    if min_rows < 1:
        raise ValueError(f"min_rows must be ≥ 1, got {min_rows}")

    table = _parse(path, _decode(path, _read_bytes(path, on_wait)))
    wanted = [*x_cols, y_col, *([group_col] if group_col else [])]
    _check_columns_exist(path, table, wanted)

    frame = _read_frame(path, table)
    n_read = len(frame)
    if n_read == 0:
        raise InputError(f"{path}: has a header but no data rows")
    # File line numbers of the rows, where every row is one record (pandas and the line scan agree).
    row_lines = table.row_lines if len(table.row_lines) == n_read else None
    X, y, labels, bad_per_col = _chosen_columns(path, table, frame, x_cols, y_col, group_col, row_lines)
    bad = np.logical_or.reduce(list(bad_per_col.values()))
    n_bad = int(bad.sum())
    notes = _drop_notes(path, table, bad_per_col, bad, n_read, row_lines, strict)
    keep = ~bad
    X, y = X[keep], y[keep]
    notes = _check_usable(path, X, y, x_cols, y_col, n_bad, min_rows, training, notes)
    return _csv_dataset(path, X, y, x_cols, y_col, group_col, labels, keep, n_bad, notes)


def _csv_dataset(
    path: Path,
    X: np.ndarray,
    y: np.ndarray,
    x_cols: list[str],
    y_col: str,
    group_col: str | None,
    labels: pd.Series | None,
    keep: np.ndarray,
    n_bad: int,
    notes: str,
) -> Dataset:
    """The :class:`Dataset` of the kept rows, with the group labels of the kept rows as codes."""
    group = group_names = None
    if labels is not None:
        group, group_names = _group_codes(labels.to_numpy()[keep])

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


def _chosen_columns(
    path: Path,
    table: _Table,
    frame: pd.DataFrame,
    x_cols: list[str],
    y_col: str,
    group_col: str | None,
    row_lines: list[int] | None,
) -> tuple[np.ndarray, np.ndarray, pd.Series | None, dict[str, np.ndarray]]:
    """(X, y, the group labels or None, each chosen column's rows with a missing or non-finite value)."""

    def column(name: str) -> pd.Series:
        return frame[table.header.index(name)].str.strip()

    def number_column(name: str) -> pd.Series:
        text = column(name)
        return text.where(~text.isin(_MISSING_MARKERS))  # "", NA, NaN, null, … → missing

    numeric = _numeric_columns(
        path, {col: number_column(col) for col in dict.fromkeys([*x_cols, y_col])}, table.delimiter, row_lines
    )
    X = np.column_stack([numeric[col] for col in x_cols])
    y = numeric[y_col]

    bad_per_col = {col: ~np.isfinite(values) for col, values in numeric.items()}
    labels = None
    if group_col is not None:
        labels = column(group_col)
        bad_per_col[group_col] = (labels.isna() | (labels == "")).to_numpy(dtype=bool)
    return X, y, labels, bad_per_col


def _drop_notes(
    path: Path,
    table: _Table,
    bad_per_col: dict[str, np.ndarray],
    bad: np.ndarray,
    n_read: int,
    row_lines: list[int] | None,
    strict: bool,
) -> str:
    """The notes on skipped comment lines and dropped rows; with ``strict`` a dropped row is an error."""
    n_bad = int(bad.sum())
    notes = ""
    if table.comment_lines:
        notes = (
            f"Skipped {len(table.comment_lines)} comment line(s) starting with '#' among the data rows "
            f"(the first on line {table.comment_lines[0]})."
        )
    if n_bad:
        by_col = ", ".join(f"{col!r}: {int(m.sum())}" for col, m in bad_per_col.items() if m.any())
        first = int(np.flatnonzero(bad)[0])
        what = (
            f"{n_bad} of {n_read} rows have a missing or non-finite value "
            f"(by column: {by_col}; first at data row {first + 1}"
            + (f", line {row_lines[first]} of the file)" if row_lines else ")")
        )
        if strict:
            raise InputError(
                f"{path}: {what}; in strict mode no rows are dropped, so fix or remove these rows"
            )
        notes += (" " if notes else "") + f"Dropped {what}."
    return notes


def _check_usable(
    path: Path,
    X: np.ndarray,
    y: np.ndarray,
    x_cols: list[str],
    y_col: str,
    n_bad: int,
    min_rows: int,
    training: bool,
    notes: str,
) -> str:
    """Check the kept rows are enough and the target not constant; ``notes`` plus one on constant inputs."""
    n = int(y.shape[0])
    if n < min_rows:
        raise InputError(
            f"{path}: only {n} usable row(s) after dropping {n_bad} with missing or non-finite values; "
            f"need at least {min_rows}"
        )
    if training and np.all(y == y[0]):
        raise InputError(
            f"{path}: the target column {y_col!r} is constant (every usable value is {y[0]:g}); "
            "there is nothing to fit"
        )
    constant_x = [col for j, col in enumerate(x_cols) if training and np.all(X[:, j] == X[0, j])]
    if constant_x:
        notes += (" " if notes else "") + (
            f"Input column(s) {', '.join(map(repr, constant_x))} are constant; their lengthscale is "
            "determined by the prior alone."
        )
    return notes


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


# --------------------------------------------------------------------------------------------------
# Bytes


def _read_bytes(path: Path, on_wait: Callable[[str], None] | None) -> bytes:
    """Every byte of the file, pipe or device at ``path``, read once."""
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
        mode = path.stat().st_mode
        if stat.S_ISSOCK(mode):
            raise InputError(f"{path}: is a socket, not a CSV file")
        if stat.S_ISREG(mode):
            with path.open("rb") as fh:
                data = fh.read()
        else:
            data = _read_stream(path, _wait_message(path, mode), on_wait)
    except PermissionError as err:
        raise InputError(f"{path}: cannot be read (permission denied)") from err
    except OSError as err:
        raise InputError(f"{path}: cannot be read ({err.strerror or err})") from err
    if not data:
        raise InputError(
            f"{path}: is empty (0 bytes" + (")" if stat.S_ISREG(mode) else "; nothing was written to it)")
        )
    return data


def _wait_message(path: Path, mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return f"waiting for data on the pipe {path} (nothing written to it yet; Ctrl-C to stop) ..."
    return (
        f"waiting for data on the device {path} (nothing read from it yet; on a terminal, end the input "
        "with Ctrl-D; Ctrl-C to stop) ..."
    )


def _read_stream(path: Path, message: str, on_wait: Callable[[str], None] | None) -> bytes:
    """All bytes of a pipe or device, read until its end (it cannot be rewound or opened again).

    Opening a FIFO blocks until a writer opens it, and reading blocks until data come, so with
    ``on_wait`` the reading runs in a thread and ``on_wait(message)`` is called if nothing has come
    within :data:`_WAIT_GRACE_S`: a ``<(cat data.csv)`` that delivers at once is read without a word.
    """
    chunks: list[bytes] = []
    failure: list[BaseException] = []
    started = threading.Event()

    def pull() -> None:
        try:
            with path.open("rb", buffering=0) as stream:
                while chunk := stream.read(_STREAM_CHUNK):
                    chunks.append(chunk)
                    started.set()
                    # /dev/zero or /dev/urandom would never end: stop at binary data (not UTF-16 text).
                    if b"\x00" in chunk and not b"".join(chunks[:2]).startswith(_UTF16_BOMS):
                        break
        except BaseException as err:  # handed to the caller's thread
            failure.append(err)
        finally:
            started.set()

    if on_wait is None:
        pull()
    else:
        # A daemon thread: after Ctrl-C, one still blocked in open() must not keep the process alive.
        reader = threading.Thread(target=pull, name=f"read {path}", daemon=True)
        reader.start()
        if not started.wait(_WAIT_GRACE_S):
            on_wait(message)
        reader.join()
    if failure:
        raise failure[0]
    return b"".join(chunks)


def _utf16_without_bom(data: bytes) -> str | None:
    """The byte order, ``"little-endian"`` or ``"big-endian"``, when ``data`` reads as UTF-16; else None.

    When the start of ``data`` reads as UTF-16 text of mostly ASCII characters without a byte-order mark
    (a NUL byte every other byte, the others hardly ever).
    """
    sample = data[: 2 * (min(len(data), _UTF16_SNIFF_BYTES) // 2)]
    pairs = len(sample) // 2
    if pairs < 2:
        return None
    low, high = sample[0::2], sample[1::2]  # the first and second byte of each 2-byte unit
    for order, zeros, text in (("little-endian", high, low), ("big-endian", low, high)):
        if zeros.count(0) >= _UTF16_NUL_SHARE * pairs and text.count(0) < (1 - _UTF16_NUL_SHARE) * pairs:
            return order
    return None


def _decode(path: Path, data: bytes) -> str:
    """The whole content as text, in the one encoding that holds for all of it (module docstring)."""
    if data.startswith(_UTF16_BOMS):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError as err:
            raise InputError(
                f"{path}: starts with a UTF-16 byte-order mark but is not UTF-16 text "
                f"({err.reason} at byte {err.start})"
            ) from err
    elif b"\x00" in data:
        order = _utf16_without_bom(data)
        if order:
            raise InputError(
                f"{path}: looks like UTF-16 ({order}) without a byte-order mark; save it as UTF-8"
            )
        raise InputError(f"{path}: is not a CSV text file (it contains binary data, e.g. NUL bytes)")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            if data.startswith(codecs.BOM_UTF8):
                at = err.start + len(codecs.BOM_UTF8)  # utf-8-sig counts from after the mark
                raise InputError(
                    f"{path}: starts with a UTF-8 byte-order mark but is not UTF-8 text "
                    f"(byte 0x{data[at]:02X} at byte {at}: {err.reason}); save it as UTF-8"
                ) from err
            try:
                text = data.decode("cp1252")
            except UnicodeDecodeError:
                text = data.decode("latin-1")
    if len(_CONTROL.findall(text)) > _MAX_CONTROL_FRACTION * len(text):
        raise InputError(f"{path}: is not a CSV text file (it contains binary data)")
    return text


# --------------------------------------------------------------------------------------------------
# Lines


@dataclass(frozen=True)
class _Table:
    """A CSV text with its blank and comment lines taken out, and where its lines were in the file."""

    delimiter: str
    #: Header fields, stripped.
    header: list[str]
    #: The header and data lines, "\n"-separated, for pandas.
    text: str
    #: File line number (1-based) of each line of ``text``.
    line_numbers: list[int]
    #: File line number on which each data row starts.
    row_lines: list[int]
    #: File line numbers of the comment lines after the header.
    comment_lines: list[int]
    #: The last comment line before the header (line number, text), which may be a header written
    #: with a '#' (numpy.savetxt does), or None.
    comment_before_header: tuple[int, str] | None


def _is_comment(line: str) -> bool:
    return line.lstrip().startswith("#")


def _parse(path: Path, text: str) -> _Table:
    """Find the header and delimiter, and drop blank and comment lines outside quoted fields."""
    lines = _LINE_END.split(text)
    if lines[-1] == "":
        lines.pop()
    start = next((i for i, line in enumerate(lines) if line.strip() and not _is_comment(line)), None)
    if start is None:
        only = "only blank and comment lines" if any(line.strip() for line in lines) else "only blank lines"
        raise InputError(f"{path}: is empty ({only})")
    header_line = lines[start]
    rows = (
        line for line in itertools.islice(lines, start + 1, None) if line.strip() and not _is_comment(line)
    )
    sample = list(itertools.islice(rows, _DELIMITER_SAMPLE))
    delimiter, fields = _choose_delimiter(path, start + 1, header_line, sample)
    header = [f.strip() for f in fields]
    if len(header) < 2:
        shown = header_line if len(header_line) <= 60 else header_line[:57] + "..."
        raise InputError(
            f"{path}: does not look like a CSV file: the first line {shown!r} is not a header of "
            "comma-, semicolon-, tab- or pipe-separated column names (at least two columns are needed)"
        )
    before = [i for i in range(start) if lines[i].strip()]
    comment_before_header = (before[-1] + 1, lines[before[-1]].strip()) if before else None

    kept, line_numbers, row_lines, comment_lines = [header_line], [start + 1], [], []
    quoted_from = 0  # the line on which a quoted field still open began, 0 when none is open
    for number, line in enumerate(lines[start + 1 :], start=start + 2):
        if not quoted_from:
            stripped = line.strip()
            if not stripped:
                continue
            first_field = stripped.split(delimiter, 1)[0].strip()
            if stripped.startswith("#") and first_field not in _SPREADSHEET_MARKERS:
                comment_lines.append(number)
                continue
            row_lines.append(number)
        kept.append(line)
        line_numbers.append(number)
        if quoted_from or '"' in line:
            still_open = _ends_inside_quotes(line, delimiter, bool(quoted_from))
            quoted_from = (quoted_from or number) if still_open else 0
    if quoted_from:
        raise InputError(
            f"{path}: is not a well-formed CSV file (the quoted field opened on line {quoted_from} "
            "is never closed)"
        )
    return _Table(
        delimiter, header, "\n".join(kept), line_numbers, row_lines, comment_lines, comment_before_header
    )


def _choose_delimiter(
    path: Path, line_number: int, header_line: str, sample: list[str]
) -> tuple[str, list[str]]:
    """The delimiter and the header's fields.

    Of the delimiters that split the header into two or more fields, the one that splits the most sample
    rows into as many fields as the header, then the one giving the most fields. The rows decide between
    ``x, m;y, m`` read as two columns (``;``) or three.
    """

    def split(line: str, delimiter: str) -> list[str] | None:
        if delimiter not in line:  # one field, whatever it holds
            return [line]
        try:  # csv.reader honours quoted fields
            with _field_size_limit(len(line)):
                return next(csv.reader([line], delimiter=delimiter, skipinitialspace=True), [])
        except csv.Error:
            return None

    best: tuple[int, int] | None = None
    chosen = (_DELIMITERS[0], [header_line])
    for delimiter in _DELIMITERS:
        fields = split(header_line, delimiter)
        if fields is None:
            raise InputError(f"{path}: is not a well-formed CSV file (the header on line {line_number})")
        if len(fields) < 2:
            continue
        fitting = sum(
            1 for row in sample if (row_fields := split(row, delimiter)) and len(row_fields) == len(fields)
        )
        if best is None or (fitting, len(fields)) > best:
            best, chosen = (fitting, len(fields)), (delimiter, fields)
    return chosen


@contextlib.contextmanager
def _field_size_limit(size: int) -> Iterator[None]:
    """Let the csv module read fields of up to ``size`` characters while the block runs.

    Its default limit (131,072 characters) is below a long line taken as one field: the header of a file
    with many columns split at a delimiter it does not use.
    """
    before = csv.field_size_limit()
    if size <= before:
        yield
        return
    csv.field_size_limit(size)
    try:
        yield
    finally:
        csv.field_size_limit(before)


def _ends_inside_quotes(line: str, delimiter: str, inside: bool) -> bool:
    """Whether a quoted field is still open at the end of ``line``, as pandas' tokenizer reads quotes.

    A field is quoted when ``"`` is its first character after spaces, and ``""`` in it is a quote.
    Steps field by field (``str.find``), not character by character.
    """
    i = 0
    while True:
        if inside:
            end = line.find('"', i)
            if end < 0:
                return True
            if line.startswith('"', end + 1):  # "" inside a quoted field
                i = end + 2
                continue
            inside = False
            i = end + 1
        else:
            while line.startswith(" ", i):
                i += 1
            if line.startswith('"', i):
                inside = True
                i += 1
                continue
        # The rest of an unquoted field, or what follows a closing quote, runs to the next delimiter.
        i = line.find(delimiter, i)
        if i < 0:
            return False
        i += 1


def _check_columns_exist(path: Path, table: _Table, wanted: list[str]) -> None:
    header = table.header
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
        if table.comment_before_header is not None:
            number, comment = table.comment_before_header
            fields = [f.strip() for f in comment.lstrip("#").split(table.delimiter)]
            if col in fields:
                hint += (
                    f" The comment line {number} names it; if that line is the header, remove its '#' "
                    "(a line starting with '#' is a comment)."
                )
        raise InputError(f"{path}: no column {col!r}.{hint} The columns are: {shown}")


#: The text pandas reads as a missing number (its default ``na_values``, and the empty field).
_MISSING_MARKERS = frozenset(
    {"", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN", "<NA>"}
    | {"N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"}
)


def _read_frame(path: Path, table: _Table) -> pd.DataFrame:
    """Every column as strings, exactly as written (no missing-value markers), named by position."""
    try:
        with warnings.catch_warnings():
            # Rows longer than the header: pandas would either take the first column as the index or
            # (index_col=False) cut the row with a ParserWarning; both misread the file, so refuse it.
            warnings.simplefilter("error", pd.errors.ParserWarning)
            # Columns are named by position, so a name pandas would rename (a repeated or empty one)
            # cannot select another column.
            frame = pd.read_csv(
                io.StringIO(table.text),
                sep=table.delimiter,
                header=0,
                names=list(range(len(table.header))),
                dtype=str,
                # Group labels are text: "NA" is Namibia, "None" a name. Only the number columns take
                # pandas' missing-value markers (_MISSING_MARKERS), below.
                keep_default_na=False,
                index_col=False,
                skipinitialspace=True,
                skip_blank_lines=True,
            )
    except pd.errors.ParserWarning as err:
        raise InputError(
            f"{path}: is not a well-formed CSV file (some rows have more fields than the header)"
        ) from err
    except pd.errors.ParserError as err:
        # pandas counts the lines it was given; say which line of the file it means.
        message = re.sub(
            r"\bline (\d+)",
            lambda m: f"line {table.line_numbers[min(int(m[1]), len(table.line_numbers)) - 1]}",
            " ".join(str(err).split()),
        )
        raise InputError(f"{path}: is not a well-formed CSV file ({message})") from err
    return frame


# --------------------------------------------------------------------------------------------------
# Values


def _numeric_columns(
    path: Path, texts: dict[str, pd.Series], delimiter: str, row_lines: list[int] | None
) -> dict[str, np.ndarray]:
    """The chosen columns as float64, NaN where missing; decimal commas read where the delimiter allows."""

    def where(row: int) -> str:
        return f"data row {row + 1} " + (
            f"(line {row_lines[row]} of the file)" if row_lines else "(the header not counted)"
        )

    def first(pattern: str) -> tuple[str, int, str] | None:
        for name, text in texts.items():
            hits = np.flatnonzero(text.str.fullmatch(pattern).fillna(False).to_numpy(dtype=bool))
            if hits.size:
                return name, int(hits[0]), text.iloc[hits[0]]
        return None

    decimal_comma = False
    if delimiter != "," and (comma := first(_DECIMAL_COMMA)) is not None:
        point = first(_DECIMAL_POINT)
        if point is not None:
            raise InputError(
                f"{path}: numbers with a decimal comma ({comma[2]!r} in column {comma[0]!r} at "
                f"{where(comma[1])}) and with a decimal point ({point[2]!r} in column {point[0]!r} at "
                f"{where(point[1])}) in one file; use one decimal mark throughout (separators between "
                "thousands are not supported)"
            )
        decimal_comma = True

    values = {}
    for name, text in texts.items():
        numbers = text
        if decimal_comma:
            is_comma = text.str.fullmatch(_DECIMAL_COMMA).fillna(False)
            numbers = text.mask(is_comma, text.str.replace(",", ".", regex=False))
        parsed = _to_float64(numbers)
        not_number = text.notna().to_numpy(dtype=bool) & (text != "").to_numpy(dtype=bool) & np.isnan(parsed)
        if not_number.any():
            rows = np.flatnonzero(not_number)
            example = text.iloc[rows[0]]
            raise InputError(
                f"{path}: column {name!r} has {len(rows)} non-numeric value(s), e.g. {example!r} at "
                f"{where(int(rows[0]))}{_number_hint(example)}"
            )
        values[name] = parsed
    return values


def _to_float64(text: pd.Series) -> np.ndarray:
    """The numbers in ``text`` as float64, NaN where missing or not a number (pandas' rules say which).

    pandas' own conversion can be one unit in the last place off ("+8.6398938515673895e-112"), so the
    values are Python's correctly rounded ``float`` of the text.
    """
    parsed = np.array(pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan))
    numbers = np.flatnonzero(~np.isnan(parsed))
    strings = text.to_numpy(dtype=object)[numbers]
    try:
        parsed[numbers] = np.array(strings, dtype=np.float64)  # float() of each string
    except ValueError:  # a form pandas reads and Python does not: keep pandas' value for it
        for i, value in zip(numbers, strings, strict=True):
            try:
                parsed[i] = float(value)
            except ValueError:
                pass
    return parsed


def _number_hint(value: str) -> str:
    if re.fullmatch(_DECIMAL_COMMA, value):
        return (
            " (a comma in a number is ambiguous in a comma-separated file: write "
            f"{value.replace(',', '.')} if it is a decimal comma, or separate the fields with ';')"
        )
    if _THOUSANDS.fullmatch(value):
        return " (separators between thousands are not supported: write the number without them)"
    return ""


def _group_codes(labels: np.ndarray) -> tuple[np.ndarray, tuple[str, ...]]:
    """Codes 0..G−1 for the labels, in sorted label order (numeric order when all labels are numbers)."""
    unique = sorted(set(labels.tolist()))
    as_numbers = pd.to_numeric(pd.Series(unique), errors="coerce")
    if len(unique) and as_numbers.notna().all():
        unique = [u for _, u in sorted(zip(as_numbers.tolist(), unique, strict=True))]
    index = {label: g for g, label in enumerate(unique)}
    return np.array([index[v] for v in labels], dtype=np.int64), tuple(unique)
