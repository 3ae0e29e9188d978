"""read_xy_csv: every bad input gives an InputError naming the file, the column and the problem."""

import os
import pathlib

import numpy as np
import pytest

from bayes_rbfn.io.reader import InputError, read_xy_csv

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x06\x00\x00\x00"


def write(tmp_path, text: str | bytes, name: str = "data.csv"):
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


GOOD = "t,temp,site,y\n0,1.5,a,0.1\n1,2.5,b,0.4\n2,3.5,a,0.2\n3,4.5,c,0.9\n"


# --------------------------------------------------------------------------------------------------
# Good files


def test_reads_columns_in_order(tmp_path):
    ds = read_xy_csv(write(tmp_path, GOOD), x_cols=["temp", "t"], y_col="y")
    np.testing.assert_array_equal(ds.X, [[1.5, 0], [2.5, 1], [3.5, 2], [4.5, 3]])
    np.testing.assert_array_equal(ds.y, [0.1, 0.4, 0.2, 0.9])
    assert ds.X.dtype == np.float64 and ds.x_names == ("temp", "t") and ds.y_name == "y"
    assert ds.name == "data" and ds.dropped == 0 and ds.notes == "" and ds.group is None


def test_string_group_column_mapped_to_sorted_codes(tmp_path):
    ds = read_xy_csv(write(tmp_path, GOOD), x_cols=["t"], y_col="y", group_col="site")
    assert ds.group_names == ("a", "b", "c")
    np.testing.assert_array_equal(ds.group, [0, 1, 0, 2])


def test_numeric_group_labels_sorted_numerically(tmp_path):
    path = write(tmp_path, "x,g,y\n0,10,1\n1,2,2\n2,10,3\n3,1,5\n")
    ds = read_xy_csv(path, x_cols=["x"], y_col="y", group_col="g")
    assert ds.group_names == ("1", "2", "10")
    np.testing.assert_array_equal(ds.group, [2, 1, 2, 0])


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("x;y\n1;2\n2;3\n3;5\n", "utf-8"),
        ("x\ty\n1\t2\n2\t3\n3\t5\n", "utf-8"),
        ("\ufeffx,y\n1,2\n2,3\n3,5\n", "utf-8"),
        ("x,y\n1,2\n2,3\n3,5\n", "utf-16"),
        ("Größe,y\n1,2\n2,3\n3,5\n", "latin-1"),
        ('"x", "y"\n1, 2\n\n2, 3\n3, 5\n', "utf-8"),
    ],
    ids=["semicolon", "tab", "utf8-bom", "utf16", "latin1", "quoted-spaces-blank-line"],
)
def test_dialects_and_encodings(tmp_path, text, encoding):
    path = write(tmp_path, text.encode(encoding))
    x_name = "Größe" if "Größe" in text else "x"
    ds = read_xy_csv(path, x_cols=[x_name], y_col="y")
    np.testing.assert_array_equal(ds.y, [2, 3, 5])
    np.testing.assert_array_equal(ds.X[:, 0], [1, 2, 3])


# --------------------------------------------------------------------------------------------------
# Bad files


def test_missing_file(tmp_path):
    write(tmp_path, GOOD, "data.csv")
    with pytest.raises(InputError, match=r"dta\.csv: file not found \(did you mean data\.csv\?\)"):
        read_xy_csv(tmp_path / "dta.csv", ["t"], "y")


def test_directory(tmp_path):
    with pytest.raises(InputError, match=r"is a directory"):
        read_xy_csv(tmp_path, ["t"], "y")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file_by_mode(tmp_path):
    path = write(tmp_path, GOOD)
    path.chmod(0)
    try:
        with pytest.raises(InputError, match=r"data\.csv: cannot be read \(permission denied\)"):
            read_xy_csv(path, ["t"], "y")
    finally:
        path.chmod(0o644)


def test_unreadable_file(tmp_path, monkeypatch):
    """Permission denied, simulated (the test suite may run as root, who may read anything)."""
    path = write(tmp_path, GOOD)
    real_open = pathlib.Path.open

    def denied(self, *args, **kwargs):
        if self == path:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", denied)
    with pytest.raises(InputError, match=r"data\.csv: cannot be read \(permission denied\)"):
        read_xy_csv(path, ["t"], "y")


@pytest.mark.parametrize(
    "content",
    [PNG_SIGNATURE + bytes(range(256)) * 4, np.random.default_rng(0).bytes(4096)],
    ids=["png", "random-bytes"],
)
def test_binary_file(tmp_path, content):
    with pytest.raises(InputError, match=r"data\.csv: is not a CSV text file"):
        read_xy_csv(write(tmp_path, content), ["t"], "y")


def test_random_bytes_without_nul_or_utf8(tmp_path):
    rng = np.random.default_rng(1)
    content = bytes(b for b in rng.bytes(8192) if b)  # no NUL byte: caught by the control-character rule
    with pytest.raises(InputError, match=r"not a CSV text file"):
        read_xy_csv(write(tmp_path, content), ["t"], "y")


def test_text_without_delimited_header(tmp_path):
    path = write(tmp_path, "Dear reader\nthis is a letter\nnot a table\n", "letter.txt")
    with pytest.raises(InputError, match=r"letter\.txt: does not look like a CSV file.*'Dear reader'"):
        read_xy_csv(path, ["t"], "y")


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", r"is empty \(0 bytes\)"),
        (b"\n\n  \n", r"is empty"),
        (b"t,y\n", r"has a header but no data rows"),
    ],
    ids=["zero-bytes", "blank-lines", "header-only"],
)
def test_empty_file(tmp_path, content, match):
    with pytest.raises(InputError, match=match):
        read_xy_csv(write(tmp_path, content), ["t"], "y")


def test_unknown_column_lists_columns(tmp_path):
    with pytest.raises(InputError, match=r"no column 'Temp'\. Did you mean 'temp'.*'t', 'temp', 'site', 'y'"):
        read_xy_csv(write(tmp_path, GOOD), ["Temp"], "y")
    with pytest.raises(InputError, match=r"no column 'target'.*The columns are: 't', 'temp', 'site', 'y'"):
        read_xy_csv(write(tmp_path, GOOD), ["t"], "target")
    with pytest.raises(InputError, match=r"no column 'region'"):
        read_xy_csv(write(tmp_path, GOOD), ["t"], "y", group_col="region")


def test_duplicate_header_column(tmp_path):
    with pytest.raises(InputError, match=r"column 'x' appears 2 times"):
        read_xy_csv(write(tmp_path, "x,x,y\n1,2,3\n2,3,4\n3,4,6\n"), ["x"], "y")


@pytest.mark.parametrize(
    ("x_cols", "y_col", "group_col", "match"),
    [
        ([], "y", None, r"at least one input column"),
        (["t", "t"], "y", None, r"'t' given more than once"),
        (["t", "y"], "y", None, r"'y' is both an input"),
        (["t"], "y", "t", r"group column 't' is also"),
    ],
    ids=["no-x", "repeated-x", "y-in-x", "group-is-x"],
)
def test_bad_column_choice(tmp_path, x_cols, y_col, group_col, match):
    with pytest.raises(InputError, match=match):
        read_xy_csv(write(tmp_path, GOOD), x_cols, y_col, group_col=group_col)


def test_non_numeric_value_names_column_value_and_row(tmp_path):
    path = write(tmp_path, "x,y\n1,2\n2,3\n3,oops\n4,5\n5,n/a?\n")
    with pytest.raises(
        InputError, match=r"column 'y' has 2 non-numeric value\(s\), e\.g\. 'oops' at data row 3"
    ):
        read_xy_csv(path, ["x"], "y")


def test_decimal_comma_read_when_the_delimiter_is_not_a_comma(tmp_path):
    ds = read_xy_csv(write(tmp_path, "x;y\n1;2,5\n2;3,5\n3;4,0\n"), ["x"], "y")
    np.testing.assert_array_equal(ds.y, [2.5, 3.5, 4.0])


def test_decimal_comma_in_a_comma_separated_file_is_refused_with_a_hint(tmp_path):
    path = write(tmp_path, 'x,y\n1,"2,5"\n2,"3,5"\n3,"4,0"\n')
    with pytest.raises(InputError, match=r"'2,5' at data row 1.*ambiguous.*write 2\.5"):
        read_xy_csv(path, ["x"], "y")


def test_row_longer_than_header(tmp_path):
    with pytest.raises(InputError, match=r"more fields than the header"):
        read_xy_csv(write(tmp_path, "x,y\n1,2,9\n2,3\n3,5\n"), ["x"], "y")
    with pytest.raises(InputError, match=r"not a well-formed CSV file"):
        read_xy_csv(write(tmp_path, "x,y\n1,2\n2,3,9\n3,5\n"), ["x"], "y")


MISSING = "x,y,g\n1,2,a\n2,,a\n3,NaN,b\n4,inf,b\nNA,5,a\n6,7,\n7,8,b\n8,9,a\n"


def test_missing_and_infinite_rows_dropped_and_counted(tmp_path):
    ds = read_xy_csv(write(tmp_path, MISSING), ["x"], "y")
    np.testing.assert_array_equal(ds.X[:, 0], [1, 6, 7, 8])
    assert ds.dropped == 4
    assert "Dropped 4 of 8 rows" in ds.notes and "'y': 3" in ds.notes and "'x': 1" in ds.notes
    assert "first at data row 2" in ds.notes
    grouped = read_xy_csv(write(tmp_path, MISSING), ["x"], "y", group_col="g")
    assert grouped.dropped == 5 and grouped.group_names == ("a", "b")
    np.testing.assert_array_equal(grouped.X[:, 0], [1, 7, 8])


def test_missing_rows_strict(tmp_path):
    with pytest.raises(InputError, match=r"data\.csv: 4 of 8 rows have a missing or non-finite.*strict mode"):
        read_xy_csv(write(tmp_path, MISSING), ["x"], "y", strict=True)


def test_too_few_rows_after_dropping(tmp_path):
    path = write(tmp_path, "x,y\n1,2\n2,\n3,4\n")
    with pytest.raises(InputError, match=r"only 2 usable row\(s\) after dropping 1.*at least 3"):
        read_xy_csv(path, ["x"], "y")
    assert read_xy_csv(path, ["x"], "y", min_rows=2).y.size == 2


def test_constant_target(tmp_path):
    with pytest.raises(InputError, match=r"target column 'y' is constant \(every usable value is 2\.5\)"):
        read_xy_csv(write(tmp_path, "x,y\n1,2.5\n2,2.5\n3,2.5\n4,\n"), ["x"], "y")


def test_constant_input_is_noted_not_refused(tmp_path):
    ds = read_xy_csv(write(tmp_path, "x,c,y\n1,0,2\n2,0,3\n3,0,5\n"), ["x", "c"], "y")
    assert "'c' are constant" in ds.notes
