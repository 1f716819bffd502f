"""benchmarks/sass_phases.py on a small disassembly and ncu export written here: activities from the source-line
rules (a header's inlined code counted where the kernel calls it), executed counts and stall samples joined per
instruction, a launch's table that ncu wrote twice read once, and an export of another build refused."""

from pathlib import Path

import pytest

from benchmarks import sass_phases

FILE = "/src/plugin/kernels/wtconvTinyPlane.cuh"
# Two kernels; the second has 4 instructions: setup (line 240), an FFMA of the base convolution (line 360), an FFMA
# inlined from a header that no rule names at line 360 (so it counts where it was inlined: base convolution), and a
# store (line 400).
SASS = f"""
.text._Z5otherv:
        /*0000*/                   EXIT ;
.text._Z4tinyv:
	//## File "{FILE}", line 240
        /*0000*/                   LDC R1, c[0x0][0x28] ;
	//## File "{FILE}", line 360
        /*0010*/                   FFMA R2, R3, R4, R2 ;
	//## File "/usr/local/cuda/include/cuda_fp16.hpp", line 60 inlined at "{FILE}", line 360
	//## File "{FILE}", line 360
        /*0020*/               @P0 FFMA R5, R3, R4, R5 ;
	//## File "{FILE}", line 400
        /*0030*/                   STG.E desc[UR4][R6.64], R2 ;
"""

HEADER = '"Address","Source","Instructions Executed","stall_long_sb","stall_wait","stall_long_sb (Not Issued)"\n'


def table(kernel: str, rows: list[tuple[str, int, int, int]]) -> str:
    body = "".join(f'"0x{i:x}","      {src}","{n:,}","{sb}","{w}","0"\n' for i, (src, n, sb, w) in enumerate(rows))
    return f'"Kernel Name","{kernel}",\n' + HEADER + body


ROWS = [
    ("LDC R1, c[0x0][0x28]", 10, 5, 0),
    ("FFMA R2, R3, R4, R2", 1000, 0, 2),
    ("@P0 FFMA R5, R3, R4, R5", 1000, 1, 1),
]
ROWS.append(("STG.E desc[UR4][R6.64], R2", 10, 0, 1))


@pytest.fixture
def files(tmp_path):
    sass = tmp_path / "k.sass"
    sass.write_text(SASS)
    export = tmp_path / "source.csv"
    # launch 0 written twice in a row (as ncu 2025.3 does), then launch 1 of the same kernel with other counts
    other = [(src, n * 2, sb, w) for src, n, sb, w in ROWS]
    export.write_text(table("tiny", ROWS) + table("tiny", ROWS) + table("tiny", other))
    return sass, export


def test_launches_are_read_once_each(files):
    _, export = files
    launches = sass_phases.load_launches(export)
    assert [sum(launch["counts"]) for launch in launches] == [2020, 4040]
    assert launches[0]["opcodes"] == ["LDC", "FFMA", "FFMA", "STG.E"]
    assert launches[0]["stalls"][0] == {"long_sb": 5, "wait": 0}


def test_activities_counts_and_stalls_per_pixel(files, capsys):
    sass, export = files
    args = ["--sass", str(sass), "--kernel", "_Z4tinyv", "--rules", "tinyPlaneKernel", "--counts", str(export)]
    assert sass_phases.main([*args, "--launch", "1", "--pixels", "100"]) == 0
    lines = {row.split(" | ")[0].strip("| "): row for row in capsys.readouterr().out.splitlines() if "|" in row}
    # both FFMAs are the base convolution: 2 static instructions, 2 x 2000 executed, 40 per pixel; 4 of the 10
    # stall samples (long_sb 1, wait 3)
    base = lines["base convolution"].split(" | ")
    assert base[1:5] == ["2", "4e+03", "99%", "40.00"]
    assert base[5].startswith("40%: wait 30%, long_sb 10%")
    assert lines["setup"].split(" | ")[1:5] == ["1", "20", "0%", "0.20"]
    assert lines["all"].split(" | ")[1:5] == ["4", "4.04e+03", "100%", "40.40"]


def test_an_export_of_another_build_is_refused(files, tmp_path):
    sass, _ = files
    export = tmp_path / "other.csv"
    export.write_text(table("tiny", [(src.replace("STG", "STS"), n, sb, w) for src, n, sb, w in ROWS]))
    args = ["--sass", str(sass), "--kernel", "_Z4tinyv", "--rules", "tinyPlaneKernel", "--counts", str(export)]
    with pytest.raises(SystemExit, match="instruction 3 is STS.E in the export and STG.E in the disassembly"):
        sass_phases.main(args)
    with pytest.raises(SystemExit, match="holds 1 launches, asked for index 1"):
        sass_phases.main([*args, "--launch", "1"])
    short = tmp_path / "short.csv"
    short.write_text(table("tiny", ROWS[:3]))
    with pytest.raises(SystemExit, match="has 3 SASS instructions, the disassembly 4"):
        sass_phases.main(["--sass", str(sass), "--kernel", "_Z4tinyv", "--counts", str(short)])


def test_without_counts_the_static_histogram(files, capsys):
    sass, _ = files
    assert sass_phases.main(["--sass", str(sass), "--kernel", "_Z4tinyv", "--rules", "tinyPlaneKernel"]) == 0
    out = capsys.readouterr().out
    assert "| base convolution | 2 | 50% | FFMA 100% |" in out
    assert "| store y | 1 | 25% | STG 100% |" in out
    assert sass_phases.main(["--sass", str(sass), "--kernel", "nothing"]) == 2


def test_the_rules_name_lines_of_the_kernels_as_committed():
    # every rule's file exists and its line range lies inside it (the rules follow the kernels' phase banners)
    kernels = Path(__file__).resolve().parents[1] / "plugin" / "kernels"
    for rules in sass_phases.RULES.values():
        for file, first, last, _ in rules:
            lines = (kernels / file).read_text().count("\n")
            assert 1 <= first <= last <= lines, (file, first, last, lines)
