"""A Ctrl-C while the controller finishes the bundle waits until the bundle is whole."""

from __future__ import annotations

import os
import signal

import pytest

from orchestrator.execute.apply.interrupts import signals_deferred


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_the_block_is_raised_after_it(sig: signal.Signals) -> None:
    before = signal.getsignal(sig)
    finished: list[str] = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), sig)
        finished.append("the rest of the block ran")
    assert finished == ["the rest of the block ran"]
    assert signal.getsignal(sig) is before  # handlers are restored


def test_no_signal_no_interrupt() -> None:
    with signals_deferred():
        pass
