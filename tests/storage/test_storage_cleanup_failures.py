"""A compaction's clean-up that itself fails (storage/files.py `write_durably`'s removal of
a partial file, compact.py `install`'s removal of its `.new` files before the commit
point): the failure is logged with the path or directory and what went wrong, and the
error that stopped the write is the one raised, never the clean-up's. The clean-up is made
to fail for real: a directory stands where a file is to be unlinked (EISDIR). Session 24's
mutation pass found these lines held by no test: the log lines emptied or made None, and
the clean-up's own error raised over the first one, all survived."""

from __future__ import annotations

import logging
import os

import pytest

from dbsvc.storage import compact, files
from dbsvc.storage.files import FaultPlan
from dbsvc.storage.snapshot import ModelImage, SnapshotImage

EPOCH = "0123456789abcdef0123456789abcdef"


def test_a_partial_file_that_cannot_be_removed_is_logged_and_the_fill_s_error_raised(tmp_path, caplog):
    path = str(tmp_path / "snapshot.new")

    def fill(fd: int) -> None:
        files.write_all(fd, b"partial")
        os.unlink(path)  # the name now a directory: the removal fails with EISDIR
        os.mkdir(path)
        raise OSError(28, "No space left on device (the fill's own error)")

    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        with pytest.raises(OSError, match="the fill's own error"):
            files.write_durably(path, fill)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line.startswith(f"could not remove the partial {path} (the next open will): ")
    assert "Is a directory" in line
    assert os.path.isdir(path)


def test_a_partial_file_already_gone_is_no_failure(tmp_path, caplog):
    path = str(tmp_path / "log.tmp")

    def fill(fd: int) -> None:
        os.unlink(path)
        raise OSError(5, "Input/output error (the fill's own error)")

    with caplog.at_level(logging.DEBUG, logger="dbsvc.storage"):
        with pytest.raises(OSError, match="the fill's own error"):
            files.write_durably(path, fill)
    assert not caplog.records and not os.path.exists(path)


def test_an_install_whose_clean_up_fails_logs_it_and_raises_the_install_s_error(tmp_path, caplog):
    """`install` failing after step 1 (an injected EIO) removes its `.new` files; a directory
    named log.new stops that removal at its first unlink: the directory's failure is logged
    naming the tenant's directory, the EIO is what is raised, and snapshot.new (not reached)
    stays for the next open, as a crash there would leave it."""
    directory = str(tmp_path)
    os.mkdir(os.path.join(directory, "log.new"))
    image = SnapshotImage(EPOCH, 1, [ModelImage("User", ["id", "name"], [[1, "Ann"]], 1, ["id"])])
    with caplog.at_level(logging.ERROR, logger="dbsvc.storage"):
        with pytest.raises(OSError, match=r"injected by DBSVC_FAULT compact:1"):
            compact.install(directory, image, FaultPlan("compact:1:EIO"))
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert line.startswith(f"{directory}: could not discard an unfinished compaction (the next open will): ")
    assert "Is a directory" in line
    assert sorted(os.listdir(directory)) == ["log.new", "snapshot.new"]


def test_an_install_failing_before_its_commit_point_leaves_nothing_behind(tmp_path):
    """The same failure with nothing in the way: both steps' files gone, nothing logged."""
    directory = str(tmp_path)
    image = SnapshotImage(EPOCH, 1, [ModelImage("User", ["id", "name"], [[1, "Ann"]], 1, ["id"])])
    for step in (1, 2, 3):
        with pytest.raises(OSError, match=f"injected by DBSVC_FAULT compact:{step}"):
            compact.install(directory, image, FaultPlan(f"compact:{step}:EIO"))
        assert os.listdir(directory) == [], step
