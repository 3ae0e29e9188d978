"""read_xy_csv on generated CSV files (hypothesis): delimiters , ; tab |, names with unicode, quotes and
spaces, finite values from 5e-324 to 1.8e308, missing and infinite cells, junk in other columns, the four
encodings, comment and blank lines, LF/CRLF/CR line ends, decimal commas; the same file reached through a
symbolic link (absolute, relative, a chain of two), moved into another folder, or made read-only.

The expected data set is computed from what was generated, not by reading the file: a valid file must
give exactly its finite rows (and count the others as dropped), or the InputError that its rows call
for (too few usable rows, a constant target). A damaged file must give an InputError with a one-line
message naming the file — never another exception — and whatever it does give must be finite float64.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from bayes_rbfn.io.reader import InputError, read_xy_csv

DELIMITERS = [",", ";", "\t", "|"]
ENCODINGS = ["utf-8", "utf-8-sig", "latin-1", "utf-16"]
NEWLINES = ["\n", "\r\n", "\r"]
#: Cells read as missing: a few of pandas' default missing-value markers.
MISSING = ["", "NA", "NaN", "nan", "n/a", "N/A", "null", "NULL", "#N/A"]
#: Cells read as infinite (dropped like missing ones).
INFINITE = ["inf", "-inf", "+inf", "Infinity", "-Infinity", "1e999", "-1e999"]
#: What spreadsheets write for a failed cell; at a line's start it makes a data row, not a comment.
MARKERS = {"#N/A", "#NA", "#N/A N/A", "#DIV/0!", "#VALUE!", "#REF!", "#NAME?", "#NUM!", "#NULL!"}
#: Cells that are no number in any decimal convention.
JUNK = ["abc", "1.2.3", "--1", "1e", "e5", "0x1A", "1_000", "½", "١٢٣", "TRUE", "+", "-", ".", "5%", "€5"]
JUNK += ["1 000", "?", "1,2,3", "1.2,3", "x1", "∞"]

SETTINGS = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def text_chars(encoding: str) -> st.SearchStrategy[str]:
    """Printable characters the encoding can write; no delimiter but the file's own (names with another
    delimiter's character are ambiguous, tested by example), no U+FEFF (a byte-order mark at the start)."""
    return st.characters(
        codec="latin-1" if encoding == "latin-1" else None,
        exclude_categories=("Cc", "Cs"),
        exclude_characters="\ufeff,;\t|",
    )


@dataclass
class Column:
    name: str  # as written (may have spaces around it)
    kind: str  # "x", "y", "group" or "extra"
    cells: list[str] = field(default_factory=list)  # as written, before quoting
    values: list[float | str | None] = field(default_factory=list)  # what the cell means; None: missing


@dataclass
class CsvFile:
    encoding: str
    delimiter: str
    decimal_comma: bool
    newline: str
    columns: list[Column]
    lines: list[str]  # rendered, without line ends
    header_line: int  # index into lines
    data_lines: list[int]  # indices into lines of the data rows
    trailing_newline: bool

    def column(self, kind: str) -> list[Column]:
        return [c for c in self.columns if c.kind == kind]

    def to_bytes(self) -> bytes:
        text = self.newline.join(self.lines) + (self.newline if self.trailing_newline else "")
        return text.encode(self.encoding)


def writable(cells: list[str], encoding: str) -> list[str]:
    """The cells the encoding can write (Latin-1 has no "½", "€" or Arabic digits)."""
    return [c for c in cells if c.encode(encoding, errors="ignore").decode(encoding) == c]


def quote(text: str, delimiter: str, force: bool) -> str:
    needed = any(ch in text for ch in (delimiter, '"', "\n", "\r")) or text.lstrip().startswith("#")
    if text.strip() == "#N/A" and not force:
        needed = False  # a spreadsheet marker at a line's start is data, not a comment: test that too
    return '"' + text.replace('"', '""') + '"' if needed or force else text


@st.composite
def number_cells(draw, decimal_comma: bool) -> tuple[str, float | None]:
    kind = draw(st.sampled_from(["float"] * 8 + ["int"] * 3 + ["missing", "infinite"]))
    if kind == "missing":
        return draw(st.sampled_from(MISSING)), None
    if kind == "infinite":
        return draw(st.sampled_from(INFINITE)), None
    if kind == "int":
        value = float(number := draw(st.integers(-1000, 1000)))
        text = str(number)
    else:
        value = draw(st.floats(allow_nan=False, allow_infinity=False))
        text = draw(st.sampled_from([repr(value), f"{value:.17g}", f"{value:.16e}"]))
    if not text.startswith("-") and draw(st.booleans()):
        text = "+" + text
    if decimal_comma:
        text = text.replace(".", ",")
    pad = draw(st.sampled_from(["", " ", "  "]))
    return pad + text + draw(st.sampled_from(["", " "])), value


@st.composite
def csv_files(draw) -> CsvFile:
    encoding = draw(st.sampled_from(ENCODINGS))
    delimiter = draw(st.sampled_from(DELIMITERS))
    decimal_comma = delimiter != "," and draw(st.booleans())
    newline = draw(st.sampled_from(NEWLINES))
    chars = text_chars(encoding)
    own = st.sampled_from([delimiter, '"', " ", "#"])
    name_text = st.lists(st.one_of(chars, own), min_size=1, max_size=8).map("".join)

    n_x = draw(st.integers(1, 2))
    kinds = (
        ["x"] * n_x + ["y"] + (["group"] if draw(st.booleans()) else []) + ["extra"] * draw(st.integers(0, 2))
    )
    names = draw(
        st.lists(
            name_text.filter(lambda n: n.strip()),
            min_size=len(kinds),
            max_size=len(kinds),
            unique_by=str.strip,
        )
    )
    columns = [Column(name, kind) for name, kind in zip(names, kinds, strict=True)]
    for column in columns:
        if column.kind == "extra" and draw(st.booleans()):
            column.name = ""  # an unnamed column, never chosen
    columns = draw(st.permutations(columns))

    n_rows = draw(st.integers(3, 10))
    label_text = st.lists(st.one_of(chars, own), max_size=4).map(lambda t: "g" + "".join(t))
    junk_text = st.one_of(
        st.sampled_from(writable(MISSING + INFINITE + JUNK, encoding)),
        st.text(st.one_of(chars, own, st.just("\n"))),
    )
    for column in columns:
        for _ in range(n_rows):
            if column.kind in ("x", "y"):
                cell, value = draw(number_cells(decimal_comma))
            elif column.kind == "group":
                cell = draw(st.sampled_from([None] * 5 + [""])) or draw(label_text)
                value = cell.strip() or None
            else:
                cell, value = draw(junk_text), None
            column.cells.append(cell)
            column.values.append(value)

    def render(cells: list[str]) -> str:
        return delimiter.join(quote(c, delimiter, draw(st.booleans())) for c in cells)

    comment = (
        st.tuples(st.sampled_from(["", " "]), st.text(chars, max_size=12))
        .map(lambda t: t[0] + "#" + t[1])
        .filter(lambda c: c.strip() not in MARKERS)
    )
    blank = st.sampled_from(["", " ", "  "])
    filler = st.lists(st.one_of(comment, blank), max_size=3)

    lines = draw(filler)
    header_line = len(lines)
    lines.append(render([c.name for c in columns]))
    data_lines = []
    for row in range(n_rows):
        lines += draw(st.lists(st.one_of(comment, blank), max_size=1))
        data_lines.append(len(lines))
        lines.append(render([c.cells[row] for c in columns]))
    lines += draw(filler)
    return CsvFile(
        encoding,
        delimiter,
        decimal_comma,
        newline,
        columns,
        lines,
        header_line,
        data_lines,
        trailing_newline=draw(st.booleans()),
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("generated")


_counter = itertools.count()


def write(folder: Path, data: bytes) -> Path:
    path = folder / f"gen{next(_counter)}.csv"
    path.write_bytes(data)
    return path


def written_as_intended(spec: CsvFile, data: bytes) -> bool:
    """False when Latin-1 bytes happen to be valid UTF-8: the reader then rightly reads UTF-8."""
    if spec.encoding != "latin-1" or data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def read(spec: CsvFile, path: Path, group_col: str | None = None):
    x_cols = [c.name.strip() for c in spec.column("x")]
    y_col = spec.column("y")[0].name.strip()
    groups = spec.column("group")
    if group_col is None and groups:
        group_col = groups[0].name.strip()
    return read_xy_csv(path, x_cols, y_col, group_col=group_col)


def check_output(path: Path, call) -> object:
    """The call's Dataset (finite float64, consistent shapes), or its InputError (one line, naming the
    file); any other exception fails."""
    try:
        ds = call()
    except InputError as err:
        message = str(err)
        assert "\n" not in message and "\r" not in message, message
        assert message.startswith(str(path)), message
        return err
    assert ds.X.dtype == ds.y.dtype == np.float64
    assert ds.X.ndim == 2 and ds.X.shape[0] == ds.y.shape[0] >= 3
    assert np.isfinite(ds.X).all() and np.isfinite(ds.y).all()
    assert ds.dropped >= 0
    if ds.group is not None:
        assert ds.group.shape == ds.y.shape and set(ds.group.tolist()) <= set(range(len(ds.group_names)))
    return ds


def outcome_kind(outcome) -> str:
    """A short name for what the reader did, for hypothesis' statistics (--hypothesis-show-statistics)."""
    if not isinstance(outcome, InputError):
        return "read"
    message = str(outcome)
    for phrase in ["usable row", "is constant", "no data rows", "non-numeric", "well-formed", "never closed"]:
        if phrase in message:
            return phrase
    return " ".join(message.split(": ", 1)[1].split()[:3]) + " …"


# --------------------------------------------------------------------------------------------------
# Valid files: exactly the rows written


@SETTINGS
@given(spec=csv_files())
def test_valid_file_gives_the_rows_written(folder, spec):
    data = spec.to_bytes()
    assume(written_as_intended(spec, data))
    path = write(folder, data)
    outcome = check_output(path, lambda: read(spec, path))

    # The model: blank rows (a tab file's row of empty cells) are no rows; a row with a missing or
    # infinite number, or an empty group label, is dropped.
    rows = [r for r, i in enumerate(spec.data_lines) if spec.lines[i].strip()]
    event("valid file: " + outcome_kind(outcome))
    if not rows:
        assert isinstance(outcome, InputError) and "no data rows" in str(outcome), outcome
        return
    chosen = [*spec.column("x"), *spec.column("y"), *spec.column("group")]
    kept = [r for r in rows if all(c.values[r] is not None for c in chosen)]
    y = np.array([spec.column("y")[0].values[r] for r in kept], dtype=np.float64)
    if len(kept) < 3:
        assert isinstance(outcome, InputError) and "usable row(s)" in str(outcome), outcome
        return
    if np.all(y == y[0]):
        assert isinstance(outcome, InputError) and "is constant" in str(outcome), outcome
        return
    assert not isinstance(outcome, InputError), f"{outcome}\n{data!r}"
    ds = outcome
    X = np.array([[c.values[r] for c in spec.column("x")] for r in kept], dtype=np.float64)
    np.testing.assert_array_equal(ds.X, X)
    np.testing.assert_array_equal(ds.y, y)
    assert ds.dropped == len(rows) - len(kept)
    assert ds.x_names == tuple(c.name.strip() for c in spec.column("x"))
    if spec.column("group"):
        labels = [spec.column("group")[0].values[r] for r in kept]
        assert ds.group_names == tuple(sorted(set(labels)))
        assert [ds.group_names[g] for g in ds.group] == labels


# --------------------------------------------------------------------------------------------------
# Damaged files: a clear InputError


DAMAGE = ["bytes", "bytes", "junk-number", "extra-field", "unclosed-quote", "repeated-name", "unknown-column"]


@SETTINGS
@given(spec=csv_files(), damage=st.sampled_from(DAMAGE), data=st.data())
def test_damaged_file_gives_a_clear_input_error(folder, spec, damage, data):
    group_col = None
    expect: str | None = None  # a phrase the error must contain; None: any InputError, or a clean read
    if damage == "junk-number":
        column = data.draw(st.sampled_from([*spec.column("x"), *spec.column("y")]))
        row = data.draw(st.integers(0, len(spec.data_lines) - 1))
        column.cells[row] = data.draw(st.sampled_from(writable(JUNK, spec.encoding)))
        spec.lines[spec.data_lines[row]] = spec.delimiter.join(
            quote(c.cells[row], spec.delimiter, force=False) for c in spec.columns
        )
        expect = f"column {column.name.strip()!r} has 1 non-numeric value(s), e.g. {column.cells[row]!r}"
    elif damage == "extra-field":
        row = data.draw(st.sampled_from(spec.data_lines))
        spec.lines[row] += spec.delimiter + "9"
        expect = "is not a well-formed CSV file"
    elif damage == "unclosed-quote":
        spec.lines.append('"never closed' + spec.delimiter + "1")
        expect = "is never closed"
    elif damage == "repeated-name":
        twin = data.draw(st.sampled_from([*spec.column("x"), *spec.column("y")]))
        spec.columns.append(Column(" " + twin.name, "extra"))
        spec.lines[spec.header_line] += spec.delimiter + quote(" " + twin.name, spec.delimiter, force=True)
        expect = f"column {twin.name.strip()!r} appears 2 times"
    elif damage == "unknown-column":
        group_col = "no such column ∅"
        expect = "no column 'no such column ∅'"
    raw = spec.to_bytes()
    if damage == "bytes":
        raw = bytearray(raw)
        for _ in range(data.draw(st.integers(1, 4))):
            where = data.draw(st.integers(0, len(raw)))
            how = data.draw(st.sampled_from(["replace", "insert", "truncate"]))
            junk = data.draw(
                st.one_of(
                    st.sampled_from(
                        [b'"', b"\n", b"\r", b",", b";", b"\t", b"|", b"#", b"\xe9", b"\xff\xfe"]
                    ),
                    st.binary(min_size=1, max_size=3),
                )
            )
            if how == "replace":
                raw[where : where + len(junk)] = junk
            elif how == "insert":
                raw[where:where] = junk
            else:
                del raw[where:]
        raw = bytes(raw)
    else:
        assume(written_as_intended(spec, raw))
    path = write(folder, raw)
    outcome = check_output(path, lambda: read(spec, path, group_col))
    event(f"{damage}: " + outcome_kind(outcome))
    if expect is not None:
        assert isinstance(outcome, InputError), f"expected an error with {expect!r}; file {raw!r}"
        assert expect in str(outcome), f"{outcome}"


# --------------------------------------------------------------------------------------------------
# The same file by another path: links, a move, read-only


def reach(path: Path, how: str) -> Path:
    """Another path to the file at ``path``: a link to it (absolute, relative, a chain of two), the file
    itself moved to another folder, or the file made read-only."""
    if how == "link":
        other = path.with_name(f"link to {path.name}")
        other.symlink_to(path)
    elif how == "relative-link":
        (path.parent / f"sub-{path.stem}").mkdir()
        other = path.parent / f"sub-{path.stem}" / "data.csv"
        other.symlink_to(Path("..") / path.name)
    elif how == "link-to-link":
        first = path.with_name(f"first-{path.name}")
        first.symlink_to(path.name)
        other = path.with_name(f"second-{path.name}")
        other.symlink_to(first.name)
    elif how == "moved":
        (path.parent / f"moved ∂ {path.stem}").mkdir()
        other = path.rename(path.parent / f"moved ∂ {path.stem}" / path.name)
    else:
        path.chmod(0o444)
        other = path
    return other


@settings(
    max_examples=10,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(spec=csv_files(), how=st.sampled_from(["link", "relative-link", "link-to-link", "moved", "read-only"]))
def test_the_same_file_by_another_path_reads_the_same(folder, spec, how):
    data = spec.to_bytes()
    assume(written_as_intended(spec, data))
    path = write(folder, data)
    expected = check_output(path, lambda: read(spec, path))
    other = reach(path, how)
    outcome = check_output(other, lambda: read(spec, other))
    event(f"{how}: " + outcome_kind(outcome))
    if isinstance(expected, InputError):
        assert isinstance(outcome, InputError), outcome
        assert str(outcome).replace(str(other), str(path), 1) == str(expected)
        return
    assert not isinstance(outcome, InputError), outcome
    np.testing.assert_array_equal(outcome.X, expected.X)
    np.testing.assert_array_equal(outcome.y, expected.y)
    assert (outcome.dropped, outcome.x_names, outcome.group_names) == (
        expected.dropped,
        expected.x_names,
        expected.group_names,
    )
