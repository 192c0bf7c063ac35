"""Whose notification the supervisor reads (dbsvc/supervisor.py rule 2, `notification_sender`): the pid the
kernel stamps on a datagram of its abstract notification socket (SO_PASSCRED, SCM_CREDENTIALS:
pid, uid, gid), taken only when the sender runs as this user. Real AF_UNIX datagram sockets;
the ancillary data is read with `recvmsg` as the supervisor reads it. Fixture-free, so
`bench/mutation_inprocess.py` runs it (session 18, wt-mpo8: supervisor.py had never been run)."""

from __future__ import annotations

import os
import socket
import struct

import pytest

from dbsvc.supervisor import notification_sender


def _received(credentials: tuple[int, int, int] | None) -> list[tuple[int, int, bytes]]:
    """The ancillary data of one datagram sent with `credentials` (or none given: the kernel's)."""
    inbox, outbox = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with inbox, outbox:
        inbox.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        if credentials is None:
            outbox.send(b"READY=1")
        else:
            cmsg = (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, struct.pack("3i", *credentials))
            outbox.sendmsg([b"READY=1"], [cmsg])
        _data, ancillary, _flags, _address = inbox.recvmsg(4096, socket.CMSG_SPACE(12))
    return ancillary


def test_the_sender_is_the_pid_the_kernel_stamps():
    assert notification_sender(_received(None)) == os.getpid()


@pytest.mark.skipif(os.getuid() != 0, reason="only root may send another user's credentials")
def test_a_sender_of_another_user_is_not_taken():
    assert notification_sender(_received((os.getpid(), os.getuid() + 1, os.getgid()))) is None


def test_ancillary_data_that_is_not_credentials_names_no_sender():
    pid_uid_gid = struct.pack("3i", os.getpid(), os.getuid(), os.getgid())
    assert notification_sender([]) is None
    assert notification_sender([(socket.SOL_SOCKET, socket.SCM_RIGHTS, pid_uid_gid)]) is None
    assert notification_sender([(socket.SOL_SOCKET + 1, socket.SCM_CREDENTIALS, pid_uid_gid)]) is None
    assert notification_sender([(socket.SOL_SOCKET, socket.SCM_CREDENTIALS, pid_uid_gid[:11])]) is None


def test_credentials_after_other_ancillary_data_are_found():
    pid_uid_gid = struct.pack("3i", 4321, os.getuid(), os.getgid())
    ancillary = [
        (socket.SOL_SOCKET, socket.SCM_RIGHTS, b"\0" * 4),
        (socket.SOL_SOCKET, socket.SCM_CREDENTIALS, pid_uid_gid),
    ]
    assert notification_sender(ancillary) == 4321
