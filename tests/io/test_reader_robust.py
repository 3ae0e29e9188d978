"""read_xy_csv on valid inputs it used to refuse or misread: a header wider than the
first 64 KiB, a Latin-1 byte far into the file, ``#`` comment lines, decimal commas, pipes and FIFOs.

Every expected value is what the test wrote, never what the reader returned for another input.
"""

from __future__ import annotations

import argparse
import csv
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest

from bayes_rbfn.cli.options import load_data
from bayes_rbfn.io.reader import InputError, read_xy_csv

ROOT = Path(__file__).resolve().parents[2]
posix_only = pytest.mark.skipif(os.name != "posix", reason="pipes as paths (/dev/fd, mkfifo) are POSIX")

X = [0.5, 1.25, 2.0, 3.75, 5.5]
Y = [0.1, -0.4, 2.5, 1e-300, 7.0e12]


def rows(sep: str = ",", decimal: str = ".") -> list[str]:
    return [f"{x!r}{sep}{y!r}".replace(".", decimal) for x, y in zip(X, Y, strict=True)]


def assert_xy(ds, x=X, y=Y) -> None:
    np.testing.assert_array_equal(ds.X[:, 0], x)
    np.testing.assert_array_equal(ds.y, y)
    assert ds.X.dtype == ds.y.dtype == np.float64


# --------------------------------------------------------------------------------------------------
# Size and encoding: decided on the whole file, not its first 64 KiB


def test_header_wider_than_64_kib(tmp_path):
    filler = [f"unused_column_{i:05d}" for i in range(4000)]  # 4000 × 20 bytes ≈ 80 KB before x and y
    header = ",".join([*filler, "x", "y"])
    assert len(header) > 70_000
    body = [",".join(["7"] * len(filler) + [r]) for r in rows()]
    path = tmp_path / "wide.csv"
    path.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    assert_xy(read_xy_csv(path, ["x"], "y"))


@pytest.mark.parametrize("sep", [",", ";", "\t", "|"], ids=["comma", "semicolon", "tab", "pipe"])
def test_header_longer_than_the_csv_modules_field_limit(tmp_path, sep):
    """A header of 12,000 columns (156 KB): longer than the 131,072 characters the csv module takes as one
    field, as it is when split at a delimiter the file does not use. Read, and the limit left as it was."""
    filler = [f"column_{i:05d}" for i in range(12_000)]
    header = sep.join([*filler[:6_000], "x", *filler[6_000:], "y"])
    assert len(header) > csv.field_size_limit()
    body = [sep.join(["7"] * 6_000 + [r.split(",")[0]] + ["7"] * 6_000 + [r.split(",")[1]]) for r in rows()]
    path = tmp_path / "wide.csv"
    path.write_text("\n".join([header, *body]) + "\n", encoding="utf-8")
    limit = csv.field_size_limit()
    assert_xy(read_xy_csv(path, ["x"], "y"))
    assert csv.field_size_limit() == limit


@pytest.mark.parametrize("encoding", ["latin-1", "utf-8"])
def test_non_ascii_group_label_after_byte_70000(tmp_path, encoding):
    lines = ["x,site,y"] + [f"{i},plain,{i % 7}" for i in range(9000)] + ["9000,café,3", "9001,café,4"]
    data = "\n".join(lines).encode(encoding)
    assert data.index("é".encode(encoding)) > 70_000
    path = tmp_path / "late.csv"
    path.write_bytes(data)
    ds = read_xy_csv(path, ["x"], "y", group_col="site")
    assert ds.group_names == ("café", "plain")
    np.testing.assert_array_equal(ds.y[-3:], [8999 % 7, 3, 4])
    np.testing.assert_array_equal(ds.group[-3:], [1, 0, 0])


def test_latin1_column_name_after_byte_70000(tmp_path):
    header = ",".join([f"c{i:06d}" for i in range(10_000)] + ["Größe", "y"])
    data = (header + "\n" + "\n".join(",".join(["0"] * 10_000 + [r]) for r in rows())).encode("latin-1")
    assert data.index("ö".encode("latin-1")) > 70_000
    path = tmp_path / "late_name.csv"
    path.write_bytes(data)
    ds = read_xy_csv(path, ["Größe"], "y")
    assert ds.x_names == ("Größe",)
    assert_xy(ds)


def test_windows_1252_characters(tmp_path):
    """Spreadsheets' "Latin-1" is Windows-1252: the euro sign is byte 0x80."""
    path = tmp_path / "cp1252.csv"
    path.write_bytes("x;Preis €;y\n1;a;2\n2;b;3\n3;c;5\n".encode("cp1252") + b"4;\xe9;6\n")
    ds = read_xy_csv(path, ["x"], "y", group_col="Preis €")
    assert ds.group_names == ("a", "b", "c", "é")


def test_utf8_bom_with_a_latin1_byte_is_refused(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_bytes(b"\xef\xbb\xbfx,y\n1,2\n2,3\n3,5\nna\xefve,1\n")
    with pytest.raises(
        InputError, match=r"byte-order mark but is not UTF-8 text \(byte 0xEF at byte 21: invalid"
    ):
        read_xy_csv(path, ["x"], "y")


@pytest.mark.parametrize(
    ("codec", "order"),
    [("utf-16-le", "little-endian"), ("utf-16-be", "big-endian")],
    ids=["le", "be"],
)
@pytest.mark.parametrize(
    "text", ["x,y\r\n" + "\r\n".join(rows()), "x;Preis €;y\n1;café;2\n"], ids=["ascii", "euro"]
)
def test_utf16_without_a_bom_is_named(tmp_path, codec, order, text):
    """UTF-16 without a byte-order mark (NUL every other byte) is named as such, not as binary data."""
    path = tmp_path / "utf16.csv"
    path.write_bytes(text.encode(codec))
    match = rf"utf16.csv: looks like UTF-16 \({order}\) without a byte-order mark; save it as UTF-8"
    with pytest.raises(InputError, match=match):
        read_xy_csv(path, ["x"], "y")


@pytest.mark.parametrize(
    "data",
    [b"x,y\n1,2\n\x00\x00\x00\x00\x00\x00\x00\x00", bytes(range(256)) * 4, b"\x00" * 64],
    ids=["nul-run", "all-bytes", "all-nul"],
)
def test_binary_data_with_nul_bytes_is_still_binary(tmp_path, data):
    path = tmp_path / "blob.csv"
    path.write_bytes(data)
    with pytest.raises(InputError, match=r"not a CSV text file \(it contains binary data"):
        read_xy_csv(path, ["x"], "y")


def test_values_are_correctly_rounded(tmp_path):
    """pandas' to_numeric reads "+8.6398938515673895e-112" one unit in the last place off."""
    path = tmp_path / "digits.csv"
    path.write_text(
        "x,y\n1,+8.6398938515673895e-112\n2,-2.2250738585072014e-308\n3,+1.7976931348623157e308\n"
    )
    ds = read_xy_csv(path, ["x"], "y")
    np.testing.assert_array_equal(
        ds.y, [8.63989385156739e-112, -2.2250738585072014e-308, 1.7976931348623157e308]
    )


# --------------------------------------------------------------------------------------------------
# Comment lines


def test_noaa_style_comment_lines_before_the_header(tmp_path):
    """The packaged CO2 series under a block of '#' lines as NOAA writes them, checked against csv."""
    original = (ROOT / "bayes_rbfn/data/co2/statsmodels_co2_weekly.csv").read_text()
    preamble = "".join(f"# {line}\n" for line in ["Mauna Loa CO2, weekly", "", "units: ppm", "x,co2"])
    path = tmp_path / "co2_noaa.csv"
    path.write_text("#" * 60 + "\n" + preamble + "#\n" + original, encoding="utf-8")
    records = list(csv.DictReader(original.splitlines()))
    full = [r for r in records if r["co2"] != ""]
    ds = read_xy_csv(path, ["date"], "co2")
    np.testing.assert_array_equal(ds.X[:, 0], [float(r["date"]) for r in full])
    np.testing.assert_array_equal(ds.y, [float(r["co2"]) for r in full])
    assert ds.dropped == len(records) - len(full) == 59
    assert "comment" not in ds.notes  # comments before the header are not worth a note


def test_comment_and_blank_lines_among_the_rows(tmp_path):
    r = rows()
    text = (
        "# made by hand\n\nx,y\r\n"
        + f"{r[0]}\n# station moved\n{r[1]}\n\n   # indented\n{r[2]}\n{r[3]}\n#\n{r[4]}"
    )
    path = tmp_path / "comments.csv"
    path.write_text(text, encoding="utf-8", newline="")
    ds = read_xy_csv(path, ["x"], "y")
    assert_xy(ds)
    assert ds.dropped == 0
    assert "Skipped 3 comment line(s)" in ds.notes and "line 5" in ds.notes


def test_hash_inside_a_line_is_data(tmp_path):
    path = tmp_path / "hash.csv"
    path.write_text("x,tag,y\n1,site#1,2\n2,site#2,3\n3,site#1,5\n", encoding="utf-8")
    ds = read_xy_csv(path, ["x"], "y", group_col="tag")
    assert ds.group_names == ("site#1", "site#2")
    path.write_text("x,y\n1,2\n2,3 # corrected\n3,5\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"'3 # corrected' at data row 2 \(line 3 of the file\)"):
        read_xy_csv(path, ["x"], "y")


def test_spreadsheet_error_at_line_start_is_a_row_not_a_comment(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_text("x,y\n1,2\n#N/A,9\n2,3\n3,5\n", encoding="utf-8")
    ds = read_xy_csv(path, ["x"], "y")
    assert ds.dropped == 1 and "first at data row 2, line 3 of the file" in ds.notes
    path.write_text("x,y\n1,2\n#DIV/0!,9\n2,3\n3,5\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"'#DIV/0!' at data row 2"):
        read_xy_csv(path, ["x"], "y")


def test_quoted_field_over_several_lines_keeps_its_hash_and_blank_lines(tmp_path):
    path = tmp_path / "quoted.csv"
    path.write_text('x,note,y\n1,"a\n#b\n\nc",2\n2,"say ""hi""",3\n3,plain,5\n', encoding="utf-8")
    ds = read_xy_csv(path, ["x"], "y", group_col="note")
    assert ds.group_names == ("a\n#b\n\nc", "plain", 'say "hi"')
    np.testing.assert_array_equal(ds.y, [2, 3, 5])


def test_header_written_as_a_comment_is_named_in_the_message(tmp_path):
    path = tmp_path / "savetxt.csv"
    path.write_text("# x,y\n1,2\n2,3\n3,5\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"no column 'x'\. The comment line 1 names it; .*remove its '#'"):
        read_xy_csv(path, ["x"], "y")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("# only\n#comments\n", r"is empty \(only blank and comment lines\)"),
        ("x,y\n# nothing\n", r"has a header but no data rows"),
        ('x,y\n1,2\n2,"3\n3,5\n', r"quoted field opened on line 3 is never closed"),
        ("x,y\n# c\n1,2\n2,3,9\n3,5\n", r"not a well-formed CSV file \(.*line 4, saw 3"),
    ],
    ids=["only-comments", "comments-after-header", "unclosed-quote", "long-row-line-number"],
)
def test_comment_related_refusals(tmp_path, text, match):
    path = tmp_path / "bad.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=match):
        read_xy_csv(path, ["x"], "y")


# --------------------------------------------------------------------------------------------------
# Decimal commas


@pytest.mark.parametrize("sep", [";", "\t", "|"], ids=["semicolon", "tab", "pipe"])
def test_decimal_comma(tmp_path, sep):
    path = tmp_path / "comma.csv"
    path.write_text(f"x{sep}y\n" + "\n".join(rows(sep, ",")) + "\n", encoding="utf-8")
    assert_xy(read_xy_csv(path, ["x"], "y"))


def test_decimal_comma_from_the_brief(tmp_path):
    path = tmp_path / "brief.csv"
    path.write_text("x;y\n1,5;2,25\n2;-3,5e2\n,25;4\n", encoding="utf-8")
    ds = read_xy_csv(path, ["x"], "y")
    np.testing.assert_array_equal(ds.X[:, 0], [1.5, 2.0, 0.25])
    np.testing.assert_array_equal(ds.y, [2.25, -350.0, 4.0])


def test_commas_in_the_names_of_a_semicolon_file(tmp_path):
    """Split by commas the header has three fields, by semicolons two: the rows say which is right."""
    path = tmp_path / "units.csv"
    path.write_text("Temp, °C;Druck, hPa\n1,5;1013\n2;1009,5\n3,25;1011\n", encoding="utf-8")
    ds = read_xy_csv(path, ["Temp, °C"], "Druck, hPa")
    np.testing.assert_array_equal(ds.X[:, 0], [1.5, 2.0, 3.25])
    np.testing.assert_array_equal(ds.y, [1013.0, 1009.5, 1011.0])


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "x;y\n1,5;2\n2.5;3\n3;5\n",
            r"decimal comma \('1,5' in column 'x'.*decimal point \('2\.5' in column 'x'",
        ),
        (
            "x;y\n1;2,5\n2.5;3\n3;5\n",
            r"decimal comma \('2,5' in column 'y'.*decimal point \('2\.5' in column 'x'",
        ),
        ("x;y\n1;1.234,5\n2;3\n3;5\n", r"'1\.234,5' at data row 1.*thousands are not supported"),
        ("x;y\n1;1,234,567\n2;3\n3;5\n", r"'1,234,567'.*thousands are not supported"),
        ('x,y\n1,"1,5"\n2,3\n3,5\n', r"'1,5'.*ambiguous in a comma-separated file: write 1\.5"),
    ],
    ids=["mixed-in-column", "mixed-across-columns", "thousands-and-comma", "comma-thousands", "comma-file"],
)
def test_ambiguous_decimal_marks_are_refused(tmp_path, text, match):
    path = tmp_path / "ambiguous.csv"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(InputError, match=match):
        read_xy_csv(path, ["x"], "y")


# --------------------------------------------------------------------------------------------------
# Pipes, FIFOs and devices: read once, whole


def writer(path_or_fd, data: bytes, start: threading.Event | None = None) -> threading.Thread:
    def write() -> None:
        if start is not None:
            start.wait(timeout=20)  # a bound, so a failing test fails instead of hanging
        fd = path_or_fd if isinstance(path_or_fd, int) else os.open(path_or_fd, os.O_WRONLY)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


BIG = ("x,y\n" + "".join(f"{i},{(i * 37) % 101}\n" for i in range(20_000))).encode()  # ≈ 180 KB


@posix_only
@pytest.mark.parametrize(
    ("data", "n"), [(("x,y\n" + "\n".join(rows())).encode(), 5), (BIG, 20_000)], ids=["small", "180kB"]
)
def test_read_from_a_pipe(data, n):
    """As ``bayes-rbfn fit <(cat data.csv)`` passes it: /dev/fd/N, a pipe that cannot be reopened."""
    r, w = os.pipe()
    try:
        assert stat.S_ISFIFO(os.stat(f"/dev/fd/{r}").st_mode)
        thread = writer(w, data)
        ds = read_xy_csv(f"/dev/fd/{r}", ["x"], "y")
        thread.join(timeout=20)
    finally:
        os.close(r)
    assert ds.y.size == n
    if n == 5:
        assert_xy(ds)
    else:
        np.testing.assert_array_equal(ds.X[:, 0], np.arange(n))
        np.testing.assert_array_equal(ds.y, (np.arange(n) * 37) % 101)


def test_on_wait_is_not_called_for_a_regular_file(tmp_path):
    path = tmp_path / "plain.csv"
    path.write_text("x,y\n" + "\n".join(rows()), encoding="utf-8")
    assert_xy(read_xy_csv(path, ["x"], "y", on_wait=lambda message: pytest.fail(message)))


@posix_only
def test_fifo_without_a_writer_reports_the_wait_then_reads(tmp_path):
    """The writer opens the FIFO only once on_wait has been called: the wait is reported, not silent."""
    fifo = tmp_path / "data.csv"
    os.mkfifo(fifo)
    told = threading.Event()
    messages: list[str] = []

    def on_wait(message: str) -> None:
        messages.append(message)
        told.set()

    thread = writer(str(fifo), ("x,y\r\n" + "\r\n".join(rows())).encode("utf-16"), start=told)
    ds = read_xy_csv(fifo, ["x"], "y", on_wait=on_wait)
    thread.join(timeout=20)
    assert_xy(ds)
    assert ds.name == "data"
    assert len(messages) == 1 and "\n" not in messages[0]
    assert messages[0].startswith(f"waiting for data on the pipe {fifo} (nothing written to it yet")


@posix_only
def test_cli_prints_the_wait_on_stderr(tmp_path, capsys):
    fifo = tmp_path / "data.csv"
    os.mkfifo(fifo)
    go = threading.Event()
    thread = writer(str(fifo), ("x,y\n" + "\n".join(rows())).encode(), start=go)
    args = argparse.Namespace(
        data=str(fifo), dataset=None, x=["x"], y="y", group=None, max_groups=None, strict=False, quiet=True
    )
    timer = threading.Timer(0.5, go.set)  # the writer comes half a second late
    timer.start()
    try:
        data, _ = load_data(args)
    finally:
        timer.cancel()
        go.set()
        thread.join(timeout=20)
    assert_xy(data)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert (
        captured.err
        == f"waiting for data on the pipe {fifo} (nothing written to it yet; Ctrl-C to stop) ...\n"
    )


@posix_only
def test_fifo_closed_without_data_is_empty(tmp_path):
    fifo = tmp_path / "nothing.csv"
    os.mkfifo(fifo)
    thread = writer(str(fifo), b"")
    with pytest.raises(InputError, match=r"nothing\.csv: is empty \(0 bytes; nothing was written to it\)"):
        read_xy_csv(fifo, ["x"], "y", on_wait=lambda message: None)
    thread.join(timeout=20)


@posix_only
@pytest.mark.parametrize(
    ("device", "match"),
    [("/dev/null", r"is empty \(0 bytes; nothing"), ("/dev/zero", r"not a CSV text file \(.*NUL")],
    ids=["null", "zero"],
)
def test_devices_end_or_are_refused(device, match):
    """/dev/zero never ends: the reader stops at its first NUL bytes instead of filling memory."""
    if not os.path.exists(device):
        pytest.skip(f"no {device}")
    with pytest.raises(InputError, match=match):
        read_xy_csv(device, ["x"], "y")


def test_group_labels_that_look_like_missing_markers_are_labels(tmp_path):
    """Namibia's code NA, a group called None: labels, not missing values (only number columns take
    pandas' missing markers); an NA in a number column still drops its row."""
    path = tmp_path / "countries.csv"
    rows = [
        ("NA", 1, 2.0),
        ("NA", 2, 2.5),
        ("ZA", 1, 3.0),
        ("ZA", 2, "NA"),
        ("None", 1, 4.0),
        ("None", 2, 4.5),
    ]
    path.write_text("country,t,y\n" + "".join(f"{c},{t},{y}\n" for c, t, y in rows))
    data = read_xy_csv(path, ["t"], "y", group_col="country")
    assert data.group_names == ("NA", "None", "ZA")
    np.testing.assert_array_equal(data.y, [2.0, 2.5, 3.0, 4.0, 4.5])
    np.testing.assert_array_equal(data.group, [0, 0, 2, 1, 1])
    assert data.dropped == 1
