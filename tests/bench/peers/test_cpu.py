"""CPU readings from a fake ``/proc``: what a process tree and one process add up to."""

from __future__ import annotations

from pathlib import Path

from bench.peers.cpu import process_ticks, program_is, tree_ticks


def _process(proc: Path, pid: int, ppid: int, ticks: tuple[int, int, int, int],
             comm: str = "python") -> None:  # fmt: skip
    """A /proc/<pid> whose stat has these utime, stime, cutime and cstime."""
    directory = proc / str(pid)
    directory.mkdir()
    fields = ["S", str(ppid), *["7"] * 9, *map(str, ticks), *["9"] * 5]
    (directory / "stat").write_text(f"{pid} ({comm}) {' '.join(fields)}\n")
    (directory / "comm").write_text(f"{comm}\n")


def test_process_ticks_add_user_system_and_reaped_children_time(tmp_path: Path) -> None:
    _process(tmp_path, 10, 1, (100, 20, 3, 4), comm="celery) (worker")

    assert process_ticks(10, proc=tmp_path) == 127


def test_process_ticks_of_a_process_that_is_gone_are_none(tmp_path: Path) -> None:
    assert process_ticks(10, proc=tmp_path) is None


def test_tree_ticks_count_the_root_and_its_descendants_only(tmp_path: Path) -> None:
    _process(tmp_path, 1, 0, (1000, 0, 0, 0), comm="init")
    _process(tmp_path, 10, 1, (100, 10, 0, 0))
    _process(tmp_path, 11, 10, (20, 2, 0, 0), comm="runner")
    _process(tmp_path, 12, 11, (3, 0, 0, 0), comm="runner")
    _process(tmp_path, 20, 1, (500, 0, 0, 0), comm="postgres")

    assert tree_ticks(10, proc=tmp_path) == 135


def test_program_is_reads_the_command_name(tmp_path: Path) -> None:
    _process(tmp_path, 30, 1, (0, 0, 0, 0), comm="postgres")

    assert program_is(30, ("postgres",), proc=tmp_path)
    assert not program_is(30, ("redis", "valkey"), proc=tmp_path)
    assert not program_is(31, ("postgres",), proc=tmp_path)
